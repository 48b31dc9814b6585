"""How the operator connects to the API server: which config, how many kept connections, keepalive.

Separate from the calls (client.py) because it is decided once per process, by ``handlers.py``;
tests build their clients the same way.
"""

from __future__ import annotations

from kubernetes import client, config


def load_api_client(pool_size: int) -> client.ApiClient:
    """In-cluster config when running in a pod, else the current kubeconfig."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(client_configuration=cfg)
    return client.ApiClient(tuned(cfg, pool_size))


def tuned(cfg: client.Configuration, pool_size: int) -> client.Configuration:
    """Connection settings of every client the operator uses.

    TCP keepalive with client-go's timings (30 s idle): a half-open connection (an API server
    that vanished behind a load balancer or NAT) is found dead within ~2.5 min instead of never,
    so neither a worker nor the pod watch can hang on it. Calls also carry REQUEST_TIMEOUT. The
    pool keeps ``pool_size`` connections, one per thread that may call at once; a connection goes
    back to it only once its response is read to the end (``KubeClient._call`` makes sure).
    """
    cfg.keep_alive = True
    cfg.connection_pool_maxsize = max(pool_size, 4)
    return cfg

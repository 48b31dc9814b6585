"""The only module that talks to the Kubernetes API (the official ``kubernetes`` client).

Everything it returns is a plain dict shaped like the API's JSON (camelCase), so every other module
is pure and testable without a cluster. Every client exception is turned into a ``CliError`` here
(via ``kube_errors``): callers never see a urllib3 or ApiException traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from dpjob_cli.errors import CliError
from dpjob_cli.kube_errors import Target, no_kubeconfig, translate_api_error, unreachable
from dpjob_cli.log_options import WHOLE_LOG, LogOptions

GROUP, VERSION, PLURAL, KIND = "dpjob.io", "v1alpha1", "dataparalleljobs", "DataParallelJob"
REQUEST_TIMEOUT = 30.0  # seconds per ordinary call; log streams have none
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
OPERATOR_LABEL = "app.kubernetes.io/name=dpjob-operator"
T = TypeVar("T")


def kubeconfig_path(explicit: str | None) -> str:
    """What kubectl reads: --kubeconfig, else $KUBECONFIG (a list is merged), else ~/.kube/config."""
    return explicit or os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())


class Kube:
    """A connection to one cluster, as the kubeconfig (or the pod's service account) describes it."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        self.kubeconfig = kubeconfig_path(kubeconfig)
        cfg = client.Configuration()
        self.default_namespace = self._load(cfg, context)
        cfg.retries = 0  # a dead API server should fail in a second, not after urllib3's 3 retries
        self.server = str(cfg.host)
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _load(self, cfg: client.Configuration, context: str | None) -> str:
        paths = [Path(p).expanduser() for p in self.kubeconfig.split(os.pathsep) if p]
        if not any(p.exists() for p in paths) and os.environ.get("KUBERNETES_SERVICE_HOST"):
            self.kubeconfig = "in-cluster service account"
            config.load_incluster_config(client_configuration=cfg)
            return SA_NAMESPACE.read_text().strip() if SA_NAMESPACE.exists() else "default"
        if not any(p.exists() for p in paths):
            raise no_kubeconfig(self.kubeconfig, "no kubeconfig file")
        try:
            config.load_kube_config(config_file=self.kubeconfig, context=context, client_configuration=cfg)
            _, active = config.list_kube_config_contexts(config_file=self.kubeconfig)
        except (config.ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise no_kubeconfig(self.kubeconfig, f"unusable kubeconfig: {first}") from None
        if context:
            contexts, _ = config.list_kube_config_contexts(config_file=self.kubeconfig)
            active = next((c for c in contexts if c.get("name") == context), active)
        return str((active.get("context") or {}).get("namespace") or "default")

    # ----------------------------------------------------------------- error translation

    def _target(self, kind: str, name: str | None = None, namespace: str | None = None) -> Target:
        return Target(kind=kind, name=name, namespace=namespace, server=self.server, kubeconfig=self.kubeconfig)

    def _call(self, target: Target, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise translate_api_error(int(exc.status or 0), exc.body, target) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise unreachable(self.server, self.kubeconfig, _reason(exc)) from None

    def _json(self, target: Target, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call without the client's model decoding: the API's own JSON, camelCase keys."""
        resp = self._call(target, fn, *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        return json.loads(resp.data)

    # ----------------------------------------------------------------- DataParallelJobs

    def create_job(self, namespace: str, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Create (or, with ``dry_run``, only validate and default) a job; strict field validation
        turns a typo such as ``spec.replicaz`` into an error that names it."""
        extra = {"dry_run": "All"} if dry_run else {}
        target = self._target(KIND, body.get("metadata", {}).get("name"), namespace)
        result: dict[str, Any] = self._json(target, self.custom.create_namespaced_custom_object, GROUP, VERSION,
                                            namespace, PLURAL, body, field_validation="Strict", **extra)
        return result

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json(self._target(KIND, name, namespace),
                                            self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace,
                                            PLURAL, name)
        return result

    def list_jobs(self, namespace: str | None, selector: str | None = None) -> list[dict[str, Any]]:
        """Jobs of one namespace, or of every namespace when ``namespace`` is None; ``selector``: labels."""
        target = self._target(KIND, None, namespace)
        extra = {"label_selector": selector} if selector else {}
        if namespace is None:
            data = self._json(target, self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, **extra)
        else:
            data = self._json(target, self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                              **extra)
        return list(data.get("items") or [])

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete in the foreground's spirit: the owner references take the pods and ConfigMaps along."""
        self._json(self._target(KIND, name, namespace), self.custom.delete_namespaced_custom_object, GROUP,
                   VERSION, namespace, PLURAL, name, propagation_policy="Background")

    # ----------------------------------------------------------------- core objects

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        target = self._target("ConfigMap", body["metadata"]["name"], namespace)
        result: dict[str, Any] = self._json(target, self.core.create_namespaced_config_map, namespace, body)
        return result

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        data = self._json(self._target("pod", None, namespace), self.core.list_namespaced_pod, namespace,
                          label_selector=selector)
        return list(data.get("items") or [])

    def list_events(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """The core/v1 Events about the job with this uid (a previous job of the same name has another)."""
        data = self._json(self._target("event", None, namespace), self.core.list_namespaced_event, namespace,
                          field_selector=f"involvedObject.kind={KIND},involvedObject.uid={uid}")
        return list(data.get("items") or [])

    def list_active_pods(self) -> list[dict[str, Any]]:
        """Every pod that still holds resources on its node (not Succeeded or Failed), cluster-wide."""
        data = self._json(self._target("pod"), self.core.list_pod_for_all_namespaces,
                          field_selector="status.phase!=Succeeded,status.phase!=Failed")
        return list(data.get("items") or [])

    def list_nodes(self) -> list[dict[str, Any]]:
        return list((self._json(self._target("node"), self.core.list_node).get("items")) or [])

    def read_log(self, namespace: str, pod: str, container: str, options: LogOptions = WHOLE_LOG) -> str:
        """One container's log so far, the part ``options`` ask for (tail, since, previous, timestamps)."""
        resp = self._call(self._target("pod", pod, namespace), self.core.read_namespaced_pod_log, pod, namespace,
                          container=container, _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
                          **options.api_kwargs())
        return bytes(cast(Any, resp).data).decode(errors="replace")

    def stream_log(self, namespace: str, pod: str, container: str,
                   options: LogOptions = WHOLE_LOG) -> Iterator[str]:
        """Follow one container's log (from its first line, or as ``options`` say) until the container
        ends (or the pod goes)."""
        stream = watch.Watch().stream(self.core.read_namespaced_pod_log, name=pod, namespace=namespace,
                                      container=container, **options.api_kwargs())
        target = self._target("pod", pod, namespace)
        while True:
            try:
                line = self._call(target, next, stream)
            except StopIteration:
                return
            yield str(line)

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` in ``group/version`` (discovery; False when it cannot say)."""
        try:
            data = self._json(self._target("API group", f"{group}/{version}"), self.custom.get_api_resources,
                              group, version)
        except CliError:
            return False
        return any(r.get("name") == plural for r in data.get("resources") or [])

    def operator_config(self) -> str | None:
        """The installed operator's config.json (its node pools), or None when it cannot be read."""
        try:
            data = self._json(self._target("ConfigMap"), self.core.list_config_map_for_all_namespaces,
                              label_selector=OPERATOR_LABEL)
        except CliError:
            return None  # not allowed to list ConfigMaps cluster-wide: the operator's defaults apply
        for item in data.get("items") or []:
            text = (item.get("data") or {}).get("config.json")
            if text:
                return str(text)
        return None


def _reason(exc: BaseException) -> str:
    """The innermost cause of a connection failure, e.g. 'Connection refused'."""
    inner: BaseException | None = exc
    while inner is not None:
        reason = getattr(inner, "reason", None)
        if isinstance(reason, BaseException) and reason is not inner:
            inner = reason
            continue
        if inner.__cause__ is not None:
            inner = inner.__cause__
            continue
        break
    text = str(inner or exc)
    # urllib3 wraps refusals as "<...NewConnectionError ...>: Failed to establish a new connection: [Errno 111] ..."
    return text.rsplit("] ", 1)[-1] if "] " in text else text

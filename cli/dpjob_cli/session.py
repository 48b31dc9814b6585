"""The global options of one CLI invocation, and the cluster connection made from them on first use.

Commands that need no cluster (``run --dry-run``, ``explain --offline``) never connect, so they work
on a laptop without a kubeconfig.
"""

from __future__ import annotations

from dpjob_cli.errors import CliError
from dpjob_cli.sdk import Client


class Session:
    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
        self.kubeconfig, self.context, self.namespace = kubeconfig, context, namespace
        self._client: Client | None = None

    def client(self) -> Client:
        """The connection (kubeconfig loaded once); raises CliError(NO_CLUSTER) when there is none."""
        if self._client is None:
            self._client = Client(self.namespace, self.kubeconfig, self.context)
        return self._client

    def namespace_offline(self) -> str:
        """The namespace without needing a cluster: -n, else the kubeconfig context's, else 'default'."""
        if self.namespace:
            return self.namespace
        try:
            return self.client().namespace
        except CliError:
            return "default"

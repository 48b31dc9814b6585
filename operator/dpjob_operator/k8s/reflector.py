"""client-go's Reflector, for one resource and label selector: list, then watch from the list's
resourceVersion, and list again whenever the watch cannot go on.

One daemon thread per namespace (the official client is synchronous). The cache that owns the
reflector decides what to keep: ``replace(namespace, items)`` after every list (swap the whole
namespace in at once, see ``podcache``) and ``apply(event_type, obj)`` for every watch event.
A 410 ("too old resource version") relists at once; any other failure relists after an
exponential backoff (0.5 s to 30 s). ``synced`` is set after the first list of every namespace,
so nothing reads an empty cache after an operator restart as if it were the truth.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from dpjob_operator.k8s.client import KubeClient
from dpjob_operator.k8s.listing import Resource, list_raw, watch_raw

log = logging.getLogger("dpjob.reflector")

# Silence longer than this means a wedged watch: 2.5x a watch's longest life (server timeout 300 s
# plus the 30 s read deadline), for the liveness probe.
SILENCE_LIMIT = 900.0
Replace = Callable[[str | None, list[dict[str, Any]]], None]
Apply = Callable[[str, dict[str, Any]], None]


class Relist(Exception):
    """The watch cannot resume from its resourceVersion (410): list again."""


class Reflector:
    def __init__(self, kube: KubeClient, resource: Resource, selector: str, namespaces: tuple[str, ...],
                 replace: Replace, apply: Apply) -> None:
        self._kube, self._resource, self._selector = kube, resource, selector
        self._replace, self._apply = replace, apply
        self._namespaces: tuple[str | None, ...] = namespaces or (None,)
        self._stop = threading.Event()
        self._synced = [threading.Event() for _ in self._namespaces]
        self._heartbeat = time.monotonic()  # the last sign of life of a list or watch (liveness)

    @property
    def synced(self) -> bool:
        return all(ev.is_set() for ev in self._synced)

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for ev in self._synced:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not ev.wait(remaining):
                return False
        return True

    def stuck(self, limit: float = SILENCE_LIMIT) -> str | None:
        """No list or watch activity for over ``limit`` seconds: the watch is wedged (each watch
        call ends by the server's 300 s timeout or the 330 s read deadline, then starts again)."""
        quiet = time.monotonic() - self._heartbeat
        return f"the {self._resource.plural} watch has been silent for {quiet:.0f}s" if quiet > limit else None

    def start(self) -> None:
        for ns, synced in zip(self._namespaces, self._synced, strict=True):
            threading.Thread(target=self._run, args=(ns, synced), daemon=True,
                             name=f"{self._resource.plural}-{ns or 'all'}").start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self, namespace: str | None, synced: threading.Event) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                items, rv = list_raw(self._kube, self._resource, self._selector, namespace)
                self._heartbeat = time.monotonic()
                self._replace(namespace, items)
                synced.set()
                backoff = 0.5
                while not self._stop.is_set():
                    self._heartbeat = time.monotonic()  # each watch ends by the server's timeout (300 s)
                    rv = self._watch(namespace, rv)
            except Relist:
                log.info("%s watch expired; relisting", self._resource.plural)
            except (ApiException, OSError, RuntimeError, ValueError) as e:
                if getattr(e, "status", None) == 410:
                    continue
                log.warning("%s watch failed (%s); retrying in %.1fs", self._resource.plural, e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception:
                log.exception("%s watch crashed; retrying in %.1fs", self._resource.plural, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _watch(self, namespace: str | None, rv: str) -> str:
        """One watch call, to its end; returns the resourceVersion to resume from."""
        for event in watch_raw(self._kube, self._resource, self._selector, rv, namespace):
            self._heartbeat = time.monotonic()
            etype, obj = event.get("type"), event.get("object") or {}
            if etype == "ERROR":
                if obj.get("code") == 410:
                    raise Relist()
                raise RuntimeError(f"watch error: {obj.get('message')}")
            rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
            if etype != "BOOKMARK":
                self._apply(str(etype), obj)
            if self._stop.is_set():
                break
        return rv

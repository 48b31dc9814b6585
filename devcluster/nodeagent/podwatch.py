"""List + watch the pods bound to one node (field selector ``spec.nodeName=<node>``), relisting on
410 Gone and on errors; every event goes to the agent's handler."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from devcluster.nodeagent.kube import Kube, KubeError

log = logging.getLogger("nodeagent.podwatch")

Handler = Callable[[str, dict], None]
Resync = Callable[[str, set], None]


class PodWatcher(threading.Thread):
    def __init__(self, kube: Kube, node: str, handle: Handler, resync: Resync, stop: threading.Event):
        super().__init__(name=f"watch-{node}", daemon=True)
        self.kube, self.node, self.handle, self.resync, self._stop = kube, node, handle, resync, stop
        self.synced = threading.Event()

    def run(self) -> None:
        selector = f"spec.nodeName={self.node}"
        while not self._stop.is_set():
            try:
                listing = self.kube.request("GET", "/api/v1/pods", {"fieldSelector": selector})
                rv = listing["metadata"]["resourceVersion"]
                uids = set()
                for pod in listing.get("items") or []:
                    uids.add(pod["metadata"]["uid"])
                    self.handle("SYNC", pod)
                self.resync(self.node, uids)
                self.synced.set()
                while not self._stop.is_set():
                    for event in self.kube.watch("/api/v1/pods", rv, fieldSelector=selector):
                        if self._stop.is_set():
                            return
                        obj = event.get("object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if event.get("type") == "BOOKMARK":
                            continue
                        self.handle(event["type"], obj)
            except KubeError as exc:
                if exc.status == 410:
                    log.info("watch of pods on %s expired (410): relisting", self.node)
                    continue
                log.warning("pod watch on %s failed: %s; relisting in 2s", self.node, exc)
                self._stop.wait(2)
            except Exception as exc:  # noqa: BLE001 - connection drops etc.
                if not self._stop.is_set():
                    log.warning("pod watch on %s failed: %s; relisting in 2s", self.node, exc)
                    self._stop.wait(2)

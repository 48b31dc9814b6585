"""Node registration and heartbeat: Node objects with realistic capacity, a Lease in kube-node-lease
renewed every 10 s, and the Ready condition refreshed periodically (what the node lifecycle
controller watches)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import platform
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from devcluster.nodeagent.kube import Kube, KubeError

log = logging.getLogger("nodeagent.node")

AGENT_TAINT = {"key": "dpjob.io/agent", "value": "true", "effect": "NoSchedule"}
LEASE_DURATION = 40
LEASE_RENEW = 10.0
STATUS_EVERY = 30.0
VERSION = "v1.36.0-dpjob-nodeagent"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def host_memory() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1])}Ki"
    except OSError:
        pass
    return "8Gi"


@dataclass
class NodeConfig:
    names: list[str]
    pool: str
    internal_ip: str
    kubelet_port: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)
    taint: bool = True


class NodeManager:
    def __init__(self, kube: Kube, cfg: NodeConfig):
        self.kube = kube
        self.cfg = cfg
        self.uids: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.ready_since = now()

    # ------------------------------------------------------------------ objects

    def capacity(self) -> dict[str, str]:
        cap = {"cpu": str(os.cpu_count() or 1), "memory": host_memory(), "pods": "110",
               "ephemeral-storage": "100Gi"}
        cap.update(self.cfg.capacity)
        return cap

    def labels(self, name: str) -> dict[str, str]:
        return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                "dpjob.io/pool": self.cfg.pool, "type": "dpjob-agent", **self.cfg.labels}

    def conditions(self, ready: bool, reason: str = "KubeletReady",
                   message: str = "dpjob node agent is posting ready status") -> list[dict]:
        t = now()
        conds = [
            {"type": t_, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": t,
             "lastTransitionTime": self.ready_since}
            for t_, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
                             ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                             ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID"))
        ]
        conds.append({"type": "Ready", "status": "True" if ready else "False", "reason": reason, "message": message,
                      "lastHeartbeatTime": t, "lastTransitionTime": self.ready_since if ready else t})
        return conds

    def status(self, name: str, ready: bool = True) -> dict:
        cap = self.capacity()
        return {
            "capacity": cap, "allocatable": cap,
            "conditions": self.conditions(ready),
            # Only InternalIP: the apiserver prefers Hostname first, which would not resolve.
            "addresses": [{"type": "InternalIP", "address": self.cfg.internal_ip}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.cfg.kubelet_port}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": platform.release(),
                         "osImage": "dpjob node agent (processes on the host)", "containerRuntimeVersion":
                         "dpjob-nodeagent://0.1", "kubeletVersion": VERSION, "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
        }

    def manifest(self, name: str) -> dict:
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": self.labels(name),
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0", "dpjob.io/agent-pid": str(os.getpid())}},
            "spec": {"taints": [AGENT_TAINT] if self.cfg.taint else []},
            "status": self.status(name),
        }

    # ------------------------------------------------------------------ lifecycle

    def register(self) -> None:
        for name in self.cfg.names:
            self.register_one(name)

    def register_one(self, name: str) -> None:
        body = self.manifest(name)
        try:
            node = self.kube.request("POST", "/api/v1/nodes", body=body)
            log.info("node %s registered", name)
        except KubeError as exc:
            if exc.status != 409:
                raise
            node = self.kube.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {
                "labels": body["metadata"]["labels"], "annotations": body["metadata"]["annotations"]},
                "spec": {"taints": body["spec"]["taints"], "unschedulable": None}})
            log.info("node %s already existed: adopted", name)
        self.uids[name] = node["metadata"]["uid"]
        self.kube.merge_patch(f"/api/v1/nodes/{name}/status", {"status": self.status(name)})
        self.renew_lease(name)

    def renew_lease(self, name: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION, "renewTime": now_micro()}
        try:
            self.kube.merge_patch(path, {"spec": spec})
        except KubeError as exc:
            if exc.status != 404:
                raise
            owner = [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.uids[name]}] \
                if name in self.uids else []
            self.kube.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease", "ownerReferences": owner},
                "spec": spec})

    def schedulable(self) -> bool:
        """All nodes Ready and free of the not-ready taint the admission plugin puts on new nodes."""
        for name in self.cfg.names:
            node = self.kube.get(f"/api/v1/nodes/{name}")
            if not node:
                return False
            taints = (node.get("spec") or {}).get("taints") or []
            if any(t.get("key", "").startswith("node.kubernetes.io/") for t in taints):
                return False
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="node-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        last_status = time.monotonic()
        while not self._stop.wait(LEASE_RENEW):
            for name in self.cfg.names:
                try:
                    self.renew_lease(name)
                    if time.monotonic() - last_status >= STATUS_EVERY:
                        self.kube.merge_patch(f"/api/v1/nodes/{name}/status",
                                              {"status": {"conditions": self.conditions(True)}})
                except KubeError as exc:
                    if exc.status == 404 and "nodes" in str(exc):
                        log.warning("node %s was deleted behind the agent's back: registering it again", name)
                        try:
                            self.register_one(name)
                        except Exception as exc2:  # noqa: BLE001
                            log.warning("re-registering node %s failed: %s", name, exc2)
                    else:
                        log.warning("heartbeat of node %s failed: %s", name, exc)
                except Exception as exc:  # noqa: BLE001 - keep beating
                    log.warning("heartbeat of node %s failed: %s", name, exc)
            if time.monotonic() - last_status >= STATUS_EVERY:
                last_status = time.monotonic()

    def stop(self, delete: bool) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        for name in self.cfg.names:
            try:
                if delete:
                    self.kube.request("DELETE", f"/api/v1/nodes/{name}")
                    try:
                        self.kube.request("DELETE",
                                          f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
                    except KubeError:
                        pass
                    log.info("node %s deleted", name)
                else:
                    self.kube.merge_patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": self.conditions(
                        False, "AgentStopped", "the dpjob node agent stopped")}})
                    log.info("node %s marked NotReady", name)
            except Exception as exc:  # noqa: BLE001
                log.warning("cleaning up node %s failed: %s", name, exc)

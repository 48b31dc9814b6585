"""The node agent: registers nodes, watches their pods, runs one PodWorker per pod, keeps the per-pod
hosts files and API-backed volumes current, serves container logs, and cleans up on exit."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from devcluster.nodeagent import network, runtime
from devcluster.nodeagent.hosts import PodHost, render_hosts
from devcluster.nodeagent.kube import Kube, KubeError, pod_path
from devcluster.nodeagent.node import NodeConfig, NodeManager, now
from devcluster.nodeagent.podwatch import PodWatcher
from devcluster.nodeagent.podworker import PodWorker

log = logging.getLogger("nodeagent")


@dataclass
class AgentConfig:
    kubeconfig: str
    nodes: int = 1
    name_prefix: str = "local"
    pool: str = "local"
    state_dir: Path = Path(".devcluster/agent")
    bridge: str = "dpjob0"
    cidr: str = "10.250.0.0/16"
    python_dir: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)
    taint: bool = True
    delete_nodes_on_exit: bool = True
    kubelet_port: int = 10250
    extra_env: dict[str, str] = field(default_factory=dict)
    cluster_domain: str = "cluster.local"
    ready_file: Optional[Path] = None
    sync_period: float = 1.0


class Agent:
    def __init__(self, cfg: AgentConfig):
        self.cfg = cfg
        self.state_dir = Path(cfg.state_dir).resolve()
        self.pods_dir = self.state_dir / "pods"
        self.logs_dir = self.state_dir / "logs"
        for d in (self.pods_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.kube = Kube(cfg.kubeconfig)
        self.ipam = network.IPAM(cfg.cidr, self.state_dir / "ipam.json")
        self.host_ip = self.ipam.gateway
        self.node_names = [f"{cfg.name_prefix}-{i}" for i in range(cfg.nodes)]
        self.nodes = NodeManager(self.kube, NodeConfig(
            names=self.node_names, pool=cfg.pool, internal_ip=self.host_ip,
            kubelet_port=cfg.kubelet_port, labels=cfg.labels, capacity=cfg.capacity, taint=cfg.taint))
        self.node_allocatable = self.nodes.capacity()
        self.lock = threading.RLock()
        self.workers: dict[str, PodWorker] = {}
        self.done: set[str] = set()          # uids whose worker finished (terminal pods stay ignored)
        self.hosts: dict[str, PodWorker] = {}
        self.stop_event = threading.Event()
        self.watchers: list[PodWatcher] = []
        self.log_server = None
        self._cache: dict[tuple, tuple[float, Any]] = {}
        self._tokens: dict[tuple, tuple[float, str]] = {}

    # ------------------------------------------------------------------ API object getters (short TTL cache)

    def _cached(self, key: tuple, fetch):
        with self.lock:
            hit = self._cache.get(key)
            if hit and time.monotonic() - hit[0] < min(0.5, self.cfg.sync_period / 2):
                return hit[1]
        value = fetch()
        with self.lock:
            self._cache[key] = (time.monotonic(), value)
        return value

    def get_configmap(self, namespace: str, name: str) -> Optional[dict]:
        return self._cached(("cm", namespace, name),
                            lambda: self.kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}"))

    def get_secret(self, namespace: str, name: str) -> Optional[dict]:
        return self._cached(("secret", namespace, name),
                            lambda: self.kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}"))

    def get_token(self, pod: Mapping[str, Any], src: Mapping[str, Any]) -> Optional[str]:
        """A bound service account token (TokenRequest), cached until 80% of its lifetime."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        key = (meta.get("uid"), src.get("path"), src.get("audience"))
        hit = self._tokens.get(key)
        if hit and time.monotonic() < hit[0]:
            return hit[1]
        ttl = int(src.get("expirationSeconds") or 3607)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
            "expirationSeconds": ttl, "audiences": [src["audience"]] if src.get("audience") else None,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid")}}}
        sa = spec.get("serviceAccountName") or "default"
        try:
            resp = self.kube.request("POST", f"/api/v1/namespaces/{meta.get('namespace')}/serviceaccounts/{sa}/token",
                                     body=body)
        except Exception as exc:  # noqa: BLE001 - best effort: the file is left out
            log.debug("token request for %s/%s failed: %s", meta.get("namespace"), meta.get("name"), exc)
            return None
        token = resp["status"]["token"]
        self._tokens[key] = (time.monotonic() + ttl * 0.8, token)
        return token

    # ------------------------------------------------------------------ hosts files

    def hosts_add(self, worker: PodWorker) -> None:
        with self.lock:
            self.hosts[worker.uid] = worker
            self._rewrite_hosts()

    def hosts_remove(self, worker: PodWorker) -> None:
        with self.lock:
            if self.hosts.pop(worker.uid, None) is not None:
                self._rewrite_hosts()

    def _rewrite_hosts(self) -> None:
        entries = {uid: PodHost.from_pod(w.pod, w.pod_ip) for uid, w in self.hosts.items()}
        for uid, w in self.hosts.items():
            content = render_hosts(entries[uid], list(entries.values()),
                                   (w.pod.get("spec") or {}).get("hostAliases") or [], self.cfg.cluster_domain)
            try:
                network.write_in_place(network.hosts_path(uid), content)
            except OSError as exc:
                log.warning("pod %s: cannot write hosts file: %s", w.key, exc)

    # ------------------------------------------------------------------ containers

    def mark_running(self, worker: PodWorker, container, running: bool) -> None:
        """A ``.running`` marker next to the log file while the container runs (``logs -f`` stops after)."""
        marker = Path(str(runtime.log_path(self.logs_dir, worker.ns, worker.pname, container.name)) + ".running")
        try:
            if running:
                marker.write_text(str(container.proc.pid if container.proc else ""))
            elif marker.exists():
                marker.unlink()
        except OSError:
            pass

    def worker_done(self, worker: PodWorker) -> None:
        with self.lock:
            self.workers.pop(worker.uid, None)
            self.done.add(worker.uid)

    # ------------------------------------------------------------------ pod events

    def handle(self, etype: str, pod: dict) -> None:
        if self.stop_event.is_set():
            return
        meta = pod.get("metadata") or {}
        uid, key = meta.get("uid", ""), f"{meta.get('namespace')}/{meta.get('name')}"
        with self.lock:
            worker = self.workers.get(uid)
            if etype == "DELETED":
                if worker:
                    worker.pod_gone()
                else:
                    self._forget(uid)
                return
            if worker:
                worker.update(pod)
                return
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if meta.get("deletionTimestamp"):
                if uid not in self.done:
                    log.info("pod %s: deleting a pod that has no processes here", key)
                threading.Thread(target=self._force_delete, args=(pod,), daemon=True).start()
                return
            if phase in ("Succeeded", "Failed") or uid in self.done:
                return
            status = pod.get("status") or {}
            if status.get("hostIP") or status.get("podIP") or status.get("containerStatuses"):
                self.done.add(uid)
                threading.Thread(target=self._fail_orphan, args=(pod,), daemon=True).start()
                return
            worker = PodWorker(self, pod)
            self.workers[uid] = worker
        worker.start()

    def resync(self, node: str, uids: set) -> None:
        """After a (re)list: workers of this node whose pods are no longer there are gone."""
        with self.lock:
            for uid, w in list(self.workers.items()):
                if (w.pod.get("spec") or {}).get("nodeName") == node and uid not in uids:
                    w.pod_gone()

    def _force_delete(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.kube.request("DELETE", pod_path(meta["namespace"], meta["name"]), body={
                "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}})
        except KubeError as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: delete failed: %s", meta["namespace"], meta["name"], exc)
        self._forget(meta["uid"])

    def _fail_orphan(self, pod: dict) -> None:
        """A pod an earlier agent ran: its processes are gone (or are killed now). Say so honestly."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        self._forget(meta["uid"])
        old = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
        t = now()
        statuses = []
        for c in spec.get("containers") or []:
            prev = old.get(c["name"]) or {}
            started = ((prev.get("state") or {}).get("running") or {}).get("startedAt")
            term = {"exitCode": 137, "reason": "AgentRestarted", "finishedAt": t,
                    "message": "the dpjob node agent restarted and lost this container's process"}
            if started:
                term["startedAt"] = started
            statuses.append({"name": c["name"], "image": c.get("image") or "none", "imageID": "", "ready": False,
                             "restartCount": prev.get("restartCount", 0), "started": False,
                             "state": {"terminated": term}})
        body = {"status": {"phase": "Failed", "reason": "AgentRestarted",
                           "message": "the dpjob node agent restarted; the pod's processes are gone",
                           "containerStatuses": statuses,
                           "conditions": [{"type": k, "status": "False", "lastTransitionTime": t,
                                           "reason": "AgentRestarted"} for k in ("Ready", "ContainersReady")]
                           + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": t}]}}
        try:
            self.kube.merge_patch(pod_path(meta["namespace"], meta["name"], "status"), body)
            log.info("pod %s: Failed (AgentRestarted): it ran under an earlier agent", key)
        except KubeError as exc:
            log.warning("pod %s: cannot report AgentRestarted: %s", key, exc)

    def _forget(self, uid: str) -> None:
        """Remove whatever is left of a pod this agent does not run (leftovers of an earlier agent)."""
        for d in self.pods_dir.glob(f"*_{uid}"):
            try:
                runtime.kill_leftovers(json.loads((d / "pids").read_text()))
            except (OSError, ValueError):
                pass
            shutil.rmtree(d, ignore_errors=True)
        if self.ipam.lookup(uid) or network.netns_exists(network.netns_name(uid)):
            network.teardown_pod_network(uid)
            self.ipam.release(uid)

    def cleanup_leftovers(self) -> None:
        with self.lock:
            live = set(self.workers)
        uids = {d.name.rsplit("_", 1)[-1] for d in self.pods_dir.iterdir() if d.is_dir()}
        uids |= set(self.ipam.owners().values())
        for uid in uids - live:
            log.info("cleaning up leftovers of pod uid %s", uid)
            self._forget(uid)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        network.ensure_bridge(self.cfg.bridge, self.ipam.gateway, self.ipam.prefixlen)
        log.info("bridge %s up with gateway %s/%d", self.cfg.bridge, self.ipam.gateway, self.ipam.prefixlen)
        if self.cfg.kubelet_port:
            from devcluster.nodeagent.logserver import LogServer

            try:
                self.log_server = LogServer(self.logs_dir, self.host_ip, self.cfg.kubelet_port,
                                            self.state_dir / "pki")
                self.log_server.start()
                log.info("container logs served at https://%s:%d (kubectl logs)", self.host_ip, self.cfg.kubelet_port)
            except Exception as exc:  # noqa: BLE001 - kubectl logs is a nicety
                log.warning("log server disabled: %s", exc)
                self.log_server = None
                self.nodes.cfg.kubelet_port = 0
        self.nodes.register()
        self.nodes.start()
        for name in self.node_names:
            w = PodWatcher(self.kube, name, self.handle, self.resync, self.stop_event)
            self.watchers.append(w)
            w.start()
        for w in self.watchers:
            w.synced.wait(30)
        self.cleanup_leftovers()
        deadline = time.monotonic() + 60
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            try:
                if self.nodes.schedulable():
                    break
            except Exception:  # noqa: BLE001
                pass
            self.stop_event.wait(0.5)
        if self.cfg.ready_file:
            Path(self.cfg.ready_file).write_text(json.dumps({"pid": os.getpid(), "nodes": self.node_names,
                                                             "pool": self.cfg.pool, "hostIP": self.host_ip}))
        log.info("ready: nodes %s (pool %s) accept pods", ",".join(self.node_names), self.cfg.pool)

    def run_forever(self) -> None:
        """Refresh volumes until asked to stop (signal handlers set ``stop_event``)."""
        while not self.stop_event.wait(self.cfg.sync_period):
            with self.lock:
                workers = list(self.workers.values())
            for w in workers:
                if w.sandbox_ready:
                    try:
                        w.sync_volumes()
                    except Exception as exc:  # noqa: BLE001 - apiserver hiccups: next period retries
                        log.debug("pod %s: volume refresh failed: %s", w.key, exc)

    def shutdown(self) -> None:
        log.info("shutting down: stopping all pods")
        self.stop_event.set()
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop("AgentStopped")
        deadline = time.monotonic() + 25
        for w in workers:
            w.finished.wait(max(0.1, deadline - time.monotonic()))
        for w in workers:
            if not w.finished.is_set():
                log.warning("pod %s: did not stop in time; killing", w.key)
                w._kill_all(signal.SIGKILL)
                w._teardown_sandbox()
        self.nodes.stop(delete=self.cfg.delete_nodes_on_exit)
        if self.log_server:
            self.log_server.stop()
        if self.cfg.ready_file:
            try:
                Path(self.cfg.ready_file).unlink()
            except OSError:
                pass
        log.info("stopped")

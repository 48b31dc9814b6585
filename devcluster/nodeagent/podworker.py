"""One pod's life on the agent, like the kubelet's pod worker: sandbox (netns, IP, hosts), volumes, init
containers one by one, then all containers; restarts per restartPolicy; status reported through
PATCH pods/status; on deletion SIGTERM, SIGKILL after the grace period, then the final DELETE.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import queue
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from devcluster.nodeagent import network, runtime
from devcluster.nodeagent.hosts import render_resolv_conf
from devcluster.nodeagent.env import EnvError, expand_command, resolve_env
from devcluster.nodeagent.kube import KubeError, pod_path
from devcluster.nodeagent.volumes import AtomicWriter, VolumeError, host_path, is_synced, volume_payload

if TYPE_CHECKING:  # pragma: no cover
    from devcluster.nodeagent.agent import Agent

log = logging.getLogger("nodeagent.pod")

RETRY = 2.0          # seconds between attempts to build env / mount volumes / create the sandbox
BACKOFF_MAX = 10.0   # restart back-off cap (the kubelet's is 5 min: too slow for a dev loop)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    spec: dict
    init: bool = False
    sidecar: bool = False
    proc: Any = None
    state: str = "waiting"               # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    exit_code: int = 0
    restart_count: int = 0
    last_terminated: Optional[dict] = None
    retry_at: float = 0.0                # when to (re)start it; 0 = not scheduled
    backoff: float = 1.0

    @property
    def name(self) -> str:
        return self.spec.get("name", "")

    def terminated_dict(self) -> dict:
        d = {"exitCode": self.exit_code, "reason": self.reason, "startedAt": self.started_at or None,
             "finishedAt": self.finished_at or None, "containerID": self.container_id}
        if self.message:
            d["message"] = self.message
        return {k: v for k, v in d.items() if v is not None}

    @property
    def container_id(self) -> str:
        return f"dpjob://{self.proc.pid}" if self.proc is not None else ""

    def status(self) -> dict:
        if self.state == "running":
            state = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": self.terminated_dict()}
        else:
            state = {"waiting": {"reason": self.reason, **({"message": self.message} if self.message else {})}}
        st = {"name": self.name, "image": self.spec.get("image") or "none", "imageID": "",
              "ready": self.state == "running", "restartCount": self.restart_count,
              "started": self.state == "running", "state": state,
              "lastState": {"terminated": self.last_terminated} if self.last_terminated else {}}
        if self.container_id and self.state != "waiting":
            st["containerID"] = self.container_id
        return st


class PodWorker(threading.Thread):
    def __init__(self, agent: "Agent", pod: dict):
        meta = pod["metadata"]
        self.ns, self.pname, self.uid = meta.get("namespace", "default"), meta["name"], meta["uid"]
        super().__init__(name=f"pod-{self.ns}/{self.pname}", daemon=True)
        self.agent = agent
        self.pod = pod
        self.events: "queue.Queue[tuple]" = queue.Queue()
        self.dir = agent.pods_dir / f"{self.ns}_{self.pname}_{self.uid}"
        spec = pod.get("spec") or {}
        self.restart_policy = spec.get("restartPolicy") or "Always"
        self.init_containers = [Container(c, init=True, sidecar=c.get("restartPolicy") == "Always")
                                for c in spec.get("initContainers") or []]
        self.containers = [Container(c) for c in spec.get("containers") or []]
        self.phase = "Pending"
        self.pod_reason = ""
        self.pod_message = ""
        self.pod_ip = ""
        self.start_time = now()
        self.sandbox_ready = False
        self.initialized = not self.init_containers
        self.deleting = False
        self.gone = False
        self.stop_reason = ""
        self.finished = threading.Event()
        self.volume_dirs: dict[str, Path] = {}
        self.volumes_ready = False
        self._vol_lock = threading.Lock()  # the worker's setup vs. the agent's periodic refresh
        self._last_status: Optional[str] = None
        self._cond_times: dict[str, tuple[str, str]] = {}

    # ------------------------------------------------------------------ outside interface (other threads)

    @property
    def key(self) -> str:
        return f"{self.ns}/{self.pname}"

    def update(self, pod: dict) -> None:
        self.pod = pod
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.events.put(("delete",))

    def pod_gone(self) -> None:
        self.gone = True
        self.events.put(("delete",))

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.events.put(("stop",))

    def all_containers(self) -> list[Container]:
        return self.init_containers + self.containers

    def container(self, name: str) -> Optional[Container]:
        return next((c for c in self.all_containers() if c.name == name), None)

    # ------------------------------------------------------------------ main

    def run(self) -> None:
        try:
            self._run()
        except Exception:  # noqa: BLE001 - a bug must not leave processes behind
            log.exception("pod %s: worker crashed", self.key)
            self._kill_all(signal.SIGKILL)
            self.phase, self.pod_reason = "Failed", "AgentError"
            self.pod_message = "the node agent's pod worker crashed"
            self.report()
        finally:
            self._teardown_sandbox()
            if self.gone or self.deleting:
                shutil.rmtree(self.dir, ignore_errors=True)
            self.finished.set()
            self.agent.worker_done(self)

    def _run(self) -> None:
        log.info("pod %s: accepted (uid %s)", self.key, self.uid)
        self.report()
        if not self._wait_for(self._setup_sandbox):
            return self._finish_deleted()
        if not self._wait_for(self._setup_volumes):
            return self._finish_deleted()
        self.report()
        # init containers, one at a time
        for c in self.init_containers:
            if c.sidecar:
                if not self._wait_for(lambda c=c: self._start(c)):
                    return self._finish_deleted()
                continue
            while True:
                if not self._wait_for(lambda c=c: self._start(c)):
                    return self._finish_deleted()
                outcome = self._wait_exit(c)
                if outcome is None:
                    return self._finish_deleted()
                if c.exit_code == 0:
                    break
                if self.restart_policy == "Never":
                    self.phase = "Failed"
                    self._stop_sidecars()
                    self.report()
                    log.info("pod %s: init container %s failed (exit %d): pod Failed", self.key, c.name,
                             c.exit_code)
                    return self._finish()
                self._backoff(c)
                if not self._sleep_until(c.retry_at):
                    return self._finish_deleted()
        self.initialized = True
        for c in self.containers:
            c.retry_at = time.monotonic()
        self._main_loop()

    # ------------------------------------------------------------------ steps

    def _wait_for(self, step) -> bool:
        """Run ``step`` until it returns True, every RETRY seconds; False when the pod is being deleted."""
        while True:
            if self.deleting or self.stop_reason:
                return False
            if step():
                return True
            if not self._sleep_until(time.monotonic() + RETRY):
                return False

    def _sleep_until(self, deadline: float) -> bool:
        """Wait, handling events; False when deletion/stop was requested."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return not (self.deleting or self.stop_reason)
            try:
                ev = self.events.get(timeout=remaining)
            except queue.Empty:
                continue
            if not self._handle(ev):
                return False

    def _handle(self, ev: tuple) -> bool:
        """Apply an event; False when the pod must be torn down."""
        kind = ev[0]
        if kind in ("delete", "stop"):
            if kind == "delete":
                self.deleting = True
            return False
        if kind == "exit":
            _, c, proc, code = ev
            if c.proc is proc and c.state == "running":
                self._container_exited(c, code)
        return True

    def _setup_sandbox(self) -> bool:
        a = self.agent
        try:
            self.pod_ip = a.ipam.allocate(self.uid)
            network.setup_pod_network(self.uid, self.pod_ip, a.ipam.prefixlen, a.ipam.gateway, a.cfg.bridge)
        except Exception as exc:  # noqa: BLE001
            log.warning("pod %s: sandbox creation failed: %s", self.key, exc)
            self._set_waiting("ContainerCreating", f"sandbox: {exc}")
            return False
        self.sandbox_ready = True
        network.write_in_place(network.resolv_conf_path(self.uid), render_resolv_conf(self.ns, a.cfg.cluster_domain))
        a.hosts_add(self)
        log.info("pod %s: sandbox ready: netns %s ip %s", self.key, network.netns_name(self.uid), self.pod_ip)
        return True

    def pod_view(self) -> dict:
        """The pod as env/downward API resolution sees it: status IPs filled in."""
        pod = dict(self.pod)
        status = dict(pod.get("status") or {})
        status.update({"podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}] if self.pod_ip else [],
                       "hostIP": self.agent.host_ip, "hostIPs": [{"ip": self.agent.host_ip}]})
        pod["status"] = status
        return pod

    def _setup_volumes(self) -> bool:
        with self._vol_lock:
            ok = self._setup_volumes_locked()
        self.volumes_ready = ok
        return ok

    def _setup_volumes_locked(self) -> bool:
        vols = (self.pod.get("spec") or {}).get("volumes") or []
        try:
            for vol in vols:
                name = vol.get("name", "")
                hp = host_path(vol)
                if hp is not None:
                    self.volume_dirs[name] = hp
                    continue
                d = self.dir / "volumes" / name
                d.mkdir(parents=True, exist_ok=True)
                self.volume_dirs[name] = d
                if is_synced(vol):
                    self._write_volume(vol, d)
                elif "emptyDir" not in vol:
                    log.warning("pod %s: volume %s: unsupported type %s, using an empty directory", self.key, name,
                                [k for k in vol if k != "name"])
        except (VolumeError, KubeError, OSError) as exc:
            log.warning("pod %s: MountVolume failed: %s", self.key, exc)
            self._set_waiting("ContainerCreating", f"MountVolume.SetUp failed: {exc}")
            return False
        return True

    def _write_volume(self, vol: dict, d: Path) -> bool:
        payload = volume_payload(self.pod_view(), vol, self.agent.get_configmap, self.agent.get_secret,
                                 self.agent.get_token, self.agent.node_allocatable)
        return AtomicWriter(d).write(payload or {})

    def sync_volumes(self) -> None:
        """Refresh API-backed volumes (called periodically by the agent)."""
        if not self.volumes_ready or self.phase in ("Succeeded", "Failed"):
            return
        with self._vol_lock:
            self._sync_volumes_locked()

    def _sync_volumes_locked(self) -> None:
        for vol in (self.pod.get("spec") or {}).get("volumes") or []:
            d = self.volume_dirs.get(vol.get("name", ""))
            if d is None or not is_synced(vol):
                continue
            try:
                if self._write_volume(vol, d):
                    log.info("pod %s: volume %s updated", self.key, vol.get("name"))
            except (VolumeError, KubeError, OSError) as exc:
                log.debug("pod %s: volume %s not refreshed: %s", self.key, vol.get("name"), exc)

    def _mounts(self, spec: dict) -> list[runtime.Mount]:
        vols = {v.get("name"): v for v in (self.pod.get("spec") or {}).get("volumes") or []}
        mounts = []
        for vm in spec.get("volumeMounts") or []:
            name = vm.get("name")
            if name not in self.volume_dirs:
                raise EnvError(f"volume {name!r} is not defined by the pod")
            vol = vols.get(name) or {}
            source = self.volume_dirs[name]
            sub = vm.get("subPath") or ""
            if vm.get("subPathExpr"):
                sub = vm["subPathExpr"]
            if sub:
                source = source / sub
                if not source.exists() and not source.is_symlink():
                    source.mkdir(parents=True, exist_ok=True)
                source = Path(os.path.realpath(source))
            ro = bool(vm.get("readOnly")) or is_synced(vol)
            mounts.append(runtime.Mount(str(source), vm["mountPath"], ro))
        return mounts

    def base_env(self) -> dict[str, str]:
        spec = self.pod.get("spec") or {}
        env = {"PATH": f"{self.agent.cfg.python_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOSTNAME": spec.get("hostname") or self.pname, "HOME": "/root", "LANG": "C.UTF-8",
               "PYTHONUNBUFFERED": "1"}
        env.update(self.agent.cfg.extra_env)
        return env

    def _start(self, c: Container) -> bool:
        """Start container ``c``; False (retry later) when its configuration is not available yet."""
        spec = c.spec
        c.retry_at = 0.0
        if not spec.get("command"):
            c.proc = None
            c.started_at = c.finished_at = now()
            c.state, c.exit_code, c.reason = "terminated", 128, "StartError"
            c.message = ("no command: the dpjob node agent runs no images, so a container must set `command` "
                         "(its image's entrypoint is unknown)")
            log.info("pod %s: container %s cannot start: no command", self.key, c.name)
            self.events.put(("noop",))
            self._after_exit(c)
            return True
        try:
            resolved = resolve_env(self.pod_view(), spec, self.agent.get_configmap, self.agent.get_secret,
                                   self.agent.node_allocatable)
            mounts = self._mounts(spec)
        except (EnvError, KubeError) as exc:
            self._set_waiting("CreateContainerConfigError", str(exc), c)
            log.info("pod %s: container %s: CreateContainerConfigError: %s", self.key, c.name, exc)
            return False
        command, args = expand_command(spec, resolved)
        env = {**self.base_env(), **resolved}
        logf = runtime.open_log(self.agent.logs_dir, self.ns, self.pname, c.name, self.uid)
        try:
            proc = runtime.start_container(
                netns=network.netns_name(self.uid), spec_path=self.dir / "containers" / f"{c.name}.json",
                hostname=(self.pod.get("spec") or {}).get("hostname") or self.pname, mounts=mounts,
                working_dir=spec.get("workingDir") or "", fallback_dir=self.dir / "rootfs",
                env=env, argv=command + args, log_file=logf)
        finally:
            logf.close()
        c.proc, c.state, c.reason, c.message = proc, "running", "", ""
        c.started_at, c.finished_at = now(), ""
        self.agent.mark_running(self, c, True)
        self._save_pids()
        threading.Thread(target=self._waiter, args=(c, proc), name=f"wait-{self.pname}-{c.name}", daemon=True).start()
        log.info("pod %s: container %s started (pid %d)", self.key, c.name, proc.pid)
        self.report()
        return True

    def _waiter(self, c: Container, proc) -> None:
        code = runtime.exit_code(proc.wait())
        runtime.signal_group(proc.pid, signal.SIGKILL)  # the container's leftovers go with its main process
        self.events.put(("exit", c, proc, code))

    def _save_pids(self) -> None:
        pids = [c.proc.pid for c in self.all_containers() if c.proc is not None and c.state == "running"]
        try:
            (self.dir / "pids").write_text(json.dumps(pids))
        except OSError:
            pass

    def _container_exited(self, c: Container, code: int) -> None:
        c.state, c.exit_code, c.finished_at = "terminated", code, now()
        c.reason = "Completed" if code == 0 else "Error"
        c.message = ""
        self.agent.mark_running(self, c, False)
        self._save_pids()
        log.info("pod %s: container %s exited with code %d", self.key, c.name, code)
        self._after_exit(c)

    def _after_exit(self, c: Container) -> None:
        """Schedule a restart if the policy asks for one (the container then shows Waiting)."""
        if self.deleting or self.stop_reason or c.init and not c.sidecar:
            return
        policy = "Always" if c.sidecar else self.restart_policy
        if policy == "Always" or (policy == "OnFailure" and c.exit_code != 0):
            self._backoff(c)

    def _backoff(self, c: Container) -> None:
        c.last_terminated = c.terminated_dict()
        c.state, c.reason, c.message = "waiting", "CrashLoopBackOff", f"back-off {c.backoff:.0f}s restarting"
        c.retry_at = time.monotonic() + c.backoff
        c.backoff = min(c.backoff * 2, BACKOFF_MAX)
        c.restart_count += 1

    def _wait_exit(self, c: Container) -> Optional[bool]:
        while c.state == "running":
            ev = self.events.get()
            if not self._handle(ev):
                return None
        return True

    def _main_loop(self) -> None:
        while True:
            nowm = time.monotonic()
            for c in self.containers + [s for s in self.init_containers if s.sidecar]:
                if c.retry_at and c.retry_at <= nowm:
                    self._start(c) or setattr(c, "retry_at", nowm + RETRY)
            self.phase = self.compute_phase()
            self.report()
            if self.phase in ("Succeeded", "Failed"):
                self._stop_sidecars()
                self.report()
                log.info("pod %s: %s", self.key, self.phase)
                return self._finish()
            pending = [c.retry_at for c in self.all_containers() if c.retry_at]
            timeout = max(0.05, min(pending) - time.monotonic()) if pending else None
            try:
                ev = self.events.get(timeout=timeout)
            except queue.Empty:
                continue
            if not self._handle(ev):
                return self._finish_deleted()

    def compute_phase(self) -> str:
        """The kubelet's getPhase for regular containers (restarting ones count as stopped)."""
        if not self.initialized:
            return "Pending"
        waiting = running = stopped = succeeded = 0
        for c in self.containers:
            if c.state == "running":
                running += 1
            elif c.state == "terminated":
                stopped += 1
                succeeded += c.exit_code == 0
            elif c.last_terminated is not None:
                stopped += 1
            else:
                waiting += 1
        if waiting:
            return "Pending"
        if running:
            return "Running"
        if stopped:
            if self.restart_policy == "Always" or any(c.retry_at for c in self.containers):
                return "Running"
            if stopped == succeeded:
                return "Succeeded"
            return "Failed"
        return "Pending"

    def _set_waiting(self, reason: str, message: str, only: Optional[Container] = None) -> None:
        for c in [only] if only else self.all_containers():
            if c.state == "waiting":
                c.reason, c.message = reason, message
        self.report()

    # ------------------------------------------------------------------ termination

    def _grace(self) -> float:
        meta, spec = self.pod.get("metadata") or {}, self.pod.get("spec") or {}
        g = meta.get("deletionGracePeriodSeconds")
        if g is None:
            g = spec.get("terminationGracePeriodSeconds")
        return float(30 if g is None else g)

    def _kill_all(self, sig: int) -> None:
        for c in self.all_containers():
            if c.proc is not None and c.state == "running":
                runtime.signal_group(c.proc.pid, sig)

    def _terminate(self, grace: float) -> None:
        running = [c for c in self.all_containers() if c.proc is not None and c.state == "running"]
        if not running:
            return
        log.info("pod %s: killing %d container(s) with SIGTERM (grace %.0fs)", self.key, len(running), grace)
        self._kill_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(c.state == "running" for c in running):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.info("pod %s: grace period over: SIGKILL", self.key)
                self._kill_all(signal.SIGKILL)
                deadline = time.monotonic() + 10
                remaining = 10
            try:
                ev = self.events.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if ev[0] == "exit":
                _, c, proc, code = ev
                if c.proc is proc and c.state == "running":
                    c.state, c.exit_code, c.finished_at = "terminated", code, now()
                    c.reason = "Completed" if code == 0 else "Error"
                    self.agent.mark_running(self, c, False)
            elif ev[0] == "delete":
                self.deleting = True

    def _stop_sidecars(self) -> None:
        sidecars = [c for c in self.init_containers if c.sidecar]
        for c in sidecars:
            c.retry_at = 0.0
        if any(c.state == "running" for c in sidecars):
            self._terminate(self._grace())

    def _finish(self) -> None:
        """Terminal phase reached: release the sandbox, then wait for the pod's deletion."""
        self._teardown_sandbox()
        while not (self.deleting or self.stop_reason or self.gone):
            ev = self.events.get()
            self._handle(ev)
        if self.deleting and not self.gone:
            self._delete_object()

    def _finish_deleted(self) -> None:
        """Deletion (or agent stop) requested while containers may run."""
        if self.stop_reason and not self.deleting:
            self._terminate(min(self._grace(), 10.0))
            self.phase, self.pod_reason = "Failed", self.stop_reason
            self.pod_message = "the dpjob node agent stopped and took the pod's processes with it"
            for c in self.all_containers():
                if c.state != "terminated" and c.retry_at:
                    c.retry_at = 0.0
            self.report()
            log.info("pod %s: Failed (%s)", self.key, self.stop_reason)
            return
        log.info("pod %s: deletion requested", self.key)
        self._terminate(self._grace())
        for c in self.all_containers():
            c.retry_at = 0.0
        if not self.gone:
            if any(c.state == "terminated" for c in self.containers):
                self.phase = "Succeeded" if all(c.state == "terminated" and c.exit_code == 0
                                                for c in self.containers) else "Failed"
            self.report()
            self._delete_object()

    def _delete_object(self) -> None:
        try:
            self.agent.kube.request("DELETE", pod_path(self.ns, self.pname), body={
                "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid}})
            log.info("pod %s: deleted", self.key)
        except KubeError as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s: final delete failed: %s", self.key, exc)
        self.gone = True

    def _teardown_sandbox(self) -> None:
        if self.pod_ip or self.sandbox_ready:
            self._kill_all(signal.SIGKILL)
            self.agent.hosts_remove(self)
            network.teardown_pod_network(self.uid)
            self.agent.ipam.release(self.uid)
            if self.sandbox_ready:
                log.info("pod %s: sandbox removed (ip %s released)", self.key, self.pod_ip)
            self.sandbox_ready = False

    # ------------------------------------------------------------------ status

    def build_status(self) -> dict:
        t = now()
        containers_ready = self.phase == "Running" and all(c.state == "running" for c in self.containers)

        def cond(kind: str, ok: bool, reason: str = "") -> dict:
            value = "True" if ok else "False"
            if self._cond_times.get(kind, ("", ""))[0] != value:
                self._cond_times[kind] = (value, t)
            d = {"type": kind, "status": value, "lastProbeTime": None,
                 "lastTransitionTime": self._cond_times[kind][1]}
            if reason and not ok:
                d["reason"] = reason
            return d

        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": [
                cond("PodReadyToStartContainers", self.sandbox_ready or bool(self.pod_ip)),
                cond("Initialized", self.initialized, "ContainersNotInitialized"),
                cond("Ready", containers_ready, "ContainersNotReady" if self.phase != "Succeeded" else "PodCompleted"),
                cond("ContainersReady", containers_ready, "ContainersNotReady"),
                cond("PodScheduled", True),
            ],
            "hostIP": self.agent.host_ip, "hostIPs": [{"ip": self.agent.host_ip}],
            "startTime": self.start_time,
            "containerStatuses": [c.status() for c in self.containers],
            "qosClass": (self.pod.get("status") or {}).get("qosClass") or "BestEffort",
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if self.pod_ip:
            status["podIP"], status["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if self.pod_reason:
            status["reason"], status["message"] = self.pod_reason, self.pod_message
        return status

    def report(self) -> None:
        """PATCH pods/status, skipping unchanged reports (transition times aside)."""
        if self.gone:
            return
        status = self.build_status()
        fingerprint = json.dumps({**status, "conditions": [(c["type"], c["status"]) for c in status["conditions"]]},
                                 sort_keys=True)
        if fingerprint == self._last_status:
            return
        previous = self._last_status
        try:
            self.agent.kube.merge_patch(pod_path(self.ns, self.pname, "status"), {"status": status})
            self._last_status = fingerprint
        except KubeError as exc:
            if exc.status == 404:
                self.gone = True
                self.events.put(("delete",))
            else:
                log.warning("pod %s: status update failed: %s", self.key, exc)
        except Exception as exc:  # noqa: BLE001 - apiserver hiccup: the next report retries
            log.warning("pod %s: status update failed: %s", self.key, exc)
        if previous is None or json.loads(previous).get("phase") != self.phase:
            log.info("pod %s: phase %s%s", self.key, self.phase, f" ip {self.pod_ip}" if self.pod_ip else "")

#!/usr/bin/env python3
"""Simulated Ascend device plugin for the local (kwok) test cluster.

Watches pods cluster-wide. When a pod that requests ``huawei.com/Ascend910`` is bound to a node
with allocatable ``huawei.com/Ascend910`` and has no device annotation yet, it allocates the
lowest free chip ids on that node and patches the pod with the annotations the real MindCluster
device plugin writes (``ascend.kubectl.kubernetes.io/ascend-910-configuration`` and
``huawei.com/Ascend910: Ascend910-0,...``). The decisions live in ``ascend_sim.py``; this file
is the Kubernetes I/O, the watch loop and the command line. See docs/ranktable.md.

    python devcluster/ascend_device_plugin.py --kubeconfig PATH [--resource R] [--once]

Watch: list (rebuilds the allocation from annotated pods) -> watch from the list's
resourceVersion with bookmarks -> on a timeout resume from the last seen resourceVersion, on
410 Gone relist, on any other error back off and relist. SIGTERM/SIGINT exit 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ascend_sim import DEFAULT_RESOURCE, Annotator

log = logging.getLogger("ascend-device-plugin")

WATCH_TIMEOUT_S = 240  # server-side; the client read timeout is a little longer
BACKOFF_MAX_S = 30.0


class Shutdown(BaseException):
    """Raised from the signal handler so a blocking watch read ends at once.

    A BaseException, like KeyboardInterrupt, so no ``except Exception`` on the way swallows it.
    """


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): relist."""


class KubeApi:
    """The few calls the plugin makes, returning plain dicts (Kubernetes JSON)."""

    def __init__(self, kubeconfig: str | None) -> None:
        from kubernetes import client, config

        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            config.load_incluster_config()
        self.core = client.CoreV1Api()
        self.ApiException = client.exceptions.ApiException

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        resp = self.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=60)
        body = json.loads(resp.data)
        return body.get("items") or [], body["metadata"]["resourceVersion"]

    def read_node(self, name: str) -> dict[str, Any] | None:
        try:
            resp = self.core.read_node(name, _preload_content=False, _request_timeout=30)
        except self.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(resp.data)

    def patch_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> bool:
        body = {"metadata": {"annotations": annotations}}
        try:
            self.core.patch_namespaced_pod(name, namespace, body, _request_timeout=30)
        except self.ApiException as exc:
            log.warning("patch %s/%s failed: %s %s", namespace, name, exc.status, exc.reason)
            return False
        return True

    def watch_pods(self, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) per event until the server ends the watch; raises Gone on 410."""
        resp = self.core.list_pod_for_all_namespaces(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
            _preload_content=False,
            _request_timeout=(10, WATCH_TIMEOUT_S + 30),
        )
        try:
            buffer = b""
            for chunk in resp.stream(amt=None, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                raise Gone(obj.get("message", "resourceVersion too old"))
                            raise RuntimeError(f"watch error: {obj}")
                        yield event.get("type", ""), obj
        finally:
            resp.close()
            resp.release_conn()


def run(api: KubeApi, resource: str, once: bool) -> None:
    annotator = Annotator(api.read_node, api.patch_annotations, resource, log=log.info)
    backoff = 1.0
    resource_version: str | None = None
    while True:
        try:
            if resource_version is None:
                pods, resource_version = api.list_pods()
                actions = annotator.sync(pods)
                log.info(
                    "listed %d pods at resourceVersion %s: %d annotated now, %d already held chips",
                    len(pods),
                    resource_version,
                    actions.count("annotated"),
                    actions.count("recorded"),
                )
                if once:
                    return
            for event_type, pod in api.watch_pods(resource_version):
                resource_version = (pod.get("metadata") or {}).get(
                    "resourceVersion", resource_version
                )
                if event_type != "BOOKMARK":
                    annotator.observe(event_type, pod)
                backoff = 1.0
            # The server closed the watch (timeout): resume from the last resourceVersion.
        except Gone as exc:
            log.info("watch expired (%s): relisting", exc)
            resource_version = None
        except Exception as exc:  # noqa: BLE001 - keep a test-cluster helper alive
            name = type(exc).__name__
            log.warning("watch failed (%s: %s); relisting in %.0fs", name, exc, backoff)
            resource_version = None
            time.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster config)")
    parser.add_argument("--resource", default=DEFAULT_RESOURCE, help="extended resource name")
    parser.add_argument("--once", action="store_true", help="annotate what is pending, then exit")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )

    def stop(signum: int, _frame: Any) -> None:
        raise Shutdown(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        api = KubeApi(args.kubeconfig)
        log.info("simulating %s device plugin (once=%s)", args.resource, args.once)
        run(api, args.resource, args.once)
    except Shutdown as exc:
        log.info("stopping on %s", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Prometheus file-based service discovery for dpjob's trainer pods.

Debian's prometheus package is built without Kubernetes service discovery, so this small process
does what a PodMonitor would: it lists pods labelled ``app.kubernetes.io/managed-by=dpjob-operator``
through the API server once a second and writes a ``file_sd`` targets file with each Running pod's
``<podIP>:<port named metrics>`` and the labels ``namespace``, ``pod``, ``dpjob_job``, ``dpjob_rank``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

SELECTOR = "app.kubernetes.io/managed-by=dpjob-operator"


def targets_from_pods(pods: list[dict]) -> list[dict]:
    """Pure: pod dicts -> file_sd entries (sorted, so an unchanged cluster rewrites nothing)."""
    out = []
    for pod in pods:
        meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ip or meta.get("deletionTimestamp"):
            continue
        labels = meta.get("labels") or {}
        for ctr in spec.get("containers", []):
            for port in ctr.get("ports") or []:
                if port.get("name") == "metrics":
                    out.append({"targets": [f"{ip}:{port['containerPort']}"],
                                "labels": {"namespace": meta.get("namespace", ""), "pod": meta.get("name", ""),
                                           "dpjob_job": labels.get("dpjob.io/job-name", ""),
                                           "dpjob_rank": labels.get("dpjob.io/rank", "")}})
    return sorted(out, key=lambda t: t["targets"][0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    from kubernetes import client, config

    config.load_kube_config(args.kubeconfig)
    core = client.CoreV1Api()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    last = None
    while not stop:
        try:
            resp = core.list_pod_for_all_namespaces(label_selector=SELECTOR, _preload_content=False)
            text = json.dumps(targets_from_pods(json.loads(resp.data)["items"]), indent=1)
            if text != last:
                tmp = args.out.with_suffix(".tmp")
                tmp.write_text(text)
                os.replace(tmp, args.out)  # Prometheus must never read half a file
                last = text
        except Exception as e:  # noqa: BLE001 - keep discovering through API hiccups
            print(f"podsd: {e}", file=sys.stderr, flush=True)
        time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())

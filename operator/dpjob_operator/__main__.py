"""``python -m dpjob_operator``: run the operator against the current kubeconfig (or in-cluster)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import kopf

from dpjob_operator import handlers
from dpjob_operator.config import load_config
from dpjob_operator.identity import ensure_login_name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpjob-operator", description="DataParallelJob operator")
    parser.add_argument("--config", help="operator config file (YAML/JSON); default $DPJOB_CONFIG")
    parser.add_argument("--namespace", "-n", action="append", default=[],
                        help="watch only these namespaces (repeatable); default: all")
    parser.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except (OSError, ValueError) as exc:  # a bad file or value: one line, not a traceback
        sys.stderr.write(f"dpjob-operator: error: configuration: {exc}\n")
        return 2
    if args.namespace:
        from dataclasses import replace

        cfg = replace(cfg, namespaces=tuple(args.namespace))
    if args.no_metrics:
        from dataclasses import replace

        cfg = replace(cfg, metrics_port=0)
    logging.basicConfig(level=getattr(logging, cfg.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    handlers.runtime.config = cfg
    # Raised when leadership is lost: kopf stops gracefully and we exit with runtime.exit_code.
    stop_flag = handlers.runtime.stop_flag = asyncio.Event()
    ensure_login_name()
    kopf.run(
        standalone=True,
        clusterwide=not cfg.namespaces,
        namespaces=cfg.namespaces,
        liveness_endpoint=_health_url(cfg.health_bind_address, cfg.health_port) if cfg.health_port else None,
        stop_flag=stop_flag,
    )
    return handlers.runtime.exit_code


def _health_url(addr: str, port: int) -> str:
    """kopf's liveness endpoint URL: it binds the URL's host (an IPv6 address goes in brackets)."""
    host = f"[{addr}]" if ":" in addr else addr
    return f"http://{host}:{port}/healthz"


if __name__ == "__main__":
    sys.exit(main())

"""The command line every add-on of the dev cluster shares (Kueue, the NetworkPolicy engine):
``install``, ``uninstall`` or ``status``. Standard library only."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def main(name: str, description: str, install: Callable[[], str], uninstall: Callable[[], None],
         installed: Callable[[], bool]) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("command", choices=("install", "uninstall", "status"))
    args = parser.parse_args()
    if args.command == "install":
        print(f"[{name}] installed: {install()}", file=sys.stderr)
    elif args.command == "uninstall":
        uninstall()
    else:
        ok = installed()
        print(f"{name}: {'ready' if ok else 'not installed or not ready'}")
        return 0 if ok else 1
    return 0

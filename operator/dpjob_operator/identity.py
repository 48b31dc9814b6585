"""Who the operator is to the libraries that ask: standard library only, so it can be checked
under any uid without the operator's dependencies."""

from __future__ import annotations

import getpass
import os


def ensure_login_name() -> None:
    """kopf names its peering identity after ``getpass.getuser()``, which raises for a uid with no
    passwd entry: the chart's uid 65532 in a slim image, or the random uid OpenShift assigns. The
    operator crash-looped at start for exactly that. getuser() reads $USER first, so set it."""
    try:
        getpass.getuser()
    except (KeyError, OSError):
        os.environ["USER"] = f"uid-{os.getuid()}"

"""The operator starts under a uid that has no passwd entry (the chart's 65532 in a slim image,
OpenShift's random uids): kopf names its peering identity after ``getpass.getuser()``, which raised
``KeyError: 'getpwuid(): uid not found'`` and crash-looped the operator pod."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
UID = 65532
PYTHON = "/usr/bin/python3"  # outside /root, which uid 65532 cannot read


def _run_as_unknown_uid(code: str, path: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "LOGNAME", "LNAME", "USERNAME")}
    env["PYTHONPATH"] = path
    return subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd="/",
                          preexec_fn=lambda: os.setuid(UID))


def test_the_operator_has_a_login_name_under_a_uid_without_a_passwd_entry():
    if os.geteuid() != 0 or not Path(PYTHON).exists():
        pytest.fail(f"this test switches to uid {UID}: it needs root and {PYTHON}, as on the dev machine")
    with pytest.raises(KeyError):
        pwd.getpwuid(UID)  # the premise: no passwd entry here either
    readable = Path(tempfile.mkdtemp(prefix="dpjob-identity-"))
    try:
        readable.chmod(0o755)
        shutil.copy(REPO / "operator" / "dpjob_operator" / "identity.py", readable / "identity.py")
        (readable / "identity.py").chmod(0o644)
        bare = _run_as_unknown_uid("import getpass; getpass.getuser()", str(readable))
        assert bare.returncode != 0 and "uid not found" in bare.stderr  # what crash-looped the pod
        fixed = _run_as_unknown_uid("import getpass, identity\nidentity.ensure_login_name()\n"
                                    "print(getpass.getuser())", str(readable))
        assert fixed.returncode == 0, fixed.stderr
        assert fixed.stdout.strip() == f"uid-{UID}"
    finally:
        shutil.rmtree(readable, ignore_errors=True)

"""Container launcher: runs as ``ip netns exec <ns> unshare --mount --uts --propagation private
python -I -S launcher.py <spec.json>``, i.e. already inside the pod's network namespace and a private
mount + UTS namespace. It sets the hostname, bind-mounts the volumes at their mountPaths, changes to the
working directory and execs the container command (same PID: the agent signals it directly).

Standard library only, and no imports from the package: it runs with ``-S -I``.
Spec (JSON): {"hostname", "mounts": [{"source", "target", "readOnly"}], "workingDir", "fallbackDir",
"env": {...}, "argv": [...]}.
"""

import ctypes
import json
import os
import socket
import sys

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384


def fail(msg: str, code: int = 128) -> None:
    sys.stderr.write(f"dpjob-nodeagent: {msg}\n")
    sys.stderr.flush()
    os._exit(code)


def mount_bind(libc, source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
        if not os.path.exists(target):
            open(target, "a").close()
    if libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None) != 0:
        err = ctypes.get_errno()
        fail(f"bind mount {source} -> {target}: {os.strerror(err)}")
    if read_only:
        if libc.mount(None, target.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0:
            err = ctypes.get_errno()
            fail(f"read-only remount of {target}: {os.strerror(err)}")


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    if spec.get("hostname"):
        try:
            socket.sethostname(spec["hostname"][:63])
        except OSError as exc:
            sys.stderr.write(f"dpjob-nodeagent: sethostname: {exc}\n")
    libc = ctypes.CDLL(None, use_errno=True)
    for m in sorted(spec.get("mounts") or [], key=lambda m: m["target"].rstrip("/").count("/")):
        mount_bind(libc, m["source"], m["target"], bool(m.get("readOnly")))
    wd = spec.get("workingDir")
    try:
        if wd:
            try:
                os.chdir(wd)
            except FileNotFoundError:
                fallback = os.path.join(spec["fallbackDir"], wd.lstrip("/"))
                os.makedirs(fallback, exist_ok=True)
                os.chdir(fallback)
        else:
            os.makedirs(spec["fallbackDir"], exist_ok=True)
            os.chdir(spec["fallbackDir"])
    except OSError as exc:
        fail(f"working directory {wd}: {exc}")
    argv = spec["argv"]
    env = spec.get("env") or {}
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        fail(f'exec: "{argv[0]}": {exc.strerror or exc} (PATH={env.get("PATH", "")})')


if __name__ == "__main__":
    main()

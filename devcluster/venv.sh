#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment, cached by the hash of requirements.lock.
#
# torch from PyPI is several GB; reinstalling it on every run would blow CI's time budget, so
# the environment lives in ~/.cache/dpjob/venv-<sha of the lock> and is rebuilt only when the
# lock changes. The project itself is installed editable, so code edits need no reinstall.
# Prints the venv path on the last line of stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
SHA=$(sha256sum "$ROOT/requirements.lock" | cut -c1-12)
VENV="$CACHE_ROOT/venv-$SHA"
mkdir -p "$CACHE_ROOT"
# One creator at a time: two callers racing on rm -rf + pip leave a venv marked complete but empty.
exec 8>"$CACHE_ROOT/.venv.lock"
if ! flock -n 8; then
  echo "[venv] another process is creating the venv; waiting for it" >&2
  flock 8
fi
if [ ! -f "$VENV/.complete" ] || [ ! -x "$VENV/bin/python" ]; then
  echo "[venv] creating $VENV (first run downloads torch: several minutes)" >&2
  rm -rf "$VENV"; mkdir -p "$CACHE_ROOT"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install -q -r "$ROOT/requirements.lock" >&2
  touch "$VENV/.complete"
fi
# The editable install points at this checkout; redo it when the checkout moved (CI clones anew)
# or pyproject.toml changed (new console scripts such as dpjob and kubectl-dpj, new packages).
PROJECT="$ROOT $(sha256sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ "$(cat "$VENV/.project" 2>/dev/null)" != "$PROJECT" ]; then
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$ROOT" >&2 || \
    "$VENV/bin/pip" install -q --no-deps -e "$ROOT" >&2
  echo "$PROJECT" > "$VENV/.project"
fi
echo "$VENV"

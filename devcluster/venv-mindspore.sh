#!/usr/bin/env bash
# Create (or reuse) the MindSpore trainer's virtual environment, cached by the lock file's hash.
#
# The mindspore CPU wheel is about 800 MB and pins numpy 1.x, which cannot share the main venv
# (torch, numpy 2). It lives in ~/.cache/dpjob/venv-ms-<sha of requirements-mindspore.lock> and
# is rebuilt only when the lock changes. It is built in a temporary folder beside its final
# place and renamed at the end, so an interrupted install never leaves a half venv that looks
# finished. Progress lines go to stderr prefixed [venv-ms]; the venv path is the last stdout line.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOCK="$ROOT/trainer-image/requirements-mindspore.lock"
CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
log() { echo "[venv-ms] $*" >&2; }
fail() { echo "[venv-ms] error: $*" >&2; exit 1; }

[ -f "$LOCK" ] || fail "lock file $LOCK not found"
command -v python3 >/dev/null 2>&1 || fail "python3 not found on PATH"
SHA=$(sha256sum "$LOCK" | cut -c1-12)
VENV="$CACHE_ROOT/venv-ms-$SHA"
mkdir -p "$CACHE_ROOT"
# One creator at a time: a second caller waits and then reuses the first one's venv.
exec 9>"$CACHE_ROOT/.venv-ms.lock"
if ! flock -n 9; then
  log "another process is creating $VENV; waiting for it"
  flock 9
fi
if [ -f "$VENV/.complete" ] && [ -x "$VENV/bin/python" ]; then
  log "reusing $VENV"
  echo "$VENV"
  exit 0
fi
TMP=$(mktemp -d "$CACHE_ROOT/.venv-ms-$SHA.tmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
log "creating $VENV (first run downloads mindspore, about 800 MB: several minutes)"
python3 -m venv "$TMP" || fail "python3 -m venv failed (is the venv module installed?)"
log "upgrading pip"
"$TMP/bin/python" -m pip install -q --upgrade pip >&2 || fail "pip upgrade failed"
log "installing $(grep -cvE '^\s*(#|$)' "$LOCK") pinned packages from $(basename "$LOCK")"
"$TMP/bin/python" -m pip install -q --progress-bar off -r "$LOCK" >&2 \
  || fail "pip install -r $LOCK failed (see pip's output above)"
log "checking that mindspore imports"
"$TMP/bin/python" -c "import mindspore" >&2 || fail "mindspore installed but does not import"
# pip writes the venv's own path into bin/ scripts (msrun, pytest, activate): point them at the
# final path before the rename, or msrun's shebang would name the deleted temporary folder.
grep -lIF "$TMP" "$TMP"/bin/* "$TMP/pyvenv.cfg" 2>/dev/null | xargs -r sed -i "s#$TMP#$VENV#g"
touch "$TMP/.complete"
rm -rf "$VENV"
mv "$TMP" "$VENV"
trap - EXIT
log "ready: $(du -sh "$VENV" | cut -f1)"
echo "$VENV"

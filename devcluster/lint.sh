#!/usr/bin/env bash
# The static checks: `make lint`, the first step of `make test`, and the pre-commit hooks.
#
#   ruff     lint (pyproject.toml [tool.ruff]) over every Python directory
#   imports  layer contracts (pyproject.toml [tool.importlinter]): pure api/builders/reconcile, the
#            kubernetes client only under k8s/, trainer and operator independent
#   mypy     --strict over the operator, the trainer, the CLI and examples/*.py
#   sizes    no module over 300 lines, no function over 50, in every Python folder but tests/
#            (devcluster/sizes.py)
#
# Usage: bash devcluster/lint.sh [ruff|imports|mypy|sizes ...]   (no argument: all four)
# Every step runs even after one fails, so one run shows everything to fix. Quiet when a step
# passes; its tool's own report when it fails. No cluster needed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VENV=${DPJOB_VENV:-$(bash devcluster/venv.sh | tail -1)}
# Directories that exist in this checkout (cli/ may not yet).
existing() { local d; for d in "$@"; do [ -d "$d" ] && printf '%s\n' "$d"; done; return 0; }
mapfile -t LINT_DIRS < <(existing operator trainer-image cli tests devcluster bench helm examples)
mapfile -t TYPED_PKGS < <(existing operator/dpjob_operator trainer-image/dpjob_trainer cli/dpjob_cli examples)
# The packages are importable from source even before the editable install knows about cli/.
export PYTHONPATH="$ROOT/operator:$ROOT/trainer-image:$ROOT/cli${PYTHONPATH:+:$PYTHONPATH}"

declare -A HINT=(
  [ruff]="'$VENV/bin/ruff check --fix ${LINT_DIRS[*]}' fixes the [*] ones"
  [imports]="move the import down a layer or pass the value in (contracts: pyproject.toml [tool.importlinter])"
  [mypy]="annotate what mypy lists"
  [sizes]="split the listed modules/functions by policy"
)

run_ruff() { "$VENV/bin/ruff" check --quiet --output-format concise "${LINT_DIRS[@]}"; }
run_imports() { "$VENV/bin/lint-imports" --no-logo --no-cache; }
run_mypy() { "$VENV/bin/mypy" "${TYPED_PKGS[@]}"; }
run_sizes() { "$VENV/bin/python" devcluster/sizes.py; }

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ruff imports mypy sizes)
for step in "${steps[@]}"; do
  case $step in ruff|imports|mypy|sizes) ;; *) echo "[lint] unknown step '$step': use ruff, imports, mypy or sizes" >&2; exit 2 ;; esac
done
declare -A WHAT=(
  [ruff]="ruff check ${LINT_DIRS[*]}"
  [imports]="lint-imports (layer contracts)"
  [mypy]="mypy --strict ${TYPED_PKGS[*]}"
  [sizes]="sizes (module <= 300 lines, function <= 50)"
)
# mypy's cache lives beside the venv it was made with, so a fresh clone starts warm: mypy checks each
# cached module by size and content hash when its path or mtime differs, so no stale entry is used.
export MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-${DPJOB_CACHE:-$HOME/.cache/dpjob}/mypy-$(basename "$VENV")}
# The steps run side by side (mypy is the long one); their reports come out in the order above.
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT
declare -A PID STARTED
for step in "${steps[@]}"; do
  STARTED[$step]=$SECONDS
  ( "run_$step" >"$out_dir/$step" 2>&1; echo $? >"$out_dir/$step.rc"; echo $SECONDS >"$out_dir/$step.end" ) &
  PID[$step]=$!
done
failed=()
for step in "${steps[@]}"; do
  wait "${PID[$step]}"
  if [ "$(cat "$out_dir/$step.rc")" = 0 ]; then
    echo "[lint] ${WHAT[$step]}: ok ($(( $(cat "$out_dir/$step.end") - STARTED[$step] ))s)"
  else
    echo "[lint] ${WHAT[$step]}: FAILED"
    sed 's/^/    /' "$out_dir/$step"
    failed+=("$step")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  fixes=""
  for step in "${failed[@]}"; do fixes+="${fixes:+; }$step: ${HINT[$step]}"; done
  echo "[lint] FAILED (${failed[*]}): $fixes; rerun one step with 'bash devcluster/lint.sh STEP'" >&2
  exit 1
fi

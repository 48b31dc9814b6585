#!/usr/bin/env bash
# `make test` after lint and cluster-up: three sessions of tests side by side.
#
# The cluster's tests spend most of their time waiting: on the kubelet, on a watchdog's timeout, on
# a Lease (measured: the CPU is 33-55% idle while one session runs them). So they run as two
# sessions at once on the one cluster:
#   - the main stream (foreground): every cluster test but the side stream's, one at a time; it
#     owns what every test sees (the shared process operator and the Helm-installed one, Kueue, the
#     second real node, the control plane's processes), and its chaos drills start once the side
#     stream has ended;
#   - the side stream (background, log .devcluster/logs/test-side-stream.log): the modules marked
#     side_stream, kwok-only tests that need nothing but their namespace and an operator. Their jobs
#     name an operator of their own in spec.managedBy, which the main stream's operators leave alone
#     (tests/conftest.py, --cluster-stream).
# Each cluster stream also writes a JUnit XML under .devcluster/logs/ (test-main-stream.xml,
# test-side-stream.xml): every test's time, setup and teardown included, for finding where the time goes.
# The tests that need no cluster (unit tests, local DDP runs, the MindSpore backend's) are CPU work;
# they run in the background at a lower CPU priority (nice), so they mostly take the cores the
# cluster's tests leave idle. Each background session's output goes to a log; one line says when it
# is done, and a failure prints its summary again at the end.
#
# Usage: bash devcluster/test.sh PYTHON [pytest args for the cluster's tests...]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
py=$1; shift
LOGS="$ROOT/.devcluster/logs"
mkdir -p "$LOGS"
local_log="$LOGS/test-no-cluster.log"
side_log="$LOGS/test-side-stream.log"
NICE=${DPJOB_TEST_NICE:-10}

summary() { grep -E '^(=+ .*(passed|failed|error).* =+|FAILED |ERROR )' "$1" | tail -n 30; }
counts() { grep -E '^=+ .* in [0-9.]+s' "$1" | sed -E 's/^=+ | =+$//g' | paste -sd';' | sed 's/;/; /g'; }
slowest() { awk '/slowest [0-9]+ durations/{on=1; next} on && /^[0-9.]+s /{print} on && !/^[0-9.]+s /{on=0}' "$1"; }

# in_background NAME LOG COMMAND...: run COMMAND with its output in LOG, in a process group of its
# own (an interrupt takes it down whole); LOG.rc holds its exit code once it has ended.
pids=()
in_background() {
  local name=$1 log=$2; shift 2
  rm -f "$log.rc"
  set -m
  (
    started=$SECONDS
    "$@" >"$log" 2>&1
    rc=$?
    echo "$rc" >"$log.rc.tmp" && mv "$log.rc.tmp" "$log.rc"
    verdict=$([ "$rc" = 0 ] && echo "passed" || echo "FAILED (exit $rc)")
    echo "[test] $name: $verdict in $((SECONDS - started))s ($(counts "$log"))"
  ) &
  pids+=($!)
  set +m
}

# report NAME LOG: the ten slowest of a background session, and its failures again; returns its code.
report() {
  local name=$1 log=$2 rc
  rc=$(cat "$log.rc" 2>/dev/null || echo 1)
  echo "[test] the slowest of $name:"
  slowest "$log" | sort -rn | head -n 10 | sed 's/^/    /'
  if [ "$rc" != 0 ]; then
    echo "[test] $name FAILED; their summary (whole log: ${log#"$ROOT"/}):"
    summary "$log" | sed 's/^/    /'
  fi
  [ "$rc" = 0 ]
}

echo "[test] the tests that need no cluster run in the background (nice $NICE; log: ${local_log#"$ROOT"/})"
in_background "the tests that need no cluster" "$local_log" \
  nice -n "$NICE" make --no-print-directory --keep-going test-local test-mindspore
echo "[test] the cluster's side stream runs in the background (log: ${side_log#"$ROOT"/})"
in_background "the cluster's side stream" "$side_log" bash devcluster/pytest.sh "$py" "$@" --cluster-stream side \
  --junitxml="$LOGS/test-side-stream.xml"
trap 'for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null; done; exit 130' INT TERM

DPJOB_SIDE_STREAM_DONE="$side_log.rc" bash devcluster/pytest.sh "$py" "$@" --cluster-stream main \
  --junitxml="$LOGS/test-main-stream.xml"
main_rc=$?

wait "${pids[@]}"
report "the cluster's side stream" "$side_log"; side_rc=$?
report "the tests that need no cluster" "$local_log"; local_rc=$?
[ "$main_rc" = 0 ] && [ "$side_rc" = 0 ] && [ "$local_rc" = 0 ]

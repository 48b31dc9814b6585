#!/usr/bin/env bash
# `make test` after lint and cluster-up: the tests that need no cluster and the tests on the
# cluster, side by side.
#
# The cluster's tests run one at a time (they share one control plane and one operator) and spend
# most of their time waiting: on the kubelet, on a watchdog's timeout, on a Lease. The tests that
# need no cluster (unit tests, local DDP runs, the MindSpore backend's) are CPU work; they run in the
# background at a lower CPU priority (nice), so they mostly take the cores the cluster's tests leave
# idle (measured: the CPU is 33-55% idle during the cluster's tests; the few that overlap the
# background's ~5 minutes run about a quarter slower). Their output goes to a log; one line says
# when they are done, and a failure prints its summary again at the end.
#
# Usage: bash devcluster/test.sh PYTHON [pytest args for the cluster's tests...]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
py=$1; shift
LOGS="$ROOT/.devcluster/logs"
mkdir -p "$LOGS"
local_log="$LOGS/test-no-cluster.log"
NICE=${DPJOB_TEST_NICE:-10}

summary() { grep -E '^(=+ .*(passed|failed|error).* =+|FAILED |ERROR )' "$1" | tail -n 30; }
counts() { grep -E '^=+ .* in [0-9.]+s' "$1" | sed -E 's/^=+ | =+$//g' | paste -sd';' | sed 's/;/; /g'; }
slowest() { awk '/slowest [0-9]+ durations/{on=1; next} on && /^[0-9.]+s /{print} on && !/^[0-9.]+s /{on=0}' "$1"; }

echo "[test] the tests that need no cluster run in the background (nice $NICE; log: ${local_log#"$ROOT"/})"
set -m  # the background job gets a process group of its own, which an interrupt takes down whole
rm -f "$local_log.rc"
(
  started=$SECONDS
  nice -n "$NICE" make --no-print-directory --keep-going test-local test-mindspore >"$local_log" 2>&1
  rc=$?
  echo "$rc" >"$local_log.rc"
  verdict=$([ "$rc" = 0 ] && echo "passed" || echo "FAILED (exit $rc)")
  echo "[test] the tests that need no cluster: $verdict in $((SECONDS - started))s ($(counts "$local_log"))"
) &
local_pid=$!
set +m
trap 'kill -- -"$local_pid" 2>/dev/null; exit 130' INT TERM

bash devcluster/pytest.sh "$py" "$@"
cluster_rc=$?

wait "$local_pid"
local_rc=$(cat "$local_log.rc" 2>/dev/null || echo 1)
echo "[test] the slowest of the tests that need no cluster:"
slowest "$local_log" | sort -rn | head -n 10 | sed 's/^/    /'
if [ "$local_rc" != 0 ]; then
  echo "[test] the tests that need no cluster FAILED; their summary (whole log: ${local_log#"$ROOT"/}):"
  summary "$local_log" | sed 's/^/    /'
fi
[ "$cluster_rc" = 0 ] && [ "$local_rc" = 0 ]

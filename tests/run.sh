#!/usr/bin/env bash
# Run the test suite against the real stack: start it when it is not running, stop what we started.
set -uo pipefail
# Everything by default, in two pytest runs: the unit, integration and e2e tests on
# DOCSTREAM_TEST_WORKERS pytest-xdist workers (default 2, whole files per worker so that module
# fixtures are shared; most of these tests wait on a broker, a group join or a child process: on
# 2 cores, 2 workers took 13.4 min where one took about 20, and 3 took 11.8 min but failed two
# time-limit tests), then the short chaos scenarios on their own, since they stop and
# restart parts of the stack (docs/reliability.md); `make chaos` runs their full versions.
# With arguments: one pytest run of exactly those.
bin=${1:?usage: tests/run.sh VENV_BIN [pytest args...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# The cluster scenarios (marker cluster) need a 3+3 cluster whose start does not fit this budget:
# tests/run-cluster.sh runs them (make chaos).
if [ "$#" -eq 0 ]; then
  first=(tests/unit tests/integration tests/e2e -m "not cluster" --durations=25)
  parallel=(-n "${DOCSTREAM_TEST_WORKERS:-2}" --dist loadfile)
  second=(tests/chaos -m "not cluster" --durations=10)
else
  first=("$@")
  parallel=()
  second=()
fi
# Collect first, in seconds and before any stack starts: an import error fails here, not minutes later.
collect() {
  "$bin/pytest" --collect-only -q -p no:xdist "$@" >/dev/null || {
    "$bin/pytest" --collect-only -q -p no:xdist "$@" | tail -30
    echo "pytest could not collect the tests: failing" >&2; exit 1
  }
}
collect "${first[@]}"
if [ "${#second[@]}" -gt 0 ]; then collect "${second[@]}"; fi
started=0
if ! deploy/local/stack status >/dev/null 2>&1; then
  # A stack we start is a throwaway test stack: begin from empty data (the jars stay cached), so
  # topics left by earlier runs never slow Kafka's start (it replays every partition's log first).
  deploy/local/stack clean >/dev/null
  deploy/local/stack up || { echo "could not start the local stack" >&2; exit 1; }
  started=1
fi
rc=0
run() {
  "$bin/pytest" "$@"
  local status=$?
  if [ "$status" = 5 ]; then echo "pytest collected no tests: failing" >&2; status=1; fi
  if [ "$status" != 0 ] && [ "$rc" = 0 ]; then rc=$status; fi
}
run "${first[@]}" "${parallel[@]}"
if [ "${#second[@]}" -gt 0 ]; then run "${second[@]}"; fi
if [ "$started" = 1 ]; then deploy/local/stack down; fi
exit "$rc"

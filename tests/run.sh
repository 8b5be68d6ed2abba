#!/usr/bin/env bash
# Run the test suite against the real stack: start it when it is not running, stop what we started.
set -uo pipefail
# Everything by default, the short chaos scenarios last: they stop and restart parts of the stack
# (docs/reliability.md); `make chaos` runs their full versions.
bin=${1:?usage: tests/run.sh VENV_BIN [pytest args...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# The cluster scenarios (marker cluster) need a 3+3 cluster whose start does not fit this budget:
# tests/run-cluster.sh runs them (make chaos).
if [ "$#" -eq 0 ]; then set -- tests/unit tests/integration tests/e2e tests/chaos -m "not cluster" --durations=25; fi
# Collect first, in seconds and before any stack starts: an import error fails here, not minutes later.
"$bin/pytest" --collect-only -q "$@" >/dev/null || {
  "$bin/pytest" --collect-only -q "$@" | tail -30
  echo "pytest could not collect the tests: failing" >&2; exit 1
}
started=0
if ! deploy/local/stack status >/dev/null 2>&1; then
  # A stack we start is a throwaway test stack: begin from empty data (the jars stay cached), so
  # topics left by earlier runs never slow Kafka's start (it replays every partition's log first).
  deploy/local/stack clean >/dev/null
  deploy/local/stack up || { echo "could not start the local stack" >&2; exit 1; }
  started=1
fi
"$bin/pytest" "$@"
rc=$?
if [ "$started" = 1 ]; then deploy/local/stack down; fi
if [ "$rc" = 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"

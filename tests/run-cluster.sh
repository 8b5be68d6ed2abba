#!/usr/bin/env bash
# The cluster chaos scenarios (marker cluster, tests/chaos/test_cluster.py) on a cluster of deploy/local:
# stop whatever runs in the stack home, start 3 brokers and a 3-node ring, run them, stop the cluster and
# `clean` it, which resets the home's topology to one node of each (`stack up` is the single stack again).
set -uo pipefail
bin=${1:?usage: tests/run-cluster.sh VENV_BIN [pytest args...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
"$bin/pytest" --collect-only -q -m cluster tests/chaos/test_cluster.py >/dev/null || {
  echo "pytest could not collect the cluster scenarios: failing" >&2; exit 1
}
stack=deploy/local/stack
"$stack" down >/dev/null || { echo "could not stop the running stack" >&2; exit 1; }
if ! "$stack" up --kafka-brokers 3 --cassandra-nodes 3; then
  echo "could not start the cluster" >&2
  "$stack" down; "$stack" clean >/dev/null; exit 1
fi
"$bin/pytest" -m cluster tests/chaos/test_cluster.py --durations=10 "$@"
rc=$?
"$stack" down
"$stack" clean >/dev/null
if [ "$rc" = 5 ]; then echo "pytest collected no cluster scenario: failing" >&2; exit 1; fi
exit "$rc"

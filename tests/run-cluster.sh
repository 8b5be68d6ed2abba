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
# the test process died with SIGSEGV twice in 8 sessions (docs/reliability.md "Open failures"):
# let it leave a core (kernel.core_pattern "core" puts it here), and print every thread's native stack
crash_dir="$here/.docstream/chaos/crash"
rm -rf "$crash_dir" "$here"/core "$here"/core.[0-9]*; mkdir -p "$crash_dir"
ulimit -c unlimited 2>/dev/null || echo "run-cluster: no core dumps here (ulimit -c)" >&2
"$bin/pytest" -m cluster tests/chaos/test_cluster.py --durations=10 "$@"
rc=$?
mv "$here"/core "$here"/core.[0-9]* "$crash_dir"/ 2>/dev/null
for core in "$crash_dir"/core*; do
  [ -e "$core" ] || continue
  echo "run-cluster: the test process left $core (rc $rc); its native stacks:" >&2
  if command -v gdb >/dev/null; then
    gdb -batch -nx -ex "info sharedlibrary" -ex "thread apply all bt 30" "$bin/python" "$core" \
      >"$crash_dir/backtrace.txt" 2>&1
    grep -E "^Thread|^#" "$crash_dir/backtrace.txt" | head -200 >&2
    echo "run-cluster: full backtrace in $crash_dir/backtrace.txt" >&2
  else
    echo "run-cluster: no gdb to read it" >&2
  fi
  rm -f "$core"
done
"$stack" down
"$stack" clean >/dev/null
if [ "$rc" = 5 ]; then echo "pytest collected no cluster scenario: failing" >&2; exit 1; fi
exit "$rc"

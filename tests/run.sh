#!/usr/bin/env bash
# Run the test suite against the real stack: start it when it is not running, stop what we started.
set -uo pipefail
# Everything by default, in three pytest runs:
# 1. the integration and e2e tests on DOCSTREAM_TEST_WORKERS pytest-xdist workers (default 4 on 2 cores: they
#    often wait on Kafka, Cassandra and service processes: 4 finish sooner than 3, and 3 than 2, for the same CPU;
#    docs/log/performance.md "make test on 2 cores" has the runs. The two timing
#    tests that failed beside 3 workers on a loaded host, the extraction child's OCR time limit and the
#    reducer's stall restart, are marked `alone` and run in 2.), whole files per worker so that module
#    fixtures are shared, the longest files first (tests/fixtures/ordering.py); with them the short
#    extraction fuzz, which touches no stack and is bounded by its own 25 s budget (its figures go to
#    .docstream/chaos/report-extraction.json, or DOCSTREAM_CHAOS_REPORT's name with -extraction, so
#    that the chaos run's report does not overwrite them);
# 2. then the short chaos scenarios, with no other test on the stack, since they stop and restart
#    parts of it (docs/reliability.md; `make chaos` runs their full versions); on a stack this script
#    started, the topics the first run left are deleted first (tests/fixtures/reset_topics.py: a broker
#    restart closes and opens every partition's log, some 3,000 of them); and the timing-sensitive
#    tests marked `alone` (the reducer's stall self-restart: beside the integration tests on a loaded
#    2-core machine its 3 s stall timeout never fired, in a run where everything else passed);
# 3. beside them, the unit tests, which touch no stack, at nice 19: the scenarios mostly wait on
#    their services, and the unit tests take the CPU those leave idle, never the scenarios' share;
#    with them the e2e files whose `docstream run` brings its own embedded stack and that need no
#    timing (the generate, versions, scripts and tables runs, and the GPU check's dry run: work the first run's
#    workers no longer wait for), the extraction fidelity and OCR accuracy tests, which touch no
#    stack (about a hundred seconds of OCR that kept the first run past its budget when they ran in it), and
#    DOCSTREAM_TEST_ALSO, a command of `make test`'s (mypy: a minute of CPU the pre-phase
#    no longer waits for), whose failure fails the run too.
# DOCSTREAM_TEST_FIRST, a command of `make test`'s (the linters and the test dependencies' installs), runs while
# the stack starts, before any test; its failure stops the run.
# With arguments: one pytest run of exactly those.
bin=${1:?usage: tests/run.sh VENV_BIN [pytest args...]}
shift
# OpenMP threads that wait passively, in every test process and every service they start: torch's OpenMP
# threads spin after each parallel region by default, which on 2 cores shared by three test workers, their
# services, Kafka and Cassandra burns CPU others wait for: with one busy core beside it the model took a third less
# CPU passive, and the same time on an idle machine (docs/log/performance.md "OpenMP's wait policy under contention").
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# The cluster scenarios (marker cluster) need a 3+3 cluster whose start does not fit this budget:
# tests/run-cluster.sh runs them (make chaos).
if [ "$#" -eq 0 ]; then
  fuzz=tests/chaos/test_extraction_fuzz.py
  own_stack=(tests/e2e/test_run_generate.py tests/e2e/test_run_versions.py tests/e2e/test_run_scripts.py
             tests/e2e/test_run_tables.py tests/e2e/test_run_broker.py tests/e2e/test_gpu_dry_run.py
             tests/integration/test_fidelity.py tests/integration/test_ocr_accuracy.py)
  first=(tests/integration tests/e2e "$fuzz" -m "not cluster and not alone" --durations=25)
  for file in "${own_stack[@]}"; do first+=(--ignore "$file"); done
  # --no-loadscope-reorder: the files go in the order tests/fixtures/ordering.py gives, longest first
  parallel=(-n "${DOCSTREAM_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder)
  second=(tests/chaos tests/integration -m "(chaos or alone) and not cluster" --ignore "$fuzz" --durations=10)
  beside=(tests/unit "${own_stack[@]}" --durations=10 -n 2 --dist loadfile --no-loadscope-reorder)
  every=(tests/unit tests/integration tests/e2e tests/chaos -m "not cluster")
  first_report=$here/.docstream/chaos/report-extraction.json
  if [ -n "${DOCSTREAM_CHAOS_REPORT:-}" ]; then first_report=${DOCSTREAM_CHAOS_REPORT%.json}-extraction.json; fi
else
  first=("$@")
  parallel=()
  second=()
  beside=()
  every=("$@")
fi
# The stack this script starts runs its JVMs on the C1 compiler alone: for a stack that lives one run, C2 cost more
# CPU than its faster code saved (Cassandra 161 s of CPU and Kafka 39 s on a slice of the integration tests, then
# 101 s and 23 s with C1; the slice's wall 254 s, then 219 s; docs/log/performance.md). DOCSTREAM_STACK_JAVA_OPTS set
# (even empty) wins.
export DOCSTREAM_STACK_JAVA_OPTS=${DOCSTREAM_STACK_JAVA_OPTS--XX:TieredStopAtLevel=1}
# The stack starts in the background while DOCSTREAM_TEST_FIRST runs, the modules compile and the tests are
# collected (its Java processes and those each wait on the other's CPU less than on themselves).
started=0
if ! deploy/local/stack status >/dev/null 2>&1; then
  # A stack we start is a throwaway test stack: begin from empty data (the jars stay cached), so
  # topics left by earlier runs never slow Kafka's start (it replays every partition's log first).
  { deploy/local/stack clean >/dev/null && deploy/local/stack up; } &
  stack_pid=$!
  started=1
fi
stack_ready() {
  if [ "$started" = 1 ] && ! wait "$stack_pid"; then echo "could not start the local stack" >&2; return 1; fi
}
if [ -n "${DOCSTREAM_TEST_FIRST:-}" ] && ! bash -c "$DOCSTREAM_TEST_FIRST"; then
  echo "$DOCSTREAM_TEST_FIRST failed: no test runs" >&2
  stack_ready && [ "$started" = 1 ] && deploy/local/stack down
  exit 1
fi
# The project's own modules as .pyc files once (the venv's are written at install: Makefile): where
# PYTHONDONTWRITEBYTECODE is set, every test process and service compiled them from source again.
"$bin/python" -m compileall -q -j 0 libs services tests >/dev/null
# Collect every selected test beside the first run, at nice 10 (12 s of CPU on an idle machine, 30-50 s while the
# stack starts, when it was the wait before the first test): the first run's own import errors stop it at once;
# one elsewhere fails the run when the first run ends, before the second starts.
collect_log=$(mktemp "${TMPDIR:-/tmp}/docstream-collect.XXXXXX")
nice -n 10 "$bin/pytest" --collect-only -q -p no:xdist "${every[@]}" >"$collect_log" 2>&1 &
collect_pid=$!
collected() {
  if wait "$collect_pid"; then rm -f "$collect_log"; return 0; fi
  tail -30 "$collect_log"; rm -f "$collect_log"
  echo "pytest could not collect the tests: failing" >&2
  return 1
}
stack_ready || { kill "$collect_pid" 2>/dev/null; exit 1; }
rc=0
run() {
  "$bin/pytest" "$@"
  local status=$?
  if [ "$status" = 5 ]; then echo "pytest collected no tests: failing" >&2; status=1; fi
  if [ "$status" != 0 ] && [ "$rc" = 0 ]; then rc=$status; fi
}
if [ "${#second[@]}" -gt 0 ]; then
  DOCSTREAM_CHAOS_REPORT=$first_report run "${first[@]}" "${parallel[@]}"
else
  run "${first[@]}" "${parallel[@]}"
fi
if ! collected; then
  [ "$started" = 1 ] && deploy/local/stack down
  exit 1
fi
if [ "${#second[@]}" -gt 0 ] && [ "$started" = 1 ]; then
  "$bin/python" -m tests.fixtures.reset_topics || echo "the first run's topics stay: the scenarios run beside them" >&2
fi
if [ "${#second[@]}" -gt 0 ]; then
  beside_log=$(mktemp "${TMPDIR:-/tmp}/docstream-unit.XXXXXX")
  also_log=$(mktemp "${TMPDIR:-/tmp}/docstream-also.XXXXXX")
  nice -n 19 "$bin/pytest" "${beside[@]}" >"$beside_log" 2>&1 &
  beside_pid=$!
  also_pid=
  if [ -n "${DOCSTREAM_TEST_ALSO:-}" ]; then
    nice -n 19 bash -c "$DOCSTREAM_TEST_ALSO" >"$also_log" 2>&1 &
    also_pid=$!
  fi
  trap 'kill $beside_pid $also_pid 2>/dev/null' EXIT  # an interrupted run leaves nothing behind
  run "${second[@]}"
  wait "$beside_pid"; beside_status=$?
  if [ -n "$also_pid" ]; then
    wait "$also_pid"; also_status=$?
    echo "---- $DOCSTREAM_TEST_ALSO, run beside the chaos scenarios ----"
    cat "$also_log"
    if [ "$also_status" != 0 ] && [ "$rc" = 0 ]; then rc=$also_status; fi
  fi
  rm -f "$also_log"
  echo "---- the unit tests (and the e2e runs on their own embedded stack), run beside the chaos scenarios ----"
  cat "$beside_log"; rm -f "$beside_log"
  if [ "$beside_status" = 5 ]; then echo "pytest collected no unit tests: failing" >&2; beside_status=1; fi
  if [ "$beside_status" != 0 ] && [ "$rc" = 0 ]; then rc=$beside_status; fi
fi
if [ "$started" = 1 ]; then deploy/local/stack down; fi
exit "$rc"

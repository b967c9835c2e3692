#!/usr/bin/env bash
# `make test-repeat`: the cluster, chaos and concurrency tests REPEAT times in a row (default 3), stopping
# at the first red run. HOG=1 keeps one core busy with another process meanwhile, as a loaded machine
# would. Extra arguments go to pytest (say, -k chaos).
set -uo pipefail
cd "$(dirname "$0")/.."
REPEAT="${REPEAT:-3}"
HOG="${HOG:-0}"
PY=.venv/bin/python
# Tests whose outcome depends on timing between processes, threads and the store.
TESTS=(
  tests/cluster
  tests/core/test_catalog_races.py
  tests/core/test_admin_across_nodes.py
  tests/core/test_multiprocess.py
  tests/core/test_offset_invariant.py
  tests/core/test_follow_outside_lock.py
  tests/http/test_crash.py
  tests/http/test_fuzz.py
  tests/kafka/test_kafka_crash.py
)

hog_pid=""
stop_hog() { [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null; hog_pid=""; }
trap stop_hog EXIT
if [ "$HOG" = "1" ]; then
  # One busy core, at the same priority as the tests: `while True: pass` in its own process.
  "$PY" -c "while True: pass" &
  hog_pid=$!
  echo "test-repeat: a CPU hog runs beside the tests (pid $hog_pid)"
fi

for run in $(seq 1 "$REPEAT"); do
  echo "test-repeat: run $run of $REPEAT"
  if ! "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" "$@"; then
    echo "test-repeat: run $run of $REPEAT failed"
    exit 1
  fi
done
echo "test-repeat: $REPEAT runs green"

#!/usr/bin/env bash
# The tests: set everything up, then run the whole suite (unit + integration), in parallel
# (pytest-xdist: DDP_TEST_WORKERS processes; -n 0 among the arguments runs it in one process).
# Extra arguments go to pytest, e.g. -m 'not integration' or -k failing_rank
set -euo pipefail
DDP_SETUP_BROWSER=1  # the report pages are checked in a real browser
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

# By default one worker more than the cores (the tests wait on the engine and on timeouts part
# of the time), at most one per 3 GiB of memory, at least 2. The suite is CPU-bound: on 2 cores,
# 3 workers ended it in 15.5 min and 4 in 16.0 min, with 8% more CPU spent (docs/tests.md).
default_workers() {
    local cores mem_gib workers
    cores=$(nproc)
    mem_gib=$(awk '/^MemTotal:/ {print int($2 / 1048576)}' /proc/meminfo)
    workers=$((cores + 1))
    [ "$workers" -le "$((mem_gib / 3))" ] || workers=$((mem_gib / 3))
    [ "$workers" -ge 2 ] || workers=2
    echo "$workers"
}
exec "$PY" -m pytest -n "${DDP_TEST_WORKERS:-$(default_workers)}" --dist loadgroup "$@"

#!/usr/bin/env bash
# The tests: set everything up, then run the whole suite (unit + integration), in parallel
# (pytest-xdist: DDP_TEST_WORKERS processes, 3 by default, which keeps 2 cores busy while
# tests wait on timeouts and the engine; -n 0 among the arguments runs it in one process).
# Extra arguments go to pytest, e.g. -m 'not integration' or -k failing_rank
set -euo pipefail
DDP_SETUP_BROWSER=1  # the report pages are checked in a real browser
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec "$PY" -m pytest -n "${DDP_TEST_WORKERS:-3}" --dist loadgroup "$@"

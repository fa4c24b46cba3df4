#!/usr/bin/env bash
# The tests: set everything up, then run the whole suite (unit + integration).
# Extra arguments go to pytest, e.g. -m 'not integration' or -k failing_rank
set -euo pipefail
DDP_SETUP_BROWSER=1  # the report pages are checked in a real browser
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec "$PY" -m pytest "$@"

#!/usr/bin/env bash
# The main job: set everything up, then train the toy DDP model across two simulated nodes.
# Extra arguments go to `python -m orchestrate run`, e.g. --nproc-per-node 2 -- -m app.hello
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"
exec "$PY" -m orchestrate run --nodes 2 "$@"

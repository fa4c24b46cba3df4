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
WORKERS="${DDP_TEST_WORKERS:-$(default_workers)}"

# The whole suite (no test file or directory named, no -n 0) runs in two pytest sessions at once:
# the unit tests (tests/unit) in one of their own, beside the rest. The unit tests mostly wait
# (simulated engines and clocks: about 85 core-s in 155 s on 3 workers), so run last in one
# session they left the cores idle for over 2 minutes at its end; beside the real runs they
# fill the cores those leave idle. DDP_TEST_UNIT_BESIDE=0 runs one session, as before.
names_tests() {
    local arg previous=""
    for arg in "$@"; do
        case "$previous" in
            # the value of an option that takes one is no test path (-k tests, -c pyproject.toml)
            -k|-m|-p|-c|-o|--ignore|--ignore-glob|--deselect|--rootdir|--basetemp|--junitxml|--confcutdir) ;;
            -n|--numprocesses) [ "$arg" != "0" ] || return 0 ;;
            *) case "$arg" in
                   -n0|--numprocesses=0) return 0 ;;
                   # --lf and the like read the one session's cache of failures
                   --lf|--last-failed|--ff|--failed-first|--nf|--new-first|--sw|--stepwise|--sw-skip|--stepwise-skip) return 0 ;;
                   -*) ;;
                   *) [ ! -e "${arg%%::*}" ] || return 0 ;;  # a test file or directory (file::test too)
               esac ;;
        esac
        previous="$arg"
    done
    return 1
}
if [ "${DDP_TEST_UNIT_BESIDE:-1}" = "0" ] || names_tests "$@"; then
    exec "$PY" -m pytest -n "$WORKERS" --dist loadgroup "$@"
fi

UNIT_LOG="$(mktemp "${TMPDIR:-/tmp}/ddp-compose-unit-tests.XXXXXX")"
REST_PID="" UNIT_PID=""
interrupted() {
    for pid in "$REST_PID" "$UNIT_PID"; do
        [ -z "$pid" ] || kill -INT -- "-$pid" 2>/dev/null || true
    done
    for pid in "$REST_PID" "$UNIT_PID"; do
        [ -z "$pid" ] || wait "$pid" 2>/dev/null || true
    done
    echo "[run-tests] interrupted; the unit tests' output: $UNIT_LOG" >&2
    tail -n 5 "$UNIT_LOG" >&2
    exit 130
}
trap interrupted INT TERM HUP
echo "[run-tests] the unit tests run beside the rest, in a pytest session of their own; their output follows at the end"
# Each session in a process group of its own (job control on while they start), so that Ctrl-C,
# a closed terminal or a kill reaches this script alone, which passes one SIGINT to each: both
# end as pytest ends on Ctrl-C, removing what their tests made, and nothing is left running. Their
# input is /dev/null: a process of a background group that read the terminal would be stopped.
# The unit tests keep their own cache of failures (--lf runs one session, reading the other's).
set -m
"$PY" -m pytest "$@" -n "${DDP_TEST_UNIT_WORKERS:-2}" -o cache_dir=.pytest_cache/unit tests/unit \
    </dev/null >"$UNIT_LOG" 2>&1 &
UNIT_PID=$!
"$PY" -m pytest -n "$WORKERS" --dist loadgroup --ignore=tests/unit "$@" tests </dev/null &
REST_PID=$!
set +m
set +e
wait "$REST_PID"
REST=$?
wait "$UNIT_PID"
UNIT=$?
set -e
trap - INT TERM HUP
echo
echo "==================== the unit tests (tests/unit), run beside the rest ===================="
cat "$UNIT_LOG"
rm -f "$UNIT_LOG"
# pytest's 5 is "no test selected": fine for one session when the other ran tests
if [ "$REST" -eq 5 ] && [ "$UNIT" -eq 5 ]; then exit 5; fi
[ "$REST" -ne 5 ] || REST=0
[ "$UNIT" -ne 5 ] || UNIT=0
echo "[run-tests] the rest: exit $REST; the unit tests: exit $UNIT"
[ "$REST" -eq 0 ] || exit "$REST"
exit "$UNIT"

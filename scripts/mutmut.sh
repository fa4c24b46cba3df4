#!/usr/bin/env bash
# Mutation testing by a tool, on purpose, never in CI: every mutant mutmut makes of the files
# given (by default the fault modules that scripts/mutants.py's hand-written mutants leave out),
# run against the unit tests, then each survivor's diff. Where scripts/mutants.py asks "does the
# suite catch these bugs we thought of", this asks "which lines can change unnoticed".
#
#   bash scripts/mutmut.sh                                  # the default files (about an hour on 2 cores)
#   bash scripts/mutmut.sh orchestrate/outcome/judge.py     # other files
#   MUTMUT_TESTS="tests/unit/test_outcome.py" bash scripts/mutmut.sh orchestrate/outcome/judge.py
#                                                           # against those tests only (faster; more survive)
#   MUTMUT_ONLY="*ǁSupervisorǁstop__* *ǁSupervisorǁkill__*" bash scripts/mutmut.sh orchestrate/supervise/supervisor.py
#                                                           # only the mutants of those functions (globs)
#
# It works in a scratch clone of HEAD with the working tree's changes and new files (the checkout is never
# changed), with mutmut in a venv of its own that sees .venv's packages, and removes both after.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MUTMUT_VERSION="3.8.1"  # the version this script's configuration was written and run with
DEFAULT_FILES=(orchestrate/faults/live.py orchestrate/faults/inject.py orchestrate/faults/network.py
               orchestrate/faults/ranks.py orchestrate/faults/live_notes.py orchestrate/faults/storage.py)
if [ $# -gt 0 ]; then FILES=("$@"); else FILES=("${DEFAULT_FILES[@]}"); fi

[ -x "$ROOT/.venv/bin/python" ] || { echo "error: no .venv: run bash scripts/run-tests.sh once first" >&2; exit 2; }
for file in "${FILES[@]}"; do
    [ -f "$ROOT/$file" ] || { echo "error: no such file: $file" >&2; exit 2; }
done

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/ddp-mutmut-XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT

echo "[mutmut] a scratch clone and mutmut $MUTMUT_VERSION in $SCRATCH"
git clone -q "$ROOT" "$SCRATCH/checkout"
CHANGES="$(git -C "$ROOT" diff HEAD)"
[ -z "$CHANGES" ] || (cd "$SCRATCH/checkout" && git apply <<< "$CHANGES")
# new files not yet added (a test being written) come along too
git -C "$ROOT" ls-files -z --others --exclude-standard -- ':!mutants' \
    | (cd "$ROOT" && xargs -0 -r cp -P --parents -t "$SCRATCH/checkout" --)
BASE_PYTHON="$("$ROOT/.venv/bin/python" -c 'import sys; print(sys._base_executable)')"
"$BASE_PYTHON" -m venv "$SCRATCH/venv"
SITE="$("$SCRATCH/venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
"$ROOT/.venv/bin/python" -c 'import site; print(site.getsitepackages()[0])' > "$SITE/ddp_compose_venv.pth"
"$SCRATCH/venv/bin/python" -m pip install -q "mutmut==$MUTMUT_VERSION"

cd "$SCRATCH/checkout"
{
    echo
    echo "[tool.mutmut]"
    echo 'source_paths = ["orchestrate"]'
    printf 'only_mutate = [%s]\n' "$(printf '"%s", ' "${FILES[@]}" | sed 's/, $//')"
    echo 'also_copy = ["app", "docker", "docs", "examples", "scripts", "benchmarks", "compose.yaml", "compose.cpu.yaml", "README.md"]'
    printf 'pytest_add_cli_args_test_selection = [%s]\n' "$(printf '"%s", ' ${MUTMUT_TESTS:-tests/unit} | sed 's/, $//')"
    # test_hand_mutants reads the sources for scripts/mutants.py's text, which mutmut's copies hold many times
    echo 'pytest_add_cli_args = ["-p", "no:cacheprovider", "--timeout=60", "--ignore=tests/unit/test_hand_mutants.py"]'
} >> pyproject.toml
# The tests' own subprocesses (python -m orchestrate, pytester) import the mutated copy too.
mkdir -p mutants
export PYTHONPATH="$PWD/mutants"
echo "[mutmut] mutating ${FILES[*]}"
# mutmut redraws one progress line; every 50th mutant's is kept
# MUTMUT_ONLY: mutant names (globs) to run, for some functions of a large file
read -r -a ONLY <<< "${MUTMUT_ONLY:-}"
"$SCRATCH/venv/bin/mutmut" run --max-children "$(getconf _NPROCESSORS_ONLN)" ${ONLY[@]+"${ONLY[@]}"} 2>&1 | tr '\r' '\n' \
    | awk '/ [0-9]+\/[0-9]+ / { if (++seen % 50 == 0) print; next } /(Generating mutants|Running stats|Running clean tests|Listing)/ { next } { print }'
results="$("$SCRATCH/venv/bin/mutmut" results --all true)"
echo "[mutmut] mutants by verdict:"
awk -F': ' '$2 != "not checked" {print $2}' <<< "$results" | sort | uniq -c
if ! awk -F': ' '$2 != "not checked" {found = 1} END {exit !found}' <<< "$results"; then
    echo "[mutmut] no mutant was checked: do the MUTMUT_ONLY globs match any? (mutmut results names them)" >&2
    exit 1
fi
echo "[mutmut] each one not killed, with its change:"
awk -F': ' '$2 != "killed" && $2 != "not checked" { sub(/^ +/, "", $1); print $1 "\t" $2 }' <<< "$results" |
while IFS=$'\t' read -r mutant verdict; do
    echo "== $mutant ($verdict)"
    "$SCRATCH/venv/bin/mutmut" show "$mutant" < /dev/null 2>/dev/null | grep -E '^[-+] ' || true
done

"""The hand-written mutants (``scripts/mutants.py``, run on purpose, never in CI) still apply: the
code each one breaks is in its file exactly once, and the tests it names exist. A change that
moves that code away would otherwise be found only by the next run on purpose, which then stops
at that mutant."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def hand_written_mutants() -> list:
    spec = importlib.util.spec_from_file_location("hand_written_mutants", ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module.MUTANTS


@pytest.mark.parametrize("mutant", hand_written_mutants(), ids=lambda mutant: mutant.name)
def test_each_hand_written_mutant_still_applies(mutant):
    assert (ROOT / mutant.path).read_text().count(mutant.old) == 1, f"{mutant.path} no longer has {mutant.old!r}"
    assert mutant.old != mutant.new
    assert [test for test in mutant.tests if not (ROOT / test).is_file()] == []

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


def mutants_script():
    spec = importlib.util.spec_from_file_location("hand_written_mutants", ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def hand_written_mutants() -> list:
    return mutants_script().MUTANTS


@pytest.mark.parametrize("mutant", hand_written_mutants(), ids=lambda mutant: mutant.name)
def test_each_hand_written_mutant_still_applies(mutant):
    assert (ROOT / mutant.path).read_text().count(mutant.old) == 1, f"{mutant.path} no longer has {mutant.old!r}"
    assert mutant.old != mutant.new
    assert [test for test in mutant.tests if not (ROOT / test).is_file()] == []


SOURCE = """def check(text):
    return text


def seconds(text):
    value = float(text)
    return value


class Request:
    def check(
        self,
    ) -> None:
        if self.detach and self.keep:
            raise UsageError("--keep needs the launcher attached:"
                             " drop --detach")
        value = float(text)
        return None


def later(text):
    value = float(text)
    return -value
"""
# What scripts/mutmut.sh prints of four survivors: mutmut shows a method's lines 4 spaces less
# indented than the file has them.
MUTMUT_LOG = """[mutmut] mutants by verdict:
      4 survived
[mutmut] each one not killed, with its change:
== orchestrate.config.request.xǁRequestǁcheck__mutmut_1 (survived)
-    if self.detach and self.keep:
+    if self.detach or self.keep:
== orchestrate.config.request.xǁRequestǁcheck__mutmut_2 (survived)
-        raise UsageError("--keep needs the launcher attached:"
-                         " drop --detach")
+        raise UsageError(None)
== orchestrate.config.request.xǁRequestǁcheck__mutmut_3 (no tests)
-    value = float(text)
+    value = None
-    return None
== orchestrate.config.request.x_seconds__mutmut_4 (survived)
-    value = float(text)
+    value = float(None)
"""


def test_a_tools_survivors_are_replayed_as_the_changes_it_printed():
    read = {"orchestrate/config/request.py": SOURCE}.__getitem__
    mutants, skipped = mutants_script().survivors_of(MUTMUT_LOG, read, ("tests/unit/test_request.py",))
    assert skipped == []
    names = [f"orchestrate.config.request.{name}" for name in
             [f"xǁRequestǁcheck__mutmut_{n}" for n in (1, 2, 3)] + ["x_seconds__mutmut_4"]]
    assert [(m.name, m.path, m.tests) for m in mutants] == [
        (name, "orchestrate/config/request.py", ("tests/unit/test_request.py",)) for name in names]
    assert [SOURCE.count(m.old) for m in mutants] == [1, 1, 1, 1]
    applied = [SOURCE.replace(m.old, m.new) for m in mutants]
    assert applied == [
        SOURCE.replace("detach and self", "detach or self"),
        SOURCE.replace('UsageError("--keep needs the launcher attached:"\n'
                       '                             " drop --detach")', "UsageError(None)"),
        SOURCE.replace("        value = float(text)\n        return None\n", "        value = None\n"),  # the method's
        SOURCE.replace("    value = float(text)\n    return value", "    value = float(None)\n    return value"),
    ]


def test_a_survivor_whose_line_or_function_is_gone_or_whose_change_is_there_twice_is_skipped_with_why():
    path = "orchestrate/config/request.py"
    changed = {path: SOURCE.replace("self.keep", "self.faults")}.__getitem__
    mutants, skipped = mutants_script().survivors_of(MUTMUT_LOG, changed, ())
    assert [m.name for m in mutants] == [f"orchestrate.config.request.{name}" for name in (
        "xǁRequestǁcheck__mutmut_2", "xǁRequestǁcheck__mutmut_3", "x_seconds__mutmut_4")]
    assert skipped == [("orchestrate.config.request.xǁRequestǁcheck__mutmut_1", f"its line is no longer in its function in {path}: the code"
                                                     " changed since the pass")]
    renamed = {path: SOURCE.replace("def check(", "def checked(")}.__getitem__
    mutants, skipped = mutants_script().survivors_of(MUTMUT_LOG, renamed, ())
    assert [m.name for m in mutants] == ["orchestrate.config.request.x_seconds__mutmut_4"]
    assert [why for _, why in skipped] == [f"xǁRequestǁcheck: no function check in {path}: the code changed since"
                                           " the pass"] * 3
    block = "        value = float(text)\n        return None\n"  # twice in a row: str.count finds it once
    twice = {path: SOURCE.replace(block, block * 2)}.__getitem__
    mutants, skipped = mutants_script().survivors_of(MUTMUT_LOG, twice, ())
    assert "orchestrate.config.request.xǁRequestǁcheck__mutmut_3" not in [m.name for m in mutants]
    assert skipped == [("orchestrate.config.request.xǁRequestǁcheck__mutmut_3", f"its change is found 2 times in its function in {path}: try it"
                                                     " by hand")]

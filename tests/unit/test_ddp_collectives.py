"""DDP's rebuild of its gradient buckets in the collective record: recorded while a rank is in it,
kept where it broadcast (the reducer says True), taken back out where it did not, and left alone
for a model that has rebuilt them or never will. DDP's reducer is C++: these fakes stand for it
and its model (tests/workers/test_collective_record.py runs the real one)."""
from __future__ import annotations

import os
import sys

import pytest

from orchestrate.node.collective_log import CollectiveLog, relative
from orchestrate.node.ddp_collectives import REBUILT_BUCKETS, rebuilds_buckets, record_bucket_rebuild


class Net:
    pass


class Reducer:
    """DDP's C++ reducer: ``_rebuild_buckets`` says whether it rebuilt (and broadcast) them, or raises."""

    def __init__(self, log: CollectiveLog, rebuilds: bool) -> None:
        self.log, self.rebuilds, self.seen, self.error = log, rebuilds, [], None

    def _rebuild_buckets(self) -> bool:
        self.seen.append([(e["seq"], e["op"], e["shapes"], e["state"]) for e in self.log.snapshot()])
        if self.error is not None:
            raise self.error
        return self.rebuilds


class DDP:
    def __init__(self, reducer: Reducer, **settings) -> None:
        self.module, self.reducer, self.process_group = Net(), reducer, None
        self._has_rebuilt_buckets = settings.get("rebuilt", False)
        self.static_graph = settings.get("static_graph", False)
        self.find_unused_parameters = settings.get("find_unused_parameters", False)


def installed(rebuilds: bool, **settings):
    """A record, a reducer class wrapped by record_bucket_rebuild, and a model whose forward pass
    is under way."""
    log = CollectiveLog()
    reducer_class = type("Reducer", (Reducer,), {})
    model = DDP(reducer_class(log, rebuilds), **settings)
    record_bucket_rebuild(log, lambda group: "default", reducer_class, lambda: model)
    return log, model


def here() -> str:
    frame = sys._getframe(1)
    return f"{relative(frame.f_code.co_filename)}:{frame.f_lineno + 1}"


def test_a_rebuild_that_broadcasts_is_recorded_while_it_lasts_and_kept():
    log, model = installed(rebuilds=True)
    at = here()
    assert model.reducer._rebuild_buckets() is True
    # while the reducer broadcast, its rank was in the record's collective, at the forward pass's line
    assert model.reducer.seen == [[(1, "broadcast", f"{REBUILT_BUCKETS}Net)", "entered")]]
    assert [(e["seq"], e["shapes"], e["at"], e["state"]) for e in log.snapshot()] == [
        (1, "rebuilt buckets of DDP(Net)", at, "done")]
    assert log.call_lines() == {at: 1}
    # once rebuilt (DDP says so from then on), its next forward passes call the reducer unrecorded
    model._has_rebuilt_buckets = True
    model.reducer._rebuild_buckets()
    assert len(log.snapshot()) == 1 and model.reducer.seen[-1] == [(1, "broadcast", f"{REBUILT_BUCKETS}Net)", "done")]


def test_a_joined_ranks_rebuild_is_recorded_once_though_ddp_does_not_note_it():
    log, model = installed(rebuilds=True)
    model.reducer._rebuild_buckets()  # from a joined rank's hook, which leaves _has_rebuilt_buckets False
    model.reducer._rebuild_buckets()
    assert [e["shapes"] for e in log.snapshot()] == [f"{REBUILT_BUCKETS}Net)"]


def test_a_call_that_does_not_rebuild_is_taken_back_out_of_the_record_and_its_number_with_it():
    log, model = installed(rebuilds=False)  # the first forward pass: nothing to rebuild from yet
    log.enter("all_reduce", "default", "float32[1]", "t.py:3")
    assert model.reducer._rebuild_buckets() is False
    assert model.reducer.seen[0][-1] == (2, "broadcast", f"{REBUILT_BUCKETS}Net)", "entered")
    assert [(e["seq"], e["op"]) for e in log.snapshot()] == [(1, "all_reduce")]
    assert log.call_lines() == {"t.py:3": 1}
    assert log.enter("barrier", "default", "", "t.py:4")["seq"] == 2  # no gap where it was
    # and the next forward pass is looked at again (static_graph rebuilds after its second step)
    model.reducer.rebuilds = True
    model.reducer._rebuild_buckets()
    assert [(e["seq"], e["op"]) for e in log.snapshot()] == [(1, "all_reduce"), (2, "barrier"), (3, "broadcast")]


def test_the_reducers_own_check_before_it_broadcasts_is_no_failed_collective_and_the_broadcasts_error_is():
    """Parameters the loss left out fail DDP's next forward pass in ``_rebuild_buckets``, before it
    broadcasts anything: the record then says no collective failed (the judge names the error)."""
    log, model = installed(rebuilds=True)
    model.reducer.error = RuntimeError("Expected to have finished reduction in the prior iteration before starting a"
                                       " new one. This error indicates that your module has parameters that were not"
                                       " used in producing loss.")
    with pytest.raises(RuntimeError, match="Expected to have finished reduction"):
        model.reducer._rebuild_buckets()
    assert model.reducer.seen[0] == [(1, "broadcast", f"{REBUILT_BUCKETS}Net)", "entered")]
    assert log.snapshot() == [] and log.call_lines() == {}
    model.reducer.error = RuntimeError("Connection closed by peer [10.0.0.3]:6576")  # the broadcast's own
    with pytest.raises(RuntimeError):
        model.reducer._rebuild_buckets()
    assert [(e["seq"], e["state"], e["error"]) for e in log.snapshot()] == [
        (1, "failed", "RuntimeError: Connection closed by peer [10.0.0.3]:6576")]


def test_an_entry_is_not_retracted_once_another_of_its_group_came_after_it_but_is_after_another_groups():
    """Another group's call made meanwhile (a thread's, an async save's) leaves no gap in this
    group's numbers: the entry is taken out, or the rank's record would keep a broadcast its peers
    never saw, a divergence that is none."""
    log = CollectiveLog()
    first = log.enter("broadcast", "default", "x", "t.py:1")
    log.enter("all_reduce", "default", "y", "t.py:2")
    assert log.retract(first) is False
    assert [(e["seq"], e["op"]) for e in log.snapshot()] == [(1, "broadcast"), (2, "all_reduce")]
    log = CollectiveLog()
    first = log.enter("broadcast", "default", "x", "t.py:1")
    log.enter("all_reduce", "ranks 0,1", "y", "t.py:2")
    assert log.retract(first) is True
    assert [(e["group"], e["seq"], e["op"]) for e in log.snapshot()] == [("ranks 0,1", 1, "all_reduce")]
    assert log.call_lines() == {"t.py:2": 1}
    assert log.enter("barrier", "default", "z", "t.py:3")["seq"] == 1  # its number free again


def test_models_that_never_rebuild_or_have_rebuilt_are_left_unrecorded():
    for settings in ({"find_unused_parameters": True}, {"rebuilt": True}):
        log, model = installed(rebuilds=False, **settings)
        model.reducer._rebuild_buckets()
        assert model.reducer.seen == [[]] and log.snapshot() == [], settings
    assert rebuilds_buckets(DDP(None, static_graph=True, find_unused_parameters=True))
    assert not rebuilds_buckets(object())  # not a DDP model torch knows of: nothing said


def test_another_models_reducer_is_left_unrecorded():
    log = CollectiveLog()
    reducer_class = type("Reducer", (Reducer,), {})
    forwarded, other = DDP(reducer_class(log, True)), DDP(reducer_class(log, True))
    record_bucket_rebuild(log, lambda group: "default", reducer_class, lambda: forwarded)
    other.reducer._rebuild_buckets()
    assert log.snapshot() == []
    record_bucket_rebuild(log, lambda group: "default", type("Bare", (), {}), lambda: forwarded)  # no such method


def test_the_hooks_own_frames_are_not_the_caller():
    log, model = installed(rebuilds=True)
    model.reducer._rebuild_buckets()
    assert os.path.basename(__file__) in log.snapshot()[0]["at"]

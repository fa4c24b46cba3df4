"""The log pump alone (orchestrate/supervise/log_pump.py): each node's log streams into the
supervisor's inbox, and the messages taken out of it into whole worker lines, kept and shown,
against the fake engine of tests/fakes.py."""
from __future__ import annotations

import io
import queue
import threading
import time

import pytest

from orchestrate.supervise.api import LineArrived, LogEnded
from orchestrate.supervise.log_pump import LogPump
from orchestrate.supervise.worker_lines import OutputLine
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_supervisor_collaborators import drain, node_container, tracker_for


@pytest.fixture
def node0(make_job, tmp_path):
    """A node of two ranks whose container runs until it is killed, and its tracker."""
    plan = make_job(nodes=1, nproc_per_node=2)
    client = FakeDockerClient()
    container = node_container(client, "r", "node0", Script(hang=True))
    container.start()
    tracker = tracker_for(plan, 0, container, tmp_path)
    yield container, tracker
    container.killed.set()
    tracker.output.log_file.close()


def test_the_log_pump_shows_whole_worker_lines_and_drops_a_superseded_stream(make_job, tmp_path):
    plan = make_job(nodes=1, nproc_per_node=2)
    client = FakeDockerClient()
    # rank 1's line comes in two pieces around rank 0's whole line, as torchrun's tee cuts it
    # and a NUL byte, as torch's DataLoader worker writes with its segfault message, is dropped
    container = node_container(client, "r", "node0", Script(["[1|1]:half[0|0]:ze\0ro", "[1|1]: and the rest"]))
    tracker = tracker_for(plan, 0, container, tmp_path)
    container.start()
    inbox: "queue.Queue" = queue.Queue()
    out = io.StringIO()
    pump = LogPump(inbox, out, width=12)
    pump.follow(tracker)
    shown = []
    for message in drain(inbox, lambda m: isinstance(m, LogEnded)):
        shown += pump.take(tracker, message)
    assert [(line.global_rank, line.text) for line in shown] == [(0, "zero"), (1, "half and the rest")]
    assert not tracker.log_open
    assert out.getvalue().splitlines() == [f"{'[node0/rank0]':<14} zero", f"{'[node0/rank1]':<14} half and the rest"]
    tracker.output.log_file.close()
    assert (tmp_path / "node0.log").read_text().splitlines() == ["[node0/rank0] zero", "[node0/rank1] half and the rest"]
    stale = LineArrived("node0", tracker.stream - 1, "[0|0]:old", 0.0, 0.0)
    assert pump.take(tracker, stale) == []


def test_the_log_pump_joins_a_workers_pieces_each_from_its_own_stream(make_job, tmp_path):
    """Rank 0 prints a line in two parts on stdout while its progress bar begins on stderr, whose
    first "\\r" torchrun's tee copies as an empty line of rank 0's."""
    plan = make_job(nodes=1, nproc_per_node=2)
    client = FakeDockerClient()
    container = node_container(client, "r", "node0", Script(hang=True))
    tracker = tracker_for(plan, 0, container, tmp_path)
    container.start()
    for raw, source in (("[0|0]:rank 0 half[1|1]:", "stdout"), ("[0|0]:", "stderr"), ("[0|0]: and the rest", "stdout")):
        container.write(raw, source)
    inbox: "queue.Queue" = queue.Queue()
    pump = LogPump(inbox, io.StringIO(), width=12, verbose=True)
    pump.follow(tracker)
    shown = []

    def three_lines_shown(message) -> bool:  # (the two streams are read apart: their lines come in either order)
        shown.extend(pump.take(tracker, message))
        return len(shown) >= 3

    drain(inbox, three_lines_shown)
    assert sorted((line.global_rank, line.text) for line in shown) == [(0, ""), (0, "rank 0 half and the rest"),
                                                                        (1, "")]
    assert set(tracker.last_log_stamps) == {"stdout", "stderr"}
    # a stream that broke off is followed again from where each stream was: no line twice
    pump.follow(tracker, since=dict(tracker.last_log_stamps))
    container.write("[1|1]:after", "stderr")
    again = drain(inbox, lambda m: isinstance(m, LineArrived) and m.stream == tracker.stream and m.text == "[1|1]:after")
    assert [m.text for m in again if m.stream == tracker.stream] == ["[1|1]:after"]
    container.kill()


def test_each_follow_is_a_new_stream_whose_lines_and_end_carry_the_node_and_their_times(node0):
    container, tracker = node0
    inbox: "queue.Queue" = queue.Queue()
    pump = LogPump(inbox, io.StringIO(), width=12, clock=lambda: 42.0)
    container.stderr_log.append((time.time() - 5, "[0|0]:one"))  # printed 5 s before it is read
    assert pump.follow(tracker) == [] and (tracker.stream, tracker.log_open) == (1, True)
    [line] = drain(inbox, lambda m: isinstance(m, LineArrived))
    assert (line.node, line.stream, line.text, line.at, line.source) == ("node0", 1, "[0|0]:one", 42.0, "stderr")
    assert line.stamp == pytest.approx(container.stderr_log[0][0], abs=1e-3)  # the engine's own time of it
    # the readers are named after the node and stream: a stack dump of a stuck launcher says whose
    assert {"log-node0-1", "log-node0-1-stderr"} & {t.name for t in threading.enumerate()}
    before = time.time()
    container.kill()
    [end] = drain(inbox, lambda m: isinstance(m, LogEnded))
    assert (end.node, end.stream, end.at) == ("node0", 1, 42.0) and before - 1 <= end.stamp <= time.time()
    pump.follow(tracker)
    assert tracker.stream == 2


def test_a_new_stream_shows_first_what_the_old_one_left_unfinished(node0):
    _, tracker = node0
    out = io.StringIO()
    pump = LogPump(queue.Queue(), out, width=12)
    shown = pump.take(tracker, LineArrived("node0", 0, "[0|0]:half[1|1]:rank one", 100.0, 0.0))
    assert [(s.global_rank, s.text) for s in shown] == [(1, "rank one")]  # rank 0's line goes on later
    assert pump.follow(tracker) == [OutputLine("node0", "half", 0, 0)]  # a restart: it never will
    assert out.getvalue().splitlines() == [f"{'[node0/rank1]':<14} rank one", f"{'[node0/rank0]':<14} half"]


def test_a_workers_pieces_join_only_within_their_own_stream_whatever_order_the_streams_come_in(node0):
    _, tracker = node0
    pump = LogPump(queue.Queue(), io.StringIO(), width=12, verbose=True)
    shown = []
    for text, source in (("[0|0]:rank 0 half[1|1]:", "stdout"), ("[0|0]:", "stderr"), ("[0|0]: and the rest", "stdout")):
        shown += pump.take(tracker, LineArrived("node0", 0, text, 100.0, 0.0, source))
    assert [(line.global_rank, line.text) for line in shown] == [(1, ""), (0, ""), (0, "rank 0 half and the rest")]


def test_a_line_taken_in_moves_its_streams_read_position_and_times_the_first_worker_line(node0):
    _, tracker = node0
    pump = LogPump(queue.Queue(), io.StringIO(), width=12)
    for text in ("[0|0]:a", "[1|1]:b"):  # two lines of the same engine time, on stderr
        pump.take(tracker, LineArrived("node0", 0, text, 100.0, 0.0, "stderr"))
    assert tracker.last_log_stamps == {"stderr": (100.0, 2)}  # a broken stream resumes after both
    assert tracker.output.first_worker_line_at == 100.0


def test_a_streams_end_closes_it_and_shows_its_pieces_and_what_the_console_held_back(node0):
    _, tracker = node0
    out = io.StringIO()
    pump = LogPump(queue.Queue(), out, width=12)
    pump.take(tracker, LineArrived("node0", 0, "[0|0]:half[1|1]:", 100.0, 0.0))  # rank 1's empty line: held
    assert out.getvalue() == ""
    tracker.log_open = True
    ended = pump.take(tracker, LogEnded("node0", 0, 101.0, 0.0))
    assert ended == [OutputLine("node0", "half", 0, 0)] and not tracker.log_open
    assert out.getvalue().splitlines() == [f"{'[node0/rank0]':<14} half", f"{'[node0/rank1]':<14} "]


def test_verbose_shows_every_line_as_it_comes_and_quiet_leaves_torchruns_info_to_the_log(node0):
    _, tracker = node0
    info = "I1202 10:00:00.123000 77 torch/distributed/run.py:1] Starting elastic agent"
    for verbose, expected in ((True, [f"{'[node0]':<14} {info}", f"{'[node0/rank1]':<14} "]), (False, [])):
        out = io.StringIO()
        pump = LogPump(queue.Queue(), out, width=12, verbose=verbose)
        pump.take(tracker, LineArrived("node0", 0, info, 100.0, 0.0))
        pump.take(tracker, LineArrived("node0", 0, "[1|1]:", 100.0, 0.0))
        assert out.getvalue().splitlines() == expected


def test_a_flush_writes_the_kept_lines_to_the_node_log_and_passes_over_a_closed_one(node0, tmp_path):
    _, tracker = node0
    out = io.StringIO()
    pump = LogPump(queue.Queue(), out, width=12)
    pump.take(tracker, LineArrived("node0", 0, "[0|0]:kept", 100.0, 0.0))
    pump.flush([tracker])
    assert (tmp_path / "node0.log").read_text() == "[node0/rank0] kept\n"
    tracker.output.log_file.close()  # the run's end closed it
    pump.flush([tracker])

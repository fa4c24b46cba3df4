"""A rank whose main thread waits for another of its threads (a queue's get, a join, a lock): the
diagnosis says where the user's other threads are, and which ended with an error; the worker's
snapshot keeps those threads, and the threads that ended with an error, as real threads run."""
from __future__ import annotations

import json
import threading
from typing import Optional

import pytest

from orchestrate.hangs.diagnosis import THREAD_ENDED_HINT, diagnose
from orchestrate.hangs.snapshots import Collective, Frame, Probe, RankSnapshot, ThreadStack, waits_for_threads
from orchestrate.hangs.stacks import SHOWN_THREADS, group_stacks
from orchestrate.node.collective_log import CollectiveLog
from orchestrate.node.thread_errors import KEPT, ThreadErrors, error_line, install

pytestmark = pytest.mark.timeout(60)

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/distributed"
STDLIB = "/usr/lib/python3.11"

IN_ALL_REDUCE = (Frame("train.py", 17, "<module>", "dist.all_reduce(batch)"),
                 Frame(f"{TORCH}/c10d_logger.py", 81, "wrapper"), Frame(f"{TORCH}/distributed_c10d.py", 2942, "all_reduce"))
IN_QUEUE_GET = (Frame("train.py", 16, "<module>", "batch = q.get()"), Frame(f"{STDLIB}/queue.py", 171, "get"),
                Frame(f"{STDLIB}/threading.py", 320, "wait", "waiter.acquire()"))
PRODUCING = ThreadStack("producer", (Frame(f"{STDLIB}/threading.py", 1045, "_bootstrap_inner"),
                                     Frame(f"{STDLIB}/threading.py", 982, "run"),
                                     Frame("train.py", 9, "produce", "time.sleep(3600)")))
ENDED = ThreadStack("prefetcher", (Frame(f"{STDLIB}/threading.py", 982, "run"),
                                   Frame("train.py", 10, "prefetch", "raise ValueError(record)")),
                    error="ValueError: corrupt record 5")


def snap(rank: int, stack: tuple[Frame, ...], collectives: tuple[Collective, ...] = (),
         threads: tuple[ThreadStack, ...] = ()) -> RankSnapshot:
    return RankSnapshot(rank, f"node{rank}", 100 + rank, 0.0, 1.0, stack, collectives,
                        sum(c.state == "done" for c in collectives), threads=threads)


def waiting_in(seq: int) -> tuple[Collective, ...]:
    return tuple(Collective(n, "all_reduce", "default", "float32[2]", "train.py:17", "done") for n in range(1, seq)) + (
        Collective(seq, "all_reduce", "default", "float32[2]", "train.py:17", "entered"),)


def done(count: int) -> tuple[Collective, ...]:
    return tuple(Collective(n, "all_reduce", "default", "float32[2]", "train.py:17", "done") for n in range(1, count + 1))


def hung(r0: RankSnapshot, r1: RankSnapshot):
    return diagnose(Probe("b", 5.0, {0: r0, 1: r1}), Probe("a", 0.0, {0: r0, 1: r1}), {0, 1}, {}, 30)


def test_a_main_thread_in_a_queues_get_a_join_or_a_lock_waits_for_its_threads_and_one_in_a_collective_does_not():
    assert waits_for_threads(IN_QUEUE_GET)
    joining = (Frame("train.py", 30, "main", "loader.join()"), Frame(f"{STDLIB}/threading.py", 1112, "join"),
               Frame(f"{STDLIB}/threading.py", 1132, "_wait_for_tstate_lock"))
    assert waits_for_threads(joining)
    futures = (Frame("train.py", 30, "main", "batch = future.result()"),
               Frame(f"{STDLIB}/concurrent/futures/_base.py", 451, "result"))
    assert waits_for_threads(futures)
    # a lock's acquire is C, with no frame: the user's line is the wait
    assert waits_for_threads((Frame("train.py", 19, "<module>", "with stats_lock:"),))
    assert waits_for_threads((Frame("train.py", 19, "step", "self.lock.acquire()"),))
    assert not waits_for_threads((Frame("train.py", 19, "<module>", "with torch.no_grad():"),))
    assert not waits_for_threads((Frame("train.py", 19, "<module>", "loss = model(x)"),))
    assert not waits_for_threads(IN_ALL_REDUCE) and not waits_for_threads(())


def test_a_rank_whose_main_thread_waits_for_its_thread_is_placed_with_where_its_thread_is():
    found = hung(snap(0, IN_ALL_REDUCE, waiting_in(6)), snap(1, IN_QUEUE_GET, done(5), (PRODUCING,)))
    assert found.headline == ("no progress for 30 s: rank 0 waits in all_reduce(float32[2]) #6 at train.py:17; rank 1 is at"
                              " #5 (not in a collective: get at train.py:16 in <module>;"
                              " its thread producer: produce at train.py:9)")
    lines = found.lines()
    at = lines.index("  rank 1: get at train.py:16 in <module>")
    assert lines[at + 4:at + 6] == ["    thread producer: produce at train.py:9",
                                    "      train.py:9 in produce: time.sleep(3600)"]
    assert f"  {THREAD_ENDED_HINT}" not in lines  # the thread runs: no error of its own to hand on
    group = next(g for g in found.to_json()["groups"] if g["ranks"] == [1])
    assert group["threads"] == [{"name": "producer", "where": "produce at train.py:9", "ranks": [1],
                                 "frame": ["train.py", 9, "produce", "time.sleep(3600)"]}]


def test_a_thread_that_ended_with_an_error_is_named_first_with_its_error_and_the_hint():
    found = hung(snap(0, IN_ALL_REDUCE, waiting_in(6)), snap(1, IN_QUEUE_GET, done(5), (ENDED, PRODUCING)))
    assert found.headline.endswith("(not in a collective: get at train.py:16 in <module>; its threads prefetcher:"
                                   " ended with ValueError: corrupt record 5 at train.py:10 in prefetch,"
                                   " producer: produce at train.py:9)")
    lines = found.lines()
    assert "    thread prefetcher: ended with ValueError: corrupt record 5 at train.py:10 in prefetch" in lines
    assert "      train.py:10 in prefetch: raise ValueError(record)" in lines
    assert lines[-1] == f"  {THREAD_ENDED_HINT}"
    assert found.awaits_ended_thread == (1,)


def test_a_main_thread_waiting_for_a_lock_with_no_other_thread_alive_gets_the_hint_of_a_lock_taken_again():
    """A note of earlier sessions: a rank whose main thread took a threading.Lock it already held
    (a helper that logs under the lock, called under it) was placed at its line, and nothing said
    why; no other thread of the script's was alive to let the lock go. Now the hint says so."""
    from orchestrate.hangs.diagnosis import THREAD_ALONE_HINT

    relocked = (Frame("train.py", 19, "log_stats", "with stats_lock:"),)
    found = hung(snap(0, IN_ALL_REDUCE, waiting_in(6)), snap(1, relocked, done(5)))
    assert found.awaits_no_thread == {1: "log_stats at train.py:19"}
    assert found.lines()[-1] == "  " + THREAD_ALONE_HINT.format(ranks="rank 1", waits="waits",
                                                                where="log_stats at train.py:19")
    assert "a threading.Lock taken again by the thread that holds it" in found.lines()[-1]
    # a thread of the script's alive to let it go: where it is, and no such hint
    beside = hung(snap(0, IN_ALL_REDUCE, waiting_in(6)), snap(1, relocked, done(5), (PRODUCING,)))
    assert not beside.awaits_no_thread and not any("taken again" in line for line in beside.lines())
    # a thread that ended with an error: its own hint, first
    ended = hung(snap(0, IN_ALL_REDUCE, waiting_in(6)), snap(1, IN_QUEUE_GET, done(5), (ENDED,)))
    assert ended.lines()[-1] == f"  {THREAD_ENDED_HINT}"


def test_threads_are_not_said_where_the_main_thread_waits_for_no_thread():
    # rank 1 computes outside a collective beside a thread of its own: its place alone
    computing = (Frame("train.py", 40, "<module>", "loss = model(x)"),)
    found = hung(snap(0, IN_ALL_REDUCE, waiting_in(6)), snap(1, computing, done(5), (ENDED,)))
    assert found.headline.endswith("(not in a collective: <module> at train.py:40)")
    assert f"  {THREAD_ENDED_HINT}" not in found.lines() and found.awaited_threads == {}
    # but its group shows its threads, as `stacks` shows every stack
    assert "    thread prefetcher: ended with ValueError: corrupt record 5 at train.py:10 in prefetch" in found.lines()
    # a main thread that waits for threads it has none of the user's for: nothing to add
    alone = hung(snap(0, IN_ALL_REDUCE, waiting_in(6)), snap(1, IN_QUEUE_GET, done(5)))
    assert alone.headline.endswith("(not in a collective: get at train.py:16 in <module>)")


def test_every_rank_waiting_for_its_threads_is_placed_by_the_first_ones_threads():
    both = hung(snap(0, IN_QUEUE_GET, done(5), (PRODUCING,)), snap(1, IN_QUEUE_GET, done(5), (ENDED,)))
    assert both.headline == ("no progress for 30 s: ranks 0, 1: get at train.py:16 in <module>;"
                             " rank 0's thread producer: produce at train.py:9")
    assert both.lines()[-1] == f"  {THREAD_ENDED_HINT}"


def test_a_rank_alone_in_its_group_is_placed_by_its_own_threads():
    elsewhere = (Frame("train.py", 40, "<module>", "time.sleep(3600)"),)
    found = hung(snap(0, IN_QUEUE_GET, done(5), (PRODUCING,)), snap(1, elsewhere, done(5)))
    assert found.headline == ("no progress for 30 s: rank 0: get at train.py:16 in <module>; its thread producer:"
                              " produce at train.py:9; rank 1: <module> at train.py:40;"
                              " rank 1 idle: neither computing nor in a collective (0.0% of a core)")


def test_a_diagnosis_is_written_whole_for_the_report_and_hang_json():
    """What the report page and the run's hang.json read: every field, a thread with no frame of
    the user's as null."""
    idle = ThreadStack("idle", (Frame(f"{STDLIB}/threading.py", 320, "wait"),))
    found = hung(snap(0, IN_ALL_REDUCE, waiting_in(2)), snap(1, IN_QUEUE_GET, done(1), (PRODUCING, idle)))
    where = ("rank 0 waits in all_reduce(float32[2]) #2 at train.py:17; rank 1 is at #1 (not in a collective: get at"
             " train.py:16 in <module>; its threads producer: produce at train.py:9, idle: wait at threading.py:320)")
    assert found.to_json() == {
        "headline": f"no progress for 30 s: {where}", "hung": True, "quiet_s": 30, "cause": "", "timed_out": False,
        "groups": [{"ranks": [0], "where": "all_reduce at train.py:17 in <module>",
                    "stack": [[f.file, f.line, f.function] for f in IN_ALL_REDUCE], "threads": []},
                   {"ranks": [1], "where": "get at train.py:16 in <module>",
                    "stack": [[f.file, f.line, f.function] for f in IN_QUEUE_GET],
                    "threads": [{"name": "producer", "where": "produce at train.py:9", "ranks": [1],
                                 "frame": ["train.py", 9, "produce", "time.sleep(3600)"]},
                                {"name": "idle", "where": "wait at threading.py:320", "ranks": [1], "frame": None}]}],
        "divergence": where, "advice": [], "cut_by": [], "loaders": {},
        "activities": [{"rank": 0, "state": "collective", "detail": "waits in all_reduce(float32[2]) #2 at train.py:17",
                        "stopped_by": ""},
                       {"rank": 1, "state": "idle",
                        "detail": "neither computing nor in a recorded collective (0.0% of a core)",
                        "stopped_by": ""}],
        "unheard_nodes": [],
        "collectives": {"0": [c.__dict__ for c in waiting_in(2)], "1": [c.__dict__ for c in done(1)]}}


def test_a_groups_threads_at_one_place_are_one_line_and_those_on_some_of_its_ranks_name_them():
    other = ThreadStack("producer", PRODUCING.stack[:-1] + (Frame("train.py", 12, "produce", "q.put(batch)"),))
    groups = group_stacks({0: snap(0, IN_QUEUE_GET, threads=(PRODUCING,)), 1: snap(1, IN_QUEUE_GET, threads=(PRODUCING,)),
                           2: snap(2, IN_QUEUE_GET, threads=(other,))})
    assert [g.ranks for g in groups] == [(0, 1, 2)]
    lines = groups[0].lines()
    assert lines[4:] == ["  thread producer (ranks 0, 1): produce at train.py:9",
                         "    train.py:9 in produce: time.sleep(3600)",
                         "  thread producer (rank 2): produce at train.py:12",
                         "    train.py:12 in produce: q.put(batch)"]
    together = group_stacks({0: snap(0, IN_QUEUE_GET, threads=(PRODUCING,)), 1: snap(1, IN_QUEUE_GET, threads=(PRODUCING,))})
    assert together[0].lines()[4] == "  thread producer: produce at train.py:9"
    many = tuple(ThreadStack(f"worker-{n}", (Frame("train.py", 50 + n, "work"),)) for n in range(SHOWN_THREADS + 2))
    lines = group_stacks({0: snap(0, IN_QUEUE_GET, threads=many)})[0].lines()
    assert sum(line.startswith("  thread ") for line in lines) == SHOWN_THREADS
    assert lines[-1] == "  and 2 more thread place(s)"


def test_a_snapshot_keeps_the_users_threads_and_those_that_ended_with_an_error_first():
    data = {"rank": 0, "stacks": [
        {"thread": "MainThread", "main": True, "frames": [["train.py", 16, "<module>", "q.get()"]]},
        {"thread": "pin_memory", "main": False, "frames": [[f"{TORCH}/../utils/data/_utils/pin_memory.py", 50, "_pin_memory_loop", ""]]},
        {"thread": "zeta", "main": False, "frames": [[f"{STDLIB}/threading.py", 982, "run", ""], ["train.py", 9, "produce", ""]]},
        {"thread": "alpha", "main": False, "frames": [["train.py", 30, "log", ""]]}],
        "thread_errors": [{"thread": "old", "error": "KeyError: 'a'", "frames": [["train.py", 3, "first", ""]]},
                          {"thread": "new", "error": "ValueError: b", "frames": [["train.py", 4, "second", ""]]},
                          {"thread": "lib", "error": "OSError", "frames": [[f"{TORCH}/x.py", 1, "f", ""]]}]}
    snapshot = RankSnapshot.from_json(data)
    # a library's thread has no frame of the user's: left out; the latest error first
    assert [(t.name, t.error) for t in snapshot.threads] == [("new", "ValueError: b"), ("old", "KeyError: 'a'"),
                                                             ("alpha", ""), ("zeta", "")]
    assert RankSnapshot.from_json({"rank": 0, "stacks": []}).threads == ()


def raise_in_thread(name: str, error: BaseException) -> None:
    def fail() -> None:
        raise error

    thread = threading.Thread(target=fail, name=name)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()


def test_a_real_threads_error_is_kept_with_its_frames_and_still_printed(tmp_path, capsys):
    """The hook's excepthook keeps the error and calls the hook that was there (Python's prints)."""
    from orchestrate.node.snapshot import REQUEST_FILE, SnapshotWriter

    errors = ThreadErrors(lambda path: path.rsplit("/", 1)[-1])
    was = threading.excepthook
    threading.excepthook = threading.__excepthook__  # Python's own, as in a worker (not pytest's)
    install(errors)
    try:
        raise_in_thread("prefetcher", ValueError("corrupt record 5\nmore"))
        raise_in_thread("quitter", SystemExit(0))  # ends a thread quietly: no error
        assert "Exception in thread prefetcher" in capsys.readouterr().err
        writer = SnapshotWriter(str(tmp_path), 0, CollectiveLog())
        writer.thread_errors = errors
        (tmp_path / REQUEST_FILE).write_text(json.dumps({"id": "a"}))
        writer.answer_pending()
    finally:
        threading.excepthook = was
    snapshot = RankSnapshot.from_json(json.loads((tmp_path / "rank0.json").read_text()))
    ended = [t for t in snapshot.threads if t.error]
    assert [(t.name, t.error) for t in ended] == [("prefetcher", "ValueError: corrupt record 5")]
    assert ended[0].stack[-1].file == "test_thread_waits.py" and ended[0].stack[-1].function == "fail"
    assert ended[0].stack[-1].code == "raise error"


def test_only_the_last_threads_errors_are_kept():
    errors = ThreadErrors(str)
    was = threading.excepthook
    threading.excepthook = lambda args: None  # nothing printed
    install(errors)
    try:
        for n in range(KEPT + 3):
            raise_in_thread(f"t{n}", RuntimeError(str(n)))
    finally:
        threading.excepthook = was
    assert [e["thread"] for e in errors.snapshot()] == [f"t{n}" for n in range(3, KEPT + 3)]
    assert error_line(KeyError, KeyError("a")) == "KeyError: 'a'" and error_line(StopIteration, StopIteration()) == "StopIteration"


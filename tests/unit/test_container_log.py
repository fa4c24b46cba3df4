"""A container's log, stdout and stderr read apart: the lines so far merged in time, then each
stream followed from its own last line; a worker's line written in pieces is put together
from its own stream, whatever the other stream prints meanwhile."""
from __future__ import annotations

import copy
import queue
import threading
import time
from typing import Optional

import docker.errors
import pytest

from orchestrate.engine.container_log import LogLine, follow_log, read_log
from orchestrate.supervise.logs import follow, history
from orchestrate.supervise.worker_lines import WorkerLines
from tests.fakes import FakeContainer, FakeDockerClient, Script, wait_until


def running() -> tuple[FakeDockerClient, object]:
    client = FakeDockerClient()
    return client, client.running("ddp-r-node0-1")


def test_the_lines_so_far_come_from_both_streams_in_time_each_with_its_stream():
    _, node = running()
    node.log = [(1000.0, "[0|0]:a"), (1002.0, "[0|0]:c")]
    node.stderr_log = [(1001.0, "[0|0]:b"), (1003.0, "W1129 a warning")]
    assert [(line.source, line.stamp, line.text) for line in read_log(node)] == [
        ("stdout", 1000.0, "[0|0]:a"), ("stderr", 1001.0, "[0|0]:b"), ("stdout", 1002.0, "[0|0]:c"),
        ("stderr", 1003.0, "W1129 a warning")]
    assert [line.text for line in read_log(node, since=1001.5)] == ["[0|0]:c", "W1129 a warning"]


class SeenThroughAnEngine:
    """A container seen through an engine that answers some of its calls otherwise (a
    subclass's methods); every other call is the fake's own."""

    def __init__(self, container) -> None:
        self.container = container

    def __getattr__(self, name):
        return getattr(self.container, name)


class StreamsCounted(SeenThroughAnEngine):
    """A container whose live streams asked for are counted, by source."""

    def __init__(self, container) -> None:
        self.container, self.streams = container, []

    def logs(self, **kwargs):
        if kwargs.get("stream"):
            self.streams.append("stdout" if kwargs.get("stdout") else "stderr")
        return self.container.logs(**kwargs)


def test_following_gives_every_line_once_then_says_the_log_ended_once():
    _, node = running()
    node.write("[0|0]:before")
    node.write("[0|0]:before too", "stderr")
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    counted = StreamsCounted(node)
    follow_log(counted, arrived.put, name="log-test")
    wait_until(lambda: arrived.qsize() == 2)
    node.write("[0|0]:live", "stderr")
    node.write("[0|0]:live too")
    wait_until(lambda: arrived.qsize() == 4)
    node.kill()
    got = [arrived.get(timeout=5) for _ in range(5)]
    assert got[-1] is None and arrived.empty()
    # each stream is asked for again from its own last line's time (the engine's "since" takes
    # that line again: it is not shown twice)
    assert [(line.source, line.text) for line in got[:2]] == [("stdout", "[0|0]:before"), ("stderr", "[0|0]:before too")]
    assert sorted((line.source, line.text) for line in got[2:4]) == [("stderr", "[0|0]:live"), ("stdout", "[0|0]:live too")]
    # followed live: each stream asked for once (not read, and asked for again, and again)
    assert sorted(counted.streams) == ["stderr", "stdout"]


@pytest.mark.parametrize("error", [docker.errors.NotFound("No such container: ddp-r-node0-1"),
                                   ValueError("a bug in reading it")])
def test_a_log_that_cannot_be_read_ends_with_no_line(error):
    client, node = running()
    client.failures["logs"] = error
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(node, arrived.put)
    assert arrived.get(timeout=5) is None
    node.kill()
    with pytest.raises(queue.Empty):
        arrived.get(timeout=0.3)


class DroppedOnce(SeenThroughAnEngine):
    """A container whose engine connection drops the first live stream of stderr once ``go`` is
    set, after the lines it had by then, in the middle of the last one."""

    def __init__(self, container) -> None:
        self.container, self.dropped, self.go = container, False, threading.Event()

    def logs(self, **kwargs):
        if kwargs.get("stream") and kwargs.get("stderr") and not self.dropped:
            self.dropped = True

            def until_dropped():
                self.go.wait(timeout=5)
                yield b"".join(self.container.logs(**{**kwargs, "follow": False}))[:-4]
            return until_dropped()
        return self.container.logs(**kwargs)


def test_a_stream_that_ends_while_its_container_runs_is_asked_for_again_from_its_last_line():
    _, node = running()
    node.write("[0|0]:warned", "stderr")
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    dropping = DroppedOnce(node)
    follow_log(dropping, arrived.put)
    assert arrived.get(timeout=5).text == "[0|0]:warned"
    node.write("[0|0]:warned again", "stderr")
    node.write("[0|0]:cut short", "stderr")
    dropping.go.set()
    assert arrived.get(timeout=5).text == "[0|0]:warned again"
    assert arrived.get(timeout=5).text == "[0|0]:cut short"  # whole, not "[0|0]:cut s"
    wait_until(lambda: ("reload", node.name) in node.client.calls)  # the dropped stream: does it still run?
    node.write("[0|0]:Traceback (most recent call last):", "stderr")
    # asked for again from its last line's time: that line is not shown twice
    assert arrived.get(timeout=5).text == "[0|0]:Traceback (most recent call last):"
    node.kill()
    assert arrived.get(timeout=5) is None


class DroppedOften(SeenThroughAnEngine):
    """A container whose engine ends each of its first ``times`` live stderr streams at once,
    with nothing in them (a connection that keeps dropping), while its stdout stream stays."""

    def __init__(self, container, times: int, then=None) -> None:
        self.container, self.times, self.dropped, self.then = container, times, 0, then  # then: at the last drop
        self.stdout_followed = threading.Event()

    def logs(self, **kwargs):
        if kwargs.get("stream") and kwargs.get("stderr") and self.dropped < self.times:
            self.dropped += 1
            if self.dropped == self.times and self.then is not None:
                self.then()
            return iter(())
        if kwargs.get("stream") and kwargs.get("stdout"):
            self.stdout_followed.set()
        return self.container.logs(**kwargs)


def test_a_stream_the_engine_keeps_dropping_is_asked_for_again_slower_while_its_container_runs(monkeypatch, caplog):
    # After RESUMES times at once, its later lines were never followed (the other stream's
    # staying open kept the log from ending, so no one asked again until the node ended).
    import orchestrate.engine.container_log as container_log

    monkeypatch.setattr(container_log, "RESUME_SLOWLY_S", 0.05)
    _, node = running()
    dropping = DroppedOften(node, times=container_log.RESUMES + 3)
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(dropping, arrived.put)
    node.write("[0|0]:on stdout")
    assert arrived.get(timeout=5).text == "[0|0]:on stdout"
    wait_until(lambda: dropping.dropped == dropping.times)
    node.write("[0|0]:Traceback (most recent call last):", "stderr")
    got = arrived.get(timeout=5)
    assert (got.source, got.text) == ("stderr", "[0|0]:Traceback (most recent call last):")
    node.kill()
    assert arrived.get(timeout=5) is None and arrived.empty()
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"log: the engine ended the stderr stream of a running container {container_log.RESUMES + 1} times in a"
        " row: asked for again every 0.05 s while it runs"]


class CutAndGone(SeenThroughAnEngine):
    """A container whose live stdout stream ends in the middle of a line, as ``docker rm -f``
    removes it: the engine can say nothing more of it."""

    def logs(self, **kwargs):
        if kwargs.get("stream") and kwargs.get("stdout"):
            def cut():
                wait_until(lambda: len(self.container.log) == 2)
                whole = b"".join(self.container.logs(**{**kwargs, "follow": False}))
                self.container.remove(force=True)
                yield whole[:-4]
            return cut()
        return self.container.logs(**kwargs)


def test_the_last_words_of_a_stream_cut_as_its_container_was_removed_are_given_as_they_are():
    _, node = running()
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(CutAndGone(node), arrived.put)
    node.write("[0|0]:whole")
    node.write("[0|0]:Killed by a sig")
    got = [arrived.get(timeout=5) for _ in range(3)]
    assert [(line.source, line.text) if line else line for line in got] == [
        ("stdout", "[0|0]:whole"), ("stdout", "[0|0]:Killed by a "), None]
    assert arrived.empty()


class DroppedAfterEachLine(SeenThroughAnEngine):
    """A container whose engine ends each live stdout stream after its first new line (a
    connection that drops, though lines get through)."""

    def __init__(self, container) -> None:
        self.container, self.asked, self.given = container, 0, set()

    def logs(self, **kwargs):
        chunks = self.container.logs(**kwargs)
        if not (kwargs.get("stream") and kwargs.get("stdout")):
            return chunks
        self.asked += 1

        def one_new_line():
            for chunk in chunks:
                yield chunk
                if chunk not in self.given:  # (the engine's since gives the last line read again)
                    self.given.add(chunk)
                    return
        return one_new_line()


def test_only_drops_in_a_row_with_no_line_between_slow_a_stream_down(monkeypatch, caplog):
    # A long job whose connection drops now and then is asked for again at once each time.
    import orchestrate.engine.container_log as container_log

    monkeypatch.setattr(container_log, "RESUME_SLOWLY_S", 30.0)  # a stream slowed down fails the test
    _, node = running()
    dropping = DroppedAfterEachLine(node)
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(dropping, arrived.put)
    for i in range(container_log.RESUMES + 3):
        node.write(f"[0|0]:step {i}")
        assert arrived.get(timeout=5).text == f"[0|0]:step {i}"
    assert dropping.asked >= container_log.RESUMES + 3
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    node.kill()
    assert arrived.get(timeout=5) is None


def test_a_container_restarted_while_its_dropped_stream_waits_to_be_asked_again_is_followed_no_further(
        monkeypatch):
    # The engine kept dropping the stream, so it waits before asking again; the container is
    # restarted meanwhile: the new run is the next stream's, not this one's.
    import types

    import orchestrate.engine.container_log as container_log

    client, node = running()
    dropping = DroppedOften(node, times=container_log.RESUMES + 1)  # the next ask, after the wait, is answered
    old_line_read = threading.Event()

    def restarted_during(seconds: float) -> None:
        if node.runs == 1:
            assert dropping.stdout_followed.wait(timeout=5) and old_line_read.wait(timeout=5)
            node.kill()
            client.script(node.name, Script([], hang=True))
            node.start()
            node.write("[0|0]:the new run's", "stderr")

    monkeypatch.setattr(container_log, "time", types.SimpleNamespace(sleep=restarted_during))
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(dropping, arrived.put)
    node.write("[0|0]:the old run's")
    assert arrived.get(timeout=5).text == "[0|0]:the old run's"
    old_line_read.set()
    # stderr, dropped and waiting, ends with the old run; stdout, followed, ends with it too
    assert arrived.get(timeout=5) is None
    assert node.runs == 2 and arrived.empty()
    node.kill()


def test_a_stream_begun_before_its_container_first_started_follows_that_first_run():
    client = FakeDockerClient()
    node = FakeContainer(client, "ddp-r-node0-1", {"labels": {}})
    client.containers_by_name[node.name] = node
    client.script(node.name, Script(["[0|0]:first"], hang=True))
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(StartedAtFirstAsk(node), arrived.put)  # its first stream ends at once: it had not started
    got = arrived.get(timeout=5)
    assert (got.source, got.text) == ("stdout", "[0|0]:first")
    node.kill()
    assert arrived.get(timeout=5) is None


class StaleUntilLookedAt(SeenThroughAnEngine):
    """A container object as the SDK gives it: its ``attrs`` are the engine's answer when it was
    made, until ``reload()`` asks again; its live stdout stream is dropped once, after a line."""

    def __init__(self, container) -> None:
        self.container, self.attrs, self.dropped = container, copy.deepcopy(container.attrs), False

    def reload(self) -> None:
        self.container.reload()
        self.attrs = copy.deepcopy(self.container.attrs)

    def logs(self, **kwargs):
        chunks = self.container.logs(**kwargs)
        if kwargs.get("stream") and kwargs.get("stdout") and not self.dropped:
            self.dropped = True

            def a_line():
                for chunk in chunks:
                    yield chunk
                    return
            return a_line()
        return chunks


def test_a_stream_whose_container_was_looked_at_before_its_latest_start_follows_the_run_it_reads():
    # The container object was last looked at before a restart: the stream's lines, read after
    # that start, say which run it follows, and a dropped connection is asked for again.
    client, node = running()
    stale = StaleUntilLookedAt(node)
    node.kill()
    client.script(node.name, Script(["[0|0]:the run followed"], hang=True))
    node.start()
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(stale, arrived.put)
    assert arrived.get(timeout=5).text == "[0|0]:the run followed"
    wait_until(lambda: stale.dropped)
    node.write("[0|0]:after the dropped connection")
    got = arrived.get(timeout=5)
    assert got is not None and got.text == "[0|0]:after the dropped connection"
    node.kill()
    assert arrived.get(timeout=5) is None


def test_a_stream_dropped_as_its_container_stops_ends_without_waiting_or_a_warning(monkeypatch, caplog):
    import orchestrate.engine.container_log as container_log

    monkeypatch.setattr(container_log, "RESUME_SLOWLY_S", 30.0)  # a wait fails the test
    _, node = running()
    dropping = DroppedOften(node, times=container_log.RESUMES + 1, then=node.kill)  # the last drop: the stop
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    follow_log(dropping, arrived.put)
    assert arrived.get(timeout=5) is None
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


class StartedAtFirstAsk(SeenThroughAnEngine):
    """A container only created, started just as its first live stream is asked for (which the
    engine ends at once: it was not running)."""

    def logs(self, **kwargs):
        chunks = self.container.logs(**kwargs)
        if kwargs.get("stream") and kwargs.get("stdout") and self.container.status == "created":
            list(chunks)  # (nothing: it ends at once)
            self.container.start()
            return iter(())
        return chunks


class EndedAtStop(SeenThroughAnEngine):
    """A container whose engine ends its live stdout stream as the container stops, whatever it
    still held: the stream brings the lines written before ``stop`` is set, and no more, and
    ends when the container stops."""

    def __init__(self, container) -> None:
        self.container, self.stop = container, threading.Event()

    def logs(self, **kwargs):
        if kwargs.get("stream") and kwargs.get("stdout"):
            def until_stopped():
                self.stop.wait(timeout=5)
                yield b"".join(self.container.logs(**{**kwargs, "follow": False}))
                wait_until(lambda: self.container.status not in ("running", "paused"))
            return until_stopped()
        return self.container.logs(**kwargs)


def test_what_the_engine_held_when_it_ended_the_stream_at_the_stop_is_read_after_it():
    """Seen with a job that printed 200,000 lines in 17 s: the engine ended each live stream as
    the container stopped, far behind, and nine lines in ten were never shown."""
    _, node = running()
    ending = EndedAtStop(node)
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    node.write("[0|0]:line 0")
    follow_log(ending, arrived.put)
    assert arrived.get(timeout=5).text == "[0|0]:line 0"
    for i in range(1, 4):
        node.write(f"[0|0]:line {i}")
    ending.stop.set()  # the stream brings lines 1-3 and ends
    wait_until(lambda: arrived.qsize() == 3)
    for i in range(4, 7):
        node.write(f"[0|0]:line {i}")  # held by the engine, not streamed
    node.kill()
    got = [arrived.get(timeout=5) for _ in range(7)]
    assert got[-1] is None and arrived.empty()
    assert [line.text for line in got[:-1]] == [f"[0|0]:line {i}" for i in range(1, 7)]  # each once, in order


class EndedLate(SeenThroughAnEngine):
    """A container whose engine ends its live stdout stream late: only once the container has
    started again (a restart), printed ``lines`` lines in all and, where ``ended``, ended again
    (its connection lagged); the lines with "held" in them it never streams (it ended the stream
    at the stop with them still in it)."""

    def __init__(self, container, lines: int, ended: bool) -> None:
        self.container, self.lines, self.ended, self.opened = container, lines, ended, threading.Event()

    def logs(self, **kwargs):
        chunks = self.container.logs(**kwargs)
        if not (kwargs.get("stream") and kwargs.get("stdout")):
            return chunks
        self.opened.set()

        def late():
            yield from (chunk for chunk in chunks if b"held" not in chunk)
            wait_until(lambda: self.container.runs > 1 and len(self.container.log) >= self.lines
                       and (self.container.status == "exited" or not self.ended))
        return late()


@pytest.mark.parametrize("new_run_ends", [False, True], ids=["new-run-runs", "new-run-ended-too"])
def test_a_stream_that_ends_after_its_container_started_again_leaves_the_new_runs_lines_to_the_next_stream(
        new_run_ends):
    # Asked for again as if the engine had dropped it, the stream went on with the new run's
    # lines: the launcher took them for the old run's, before it followed the new one. (And the
    # rest of a stream read after a quick new run had ended gave that run's lines too.)
    client, node = running()
    late = EndedLate(node, lines=4, ended=new_run_ends)
    arrived: "queue.Queue[Optional[LogLine]]" = queue.Queue()
    node.write("[0|0]:before the restart")
    follow_log(late, arrived.put)
    assert arrived.get(timeout=5).text == "[0|0]:before the restart"
    assert late.opened.wait(timeout=5)
    node.write("[0|0]:as it stops")
    node.write("[0|0]:held as it stops")  # read after the stream, from the engine's log
    node.kill()
    client.script(node.name, Script(["[0|0]:the new run's"], hang=not new_run_ends))
    node.start()
    got = [arrived.get(timeout=5) for _ in range(3)]
    assert [(line.source, line.text) if line else line for line in got] == [
        ("stdout", "[0|0]:as it stops"), ("stdout", "[0|0]:held as it stops"), None]
    assert node.status == ("exited" if new_run_ends else "running")
    if not new_run_ends:
        node.kill()


def test_each_stream_is_read_from_its_own_time():
    _, node = running()
    node.log = [(1000.0, "[0|0]:a"), (1003.0, "[0|0]:d")]
    node.stderr_log = [(1001.0, "[0|0]:b"), (1002.0, "[0|0]:c")]
    assert [line.text for line in read_log(node, since={"stdout": (1003.0, 0), "stderr": (1002.0, 0)})] == [
        "[0|0]:c", "[0|0]:d"]
    # the lines of that very time read already are not read again (the engine's since takes them)
    assert [line.text for line in read_log(node, since={"stdout": (1000.0, 1), "stderr": (1002.0, 1)})] == [
        "[0|0]:d"]


# Seen in a 2-rank node (torch 2.9): rank 0 printed "rank 0 half", then the rest a second later,
# while its tqdm bar began on stderr; the engine's stderr line "[0|0]:" (the bar's first "\r")
# came between the two stdout lines.
TWO_STREAMS = [("stdout", "[1|1]:rank 1 half[0|0]:"), ("stdout", "[0|0]:rank 0 half[1|1]: and the rest"),
               ("stderr", "[0|0]:"), ("stderr", "[1|1]:"), ("stdout", "[0|0]: and the rest"),
               ("stderr", "[0|0]:train:  99%|#########9| 149/150 [00:15<00:00,  9.56it/s][1|1]:"),
               ("stdout", "[0|0]:rank 0 epoch 0 loss -96.656")]


def test_a_line_written_in_pieces_is_joined_from_its_own_stream_only(make_job):
    lines = WorkerLines(make_job(nodes=1, nproc_per_node=2).nodes[0])
    done = [(line.global_rank, line.text) for source, raw in TWO_STREAMS for line in lines.feed(raw, source)]
    assert done == [(0, ""), (1, "rank 1 half and the rest"), (0, ""), (1, ""), (0, "rank 0 half and the rest"),
                    (1, ""), (0, "rank 0 epoch 0 loss -96.656")]
    assert [(line.global_rank, line.text) for line in lines.flush()] == [
        (0, "train:  99%|#########9| 149/150 [00:15<00:00,  9.56it/s]")]


def test_logs_joins_each_streams_pieces_and_merges_the_streams_in_time(make_job):
    _, node = running()
    node.log = [(1000.0 + i, raw) for i, (source, raw) in enumerate(TWO_STREAMS) if source == "stdout"]
    node.stderr_log = [(1000.0 + i, raw) for i, (source, raw) in enumerate(TWO_STREAMS) if source == "stderr"]
    shown = [" ".join(line.split()) for line in history([(make_job(nodes=1, nproc_per_node=2).nodes[0], node)])]
    assert [line for line in shown if line.split("]", 1)[1]] == [
        "[node0/rank1] rank 1 half and the rest", "[node0/rank0] rank 0 half and the rest",
        "[node0/rank0] rank 0 epoch 0 loss -96.656",
        "[node0/rank0] train: 99%|#########9| 149/150 [00:15<00:00, 9.56it/s]"]


def test_logs_f_joins_each_streams_pieces_until_the_node_ends(make_job):
    _, node = running()
    node.log = [(1000.0 + i, raw) for i, (source, raw) in enumerate(TWO_STREAMS) if source == "stdout"]
    node.stderr_log = [(1000.0 + i, raw) for i, (source, raw) in enumerate(TWO_STREAMS) if source == "stderr"]
    node.kill()
    shown = [" ".join(line.split()) for line in follow([(make_job(nodes=1, nproc_per_node=2).nodes[0], node)])]
    assert [line for line in shown if line.split("]", 1)[1]] == [
        "[node0/rank1] rank 1 half and the rest", "[node0/rank0] rank 0 half and the rest",
        "[node0/rank0] rank 0 epoch 0 loss -96.656",
        "[node0/rank0] train: 99%|#########9| 149/150 [00:15<00:00, 9.56it/s]"]


def test_logs_f_from_the_tail_goes_on_with_a_line_begun_before_and_repeats_nothing(make_job):
    _, node = running()
    node.log = [(1000.0, TWO_STREAMS[0][1]), (1001.0, TWO_STREAMS[1][1])]  # rank 0's line is half printed
    lines = follow([(make_job(nodes=1, nproc_per_node=2).nodes[0], node)], tail=100)
    first = " ".join(next(lines).split())  # once what was printed so far is read (rank 1's line is whole)
    for source, raw in TWO_STREAMS[2:]:  # the rest comes after, rank 0's line's end among it
        node.write(raw, source)
    node.exit(0)
    rest = [" ".join(line.split()) for line in lines]
    assert [line for line in [first, *rest] if line.split("]", 1)[1]] == [
        "[node0/rank1] rank 1 half and the rest", "[node0/rank0] rank 0 half and the rest",
        "[node0/rank0] rank 0 epoch 0 loss -96.656",
        "[node0/rank0] train: 99%|#########9| 149/150 [00:15<00:00, 9.56it/s]"]


def test_logs_tail_keeps_the_last_lines_of_those_asked_for(make_job):
    _, node = running()
    node.log = [(1000.0 + i, f"[{i % 2}|{i % 2}]:line {i}") for i in range(6)]
    pair = [(make_job(nodes=1, nproc_per_node=2).nodes[0], node)]
    shown = [" ".join(line.split()) for line in history(pair, lambda line: line.global_rank == 1, tail=2)]
    assert shown == ["[node0/rank1] line 3", "[node0/rank1] line 5"]
    assert list(history(pair, tail=0)) == [] and len(list(history(pair, tail=99))) == 6


def followed(pairs, **options) -> "queue.Queue[Optional[str]]":
    """The lines ``follow`` gives (spaces squeezed), read in a thread of its own; then None."""
    shown: "queue.Queue[Optional[str]]" = queue.Queue()

    def read() -> None:
        for line in follow(pairs, **options):
            shown.put(" ".join(line.split()))
        shown.put(None)

    threading.Thread(target=read, daemon=True).start()
    return shown


def test_logs_f_follows_a_node_into_its_next_run_and_waits_while_the_run_may_start_one(make_job):
    client, node = running()
    node.write("[0|0]:the first run's line")
    looked, said = [], []
    over = threading.Event()

    def goes_on() -> bool:  # asked only while every node's log has ended
        looked.append(node.status)
        return not over.is_set()

    shown = followed([(make_job(nodes=1).nodes[0], node)], goes_on=goes_on, say=said.append)
    assert shown.get(timeout=5) == "[node0/rank0] the first run's line"
    assert looked == []  # its log is open: nothing to ask
    node.kill()
    wait_until(lambda: len(looked) >= 2)  # its log ended, and it is waited for while the run may start it again
    assert set(looked) == {"exited"} and shown.empty() and said == []
    client.script(node.name, Script(["[0|0]:the next run's line"], hang=True))
    node.start()
    assert shown.get(timeout=5) == "[node0/rank0] the next run's line"  # once: the first run's line not again
    assert said == ["node0 started again: its new run follows"]
    over.set()
    node.kill()
    assert shown.get(timeout=5) is None  # ended: its log did, and nothing may start it again


def test_logs_f_ends_once_every_nodes_container_is_gone_though_the_launcher_may_start_nodes(make_job):
    client, node = running()
    node.write("[0|0]:its line")
    shown = followed([(make_job(nodes=1).nodes[0], node)], goes_on=lambda: True)  # (a launcher busy on)
    assert shown.get(timeout=5) == "[node0/rank0] its line"
    node.kill()
    with pytest.raises(queue.Empty):
        shown.get(timeout=1.2)  # its container may start again
    node.remove()
    assert shown.get(timeout=5) is None  # removed: it starts no more


def test_logs_f_goes_on_while_one_nodes_container_is_gone_and_another_is_not(make_job):
    client = FakeDockerClient()
    staying, removed = client.running("ddp-r-node0-1"), client.running("ddp-r-node1-1")
    removed.kill()
    removed.remove()
    plans = make_job(nodes=2).nodes
    shown = followed([(plans[0], staying), (plans[1], removed)], goes_on=lambda: True)
    with pytest.raises(queue.Empty):
        shown.get(timeout=1.2)  # looked at since node1 went: node0's log is open
    staying.write("[0|0]:node0 goes on")
    assert shown.get(timeout=5) == "[node0/rank0] node0 goes on"
    staying.kill()
    with pytest.raises(queue.Empty):
        shown.get(timeout=1.2)  # node0 ended, not gone: it may start again
    staying.remove()
    assert shown.get(timeout=5) is None


def test_logs_f_of_a_run_that_may_start_no_node_again_ends_with_its_nodes_logs(make_job):
    _, node = running()
    node.write("[0|0]:its only line")
    node.kill()
    shown = followed([(make_job(nodes=1).nodes[0], node)])
    assert [shown.get(timeout=5), shown.get(timeout=5)] == ["[node0/rank0] its only line", None]


def test_logs_f_of_a_node_yet_to_start_waits_for_it_and_follows_its_first_run(make_job):
    client = FakeDockerClient()
    later = FakeContainer(client, "ddp-r-node0-1", {"labels": {}})  # created, not started
    client.containers_by_name[later.name] = later
    client.script(later.name, Script(["[0|0]:its first line"], hang=True))
    ended = client.running("ddp-r-node1-1")
    ended.write("[1|0]:the other node's line")
    ended.kill()
    said: list[str] = []
    plans = make_job(nodes=2).nodes
    shown = followed([(plans[0], later), (plans[1], ended)], say=said.append)
    assert shown.get(timeout=5) == "[node1/rank1] the other node's line"
    with pytest.raises(queue.Empty):
        shown.get(timeout=1.5)  # both logs end at once, and the node yet to start is waited for
    later.start()
    assert shown.get(timeout=5) == "[node0/rank0] its first line"
    later.kill()
    assert shown.get(timeout=5) is None and said == []  # a first start is no news


class LooksCounted(SeenThroughAnEngine):
    """A container whose looks (reloads) are counted."""

    def __init__(self, container) -> None:
        self.container, self.looks = container, 0

    def reload(self):
        self.looks += 1
        return self.container.reload()


def test_logs_f_looks_at_a_node_whose_log_ended_on_a_timer_not_at_each_line_of_another(make_job):
    client = FakeDockerClient()
    printing = client.running("ddp-r-node0-1")
    ended = LooksCounted(client.running("ddp-r-node1-1"))
    ended.write("[1|0]:its last line")
    ended.kill()
    plans = make_job(nodes=2).nodes
    shown = followed([(plans[0], printing), (plans[1], ended)])
    assert shown.get(timeout=5) == "[node1/rank1] its last line"
    for i in range(300):  # printed over about 1.5 s, as the other node's log ends and after
        printing.write(f"[0|0]:line {i}")
        time.sleep(0.005)  # (the pace of a printing job, not a wait for something to be ready)
    assert [shown.get(timeout=5) for _ in range(300)][-1] == "[node0/rank0] line 299"
    printing.kill()
    assert shown.get(timeout=5) is None
    assert ended.looks < 60  # a look each 0.5 s (and its own streams' few), not 300

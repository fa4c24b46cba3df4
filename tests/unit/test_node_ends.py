"""How the launcher learns that a node ended or started again: by the engine's event or by an
inspection, whichever comes first, and once; a container removed from elsewhere, which nothing
can restart; a restart that only inspections see, or whose new start the engine does not say at
once. Against the fake engine, whose events may come late or not at all."""
from __future__ import annotations

import threading
import time

import pytest

from orchestrate.outcome.events import read_events
from orchestrate.outcome.states import NodePhase
from tests.fakes import FakeContainer, FakeDockerClient, Script, fake_engine, in_a_thread, wait_until
from tests.unit.test_hangs import answering_worker, quick_watchdog  # noqa: F401 - a fixture
from tests.unit.test_reliability import recorded

INSPECTION = "orchestrate.supervise.inspection"
SUPERVISOR = "orchestrate.supervise.supervisor"


def node_events(job, kind: str) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "time"} for e in read_events(job.run_dir) if e["event"] == kind]


def test_a_container_removed_from_elsewhere_and_seen_gone_by_an_inspection_says_so(make_run, monkeypatch):
    # With no event stream, only an inspection can see it: the container is gone, exit code and all.
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    monkeypatch.setattr(f"{SUPERVISOR}.FAILURE_GRACE_S", 0.5)
    job = make_run(nodes=2)
    client = FakeDockerClient()
    client.events_break_after = 0

    def removed_by_hand() -> None:  # `docker rm -f`
        wait_until(lambda: job.out.getvalue().count("training") == 2)
        client.containers_by_name["ddp-test-run-node1-1"].remove(force=True)

    job.client = fake_engine(client, node0=[Script(["[0|0]:training"], hang=True)],
                             node1=[Script(["[1|0]:training"], hang=True, then=in_a_thread(removed_by_hand))])
    started = time.monotonic()
    result = job.run()
    # the engine cannot time a container that is gone: the launcher's own clock did
    assert 0 < result.results[1].wall_s < time.monotonic() - started
    gone = "its container is gone (No such container: ddp-test-run-node1-1)"
    assert [(r.state, r.exit_code, r.unresponsive) for r in result.results] == [
        (NodePhase.STOPPED, 143, ""), (NodePhase.FAILED, None, gone)], job.out.getvalue()
    assert result.failure is not None and result.failure.describe() == f"node1 stopped answering: {gone}"
    assert node_events(job, "node-exited")[0] == {"event": "node-exited", "node": "node1", "exit_code": None,
                                                  "via": "inspection"}


def test_an_exit_an_inspection_saw_before_its_log_ended_is_one_exit_timed_when_seen(make_run, monkeypatch):
    # The engine's event comes late, and the node's log stream ends a while after its exit (the
    # engine's connection lags): the exit is the inspection's, once, at its time.
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    log_ended_at: list[float] = []
    logs = FakeContainer.logs

    def log_that_ends_late(self, *args, **kwargs):
        chunks = logs(self, *args, **kwargs)
        if not kwargs.get("stream") or self.name != "ddp-test-run-node1-1":
            return chunks

        def late():
            yield from chunks
            wait_until(lambda: any(e["event"] == "node-exited" for e in read_events(job.run_dir)))
            time.sleep(0.5)  # an inspection or two more
            log_ended_at.append(time.monotonic())
        return late()

    monkeypatch.setattr(FakeContainer, "logs", log_that_ends_late)
    job = make_run(nodes=2)
    client = FakeDockerClient()
    client.events_lag_s = 5.0
    job.client = fake_engine(client, node0=[Script(["[0|0]:a"], hang=True)],
                             node1=[Script(["[1|0]:b"], exit_code=3)])
    result = job.run()
    assert [(r.state, r.exit_code) for r in result.results] == [
        (NodePhase.STOPPED, 143), (NodePhase.FAILED, 3)], job.out.getvalue()
    assert node_events(job, "node-exited") == [
        {"event": "node-exited", "node": "node1", "exit_code": 3, "via": "inspection"},
        {"event": "node-exited", "node": "node0", "exit_code": 143, "via": "inspection"}]
    assert log_ended_at and result.results[1].ended_at < log_ended_at[0]


class SupervisorLooks:
    """The restarts and looks (``reload``) of the containers that the supervisor's own thread (the
    test's) makes: the log pump's threads look too, as a stream ends, and a restart ends the
    attempt before's streams."""

    def __init__(self, monkeypatch) -> None:
        self.made: list[tuple[str, str]] = []  # (call, container)
        restart, reload = FakeContainer.restart, FakeContainer.reload

        def noted(call: str, original):
            def made(container: FakeContainer, *args, **kwargs):
                if threading.current_thread() is threading.main_thread():
                    self.made.append((call, container.name))
                return original(container, *args, **kwargs)
            return made

        monkeypatch.setattr(FakeContainer, "restart", noted("restart", restart))
        monkeypatch.setattr(FakeContainer, "reload", noted("reload", reload))

    def since_its_restart(self, container: str):
        """A condition (an ``after_when``): an inspection has looked at ``container`` since its
        latest restart (the restart's own look aside)."""
        def holds() -> bool:
            made = list(self.made)
            restarted = max((i for i, call in enumerate(made) if call == ("restart", container)), default=None)
            return restarted is not None and made[restarted:].count(("reload", container)) >= 2
        return holds


@pytest.mark.parametrize("seen_running", [True, False], ids=["seen-running", "ended-between-two-looks"])
def test_a_restart_that_only_inspections_see_is_followed_to_its_end(make_run, monkeypatch, seen_running):
    # No event stream: an inspection sees the restarted nodes running (they are marked running
    # again), or already ended (a quick job, or one that fails at once), and their new lines are
    # read. (An ended one was left "restarting" until the run's time limit.)
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_WITHOUT_EVENTS_S", 0.05)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"])
    client = FakeDockerClient()
    client.events_break_after = 0
    looks = SupervisorLooks(monkeypatch)

    def attempt(rank: int, first: str) -> Script:
        lines = [f"[{rank}|0]:{first}", f"[{rank}|0]:done"]
        if seen_running:  # it prints once an inspection has seen it running
            return Script([], after=lines, after_when=looks.since_its_restart(f"ddp-test-run-node{rank}-1"))
        return Script(lines)

    job.client = fake_engine(client, node0=[Script(["[0|0]:step"], hang=True), attempt(0, "resumed")],
                             node1=[Script(["[1|0]:step"], hang=True), attempt(1, "back")])
    result = job.run()
    text = job.out.getvalue()
    assert result.succeeded and [r.node for r in result.recoveries] == ["node1"], text
    assert "[node0/rank0]  resumed" in text and "[node1/rank1]  back" in text
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.SUCCEEDED, 0)] * 2
    assert len(node_events(job, "node-exited")) == 3  # node1's kill, then each node's end once
    if seen_running:  # (the first attempt's: the kill at t=0 may come before any line is read)
        events = [(e["event"], e.get("node")) for e in read_events(job.run_dir)]
        since_restart = events[events.index(("restart", "node1")):]
        assert sorted(node for kind, node in since_restart if kind == "node-running") == ["node0", "node1"], (read_events(job.run_dir), text)


@pytest.mark.timeout(60)
def test_a_line_of_the_attempt_before_that_the_new_stream_reads_again_marks_nothing_started(make_run, monkeypatch):
    # No event stream, and node0's first log read comes late (a busy machine): none of its lines
    # was in when node1's death restarted every node and an inspection saw node0 running again,
    # so the stream that follows its new run reads its old attempt's line too (shown once). Its
    # new attempt is marked running, and its rank started, by its own first line, after the
    # restart: they were marked by the old attempt's line, at that line's time, before the
    # restart in the record, and never after it (the flaky "[seen-running]" test above, in CI).
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_WITHOUT_EVENTS_S", 0.05)
    looks = SupervisorLooks(monkeypatch)
    logs, held = FakeContainer.logs, []

    def first_read_late(self, *args, **kwargs):  # the history read of node0's first stream
        if threading.current_thread().name == "log-node0-1" and not kwargs.get("stream") and not held:
            held.append(self.name)
            wait_until(looks.since_its_restart("ddp-test-run-node0-1"))
        return logs(self, *args, **kwargs)

    monkeypatch.setattr(FakeContainer, "logs", first_read_late)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"])
    client = FakeDockerClient()
    client.events_break_after = 0
    job.client = fake_engine(client, node0=[Script(["[0|0]:step"], hang=True), Script(["[0|0]:resumed"])],
                             node1=[Script(["[1|0]:step"], hang=True), Script(["[1|0]:back"])])
    result = job.run()
    text = job.out.getvalue()
    assert held and result.succeeded and [r.node for r in result.recoveries] == ["node1"], text
    assert text.count("[node0/rank0]  step") == 1 and "[node0/rank0]  resumed" in text, text
    events = read_events(job.run_dir)
    restarted = next(e["time"] for e in events if e["event"] == "restart")
    started = [(e["event"], e["node"], e["time"] > restarted) for e in events
               if e["event"] in ("node-running", "rank-started") and e["node"] == "node0"]
    assert started[-2:] == [("rank-started", "node0", True), ("node-running", "node0", True)], (events, text)


REMOVED, BEING_REMOVED = "No such container: ddp-test-run-node1-1", "being removed"


@pytest.mark.parametrize("events, removal_s, gone", [
    (True, 0.0, {REMOVED, BEING_REMOVED}),  # its die event read before the removal ended, or after
    (True, 1.0, {BEING_REMOVED}),  # read while the engine removes it, as it does
    (False, 0.0, {REMOVED})], ids=["with-events", "die-while-removing", "inspections-only"])
def test_a_node_of_an_elastic_job_removed_from_elsewhere_cannot_rejoin_and_fails_saying_why(
        make_run, monkeypatch, events, removal_s, gone):
    # `docker rm -f` of a node: nothing can restart a container that is gone. (The restart was
    # tried: the engine's 404 ended the run as an engine error, exit 2; or, caught while the
    # engine removed it, every other node was restarted for nothing.)
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    monkeypatch.setattr(f"{SUPERVISOR}.FAILURE_GRACE_S", 0.5)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3)
    client = FakeDockerClient()
    client.events_break_after = None if events else 0

    def removed_by_hand() -> None:
        wait_until(lambda: job.out.getvalue().count("training") == 2)
        node1 = client.containers_by_name["ddp-test-run-node1-1"]
        node1.removal_s = removal_s
        node1.remove(force=True)

    job.client = fake_engine(client, node0=[Script(["[0|0]:training"], hang=True)],
                             node1=[Script(["[1|0]:training"], hang=True, then=in_a_thread(removed_by_hand))])
    result = job.run()
    assert (result.exit_code, result.error) == (1, ""), job.out.getvalue()
    said = result.results[1].unresponsive
    assert said in {f"its container is gone ({why})" for why in gone}, said
    assert result.failure is not None and result.failure.describe() == f"node1 stopped answering: {said}"
    assert [(r.state, r.unresponsive) for r in result.results] == [(NodePhase.STOPPED, ""), (NodePhase.FAILED, said)]
    assert not [c for c in client.calls if c[0] == "restart"] and node_events(job, "restart") == []
    assert "restarting" not in job.out.getvalue() and result.recoveries == []


def test_a_node_removed_from_elsewhere_as_every_node_restarts_fails_and_the_others_restart(make_run, monkeypatch):
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    monkeypatch.setattr(f"{SUPERVISOR}.FAILURE_GRACE_S", 0.5)
    restart = FakeContainer.restart

    def removed_as_it_restarts(self, timeout: int = 10) -> None:
        if self.name == "ddp-test-run-node0-1":
            self.remove(force=True)  # `docker rm -f` just before: the restart meets the engine's 404
        restart(self, timeout)

    monkeypatch.setattr(FakeContainer, "restart", removed_as_it_restarts)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"])
    client = FakeDockerClient()
    job.client = fake_engine(client, node0=[Script(["[0|0]:step"], hang=True)],
                             node1=[Script(["[1|0]:step"], hang=True), Script(["[1|0]:back"], hang=True)])
    result = job.run()
    gone = "its container is gone (No such container: ddp-test-run-node0-1)"
    assert (result.exit_code, result.error) == (1, ""), job.out.getvalue()
    assert result.failure is not None and result.failure.describe() == f"node0 stopped answering: {gone}"
    assert [(r.state, r.unresponsive) for r in result.results] == [(NodePhase.FAILED, gone), (NodePhase.STOPPED, "")]
    assert "[node1/rank1]  back" in job.out.getvalue()  # node1 restarted all the same


def test_a_restart_whose_new_start_the_engine_does_not_say_at_once_is_asked_again(make_run, monkeypatch):
    # The engine does not answer the look right after each restart, and its events come late:
    # the start event from before the restart must not pass for the restart's, nor the
    # restart's own die for a second death. (It did: "node0 died (its death)", a second restart.)
    import requests

    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    restart, reload = FakeContainer.restart, FakeContainer.reload
    unanswered: set[str] = set()

    def restarted(self, timeout: int = 10) -> None:
        restart(self, timeout)
        unanswered.add(self.name)

    def looked_at(self) -> None:
        if self.name in unanswered:
            unanswered.discard(self.name)
            raise requests.exceptions.ConnectionError("Connection aborted")
        reload(self)

    monkeypatch.setattr(FakeContainer, "restart", restarted)
    monkeypatch.setattr(FakeContainer, "reload", looked_at)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"])
    client = FakeDockerClient()
    client.events_lag_s = 0.3  # each: the kill's die comes a second or so after it
    job.client = fake_engine(
        client, node0=[Script(["[0|0]:step"], hang=True), Script(["[0|0]:resumed", "[0|0]:done"], delay_s=1.0)],
        node1=[Script(["[1|0]:step"], hang=True), Script(["[1|0]:back", "[1|0]:done"], delay_s=1.0)])
    result = job.run()
    assert result.succeeded and [r.node for r in result.recoveries] == ["node1"], job.out.getvalue()
    assert [c[1] for c in client.calls if c[0] == "restart"] == ["ddp-test-run-node0-1", "ddp-test-run-node1-1"]
    assert job.out.getvalue().count("[node0/rank0]  step") == 1  # the late start event before: not followed again


def test_the_first_failure_ends_the_job_once_and_each_failure_is_recorded_whole(make_run, monkeypatch):
    from tests.unit.test_launcher import report

    monkeypatch.setattr(f"{SUPERVISOR}.FAILURE_GRACE_S", 1.0)
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 60.0)  # every end told by the engine's events
    job = make_run(nodes=3)
    client = FakeDockerClient()
    node1_failed = lambda: any(e["event"] == "node-failed" for e in read_events(job.run_dir))  # noqa: E731
    job.client = fake_engine(client, node0=[Script(["[0|0]:training", "[0|0]:still training"], hang=True)],
                             node1=[Script(["[1|0]:training", *report(1, 0, exc="ValueError: bad batch")], exit_code=1)],
                             node2=[Script(["[2|0]:training"], after=report(2, 0, exc="RuntimeError: peer gone"),
                                           after_when=node1_failed, exit_code=2)])
    started = time.monotonic()
    result = job.run()
    took = time.monotonic() - started
    text = job.out.getvalue()
    assert text.count("stopping the other nodes") == 1 and "node1 failed; stopping the other nodes in 1 s" in text
    assert [{k: v for k, v in e.items() if k != "event"} for e in node_events(job, "node-failed")] == [
        {"node": "node1", "exit_code": 1, "rank": 1}, {"node": "node2", "exit_code": 2, "rank": 2}], text
    assert [e["node"] for e in node_events(job, "node-stopping")] == ["node0"]  # once, after the grace
    assert sorted((e["node"], e["rank"]) for e in node_events(job, "rank-started")) == [
        ("node0", 0), ("node1", 1), ("node2", 2)]  # each rank once, at its first line
    assert sorted((e["node"], e["exit_code"]) for e in node_events(job, "node-exited")) == [
        ("node0", 143), ("node1", 1), ("node2", 2)]
    assert all("via" not in e for e in node_events(job, "node-exited"))  # recorded with no "via"
    assert [(r.state, r.exit_code) for r in result.results] == [
        (NodePhase.STOPPED, 143), (NodePhase.FAILED, 1), (NodePhase.FAILED, 2)]
    assert all(0 < r.wall_s <= took for r in result.results), [r.wall_s for r in result.results]


def test_a_node_whose_launcher_went_away_is_orphaned_not_failed(make_run):
    from orchestrate.node.main import EXIT_LAUNCHER_GONE

    job = make_run(nodes=2)
    job.client = fake_engine(FakeDockerClient(), node0=[Script(["[0|0]:done"])],
                             node1=[Script(["[1|0]:alone"], exit_code=EXIT_LAUNCHER_GONE)])
    result = job.run()
    assert [r.state for r in result.results] == [NodePhase.SUCCEEDED, NodePhase.ORPHANED], job.out.getvalue()
    assert node_events(job, "node-failed") == []


def test_a_restart_the_engines_events_tell_shows_each_line_once_and_marks_the_nodes_running_again(
        make_run, monkeypatch):
    restart, logs = FakeContainer.restart, FakeContainer.logs
    restarted_at: dict[str, float] = {}
    followed_since: dict[str, list[float]] = {}

    def restarted(self, timeout: int = 10) -> None:
        restarted_at[self.name] = time.time()
        restart(self, timeout)

    def log_asked(self, *args, **kwargs):
        if kwargs.get("stream") and kwargs.get("since") is not None:
            followed_since.setdefault(self.name, []).append(kwargs["since"])
        return logs(self, *args, **kwargs)

    def followed_anew(rank: int):
        """An ``after_when``: the launcher follows the node's restarted container (a stream from
        its new start on): torchrun takes seconds to print anything, the fake none."""
        name = f"ddp-test-run-node{rank}-1"
        return lambda: any(since >= restarted_at.get(name, float("inf")) for since in followed_since.get(name, []))

    monkeypatch.setattr(FakeContainer, "restart", restarted)
    monkeypatch.setattr(FakeContainer, "logs", log_asked)
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 60.0)  # every end and start told by the engine's events
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"])
    client = FakeDockerClient()
    job.client = fake_engine(
        client, node0=[Script(["[0|0]:step"], hang=True), Script([], after=["[0|0]:resumed", "[0|0]:done"],
                                                                   after_when=followed_anew(0))],
        node1=[Script(["[1|0]:step"], hang=True), Script([], after=["[1|0]:back", "[1|0]:done"],
                                                          after_when=followed_anew(1))])
    result = job.run()
    text = job.out.getvalue()
    assert result.succeeded and [r.node for r in result.recoveries] == ["node1"], text
    for line in ("[node0/rank0]  step", "[node1/rank1]  step", "[node0/rank0]  resumed", "[node1/rank1]  back"):
        assert text.count(line) == 1, (line, text)  # the attempt before is not read again
    assert text.index("restarting every node") < text.index("[node0/rank0]  resumed")
    assert sorted(e["node"] for e in node_events(job, "node-running")) == ["node0", "node0", "node1", "node1"]
    assert all("via" not in e for e in node_events(job, "node-exited"))  # recorded with no "via"


def test_a_log_stream_the_engine_keeps_dropping_is_followed_again_from_where_it_stopped(make_run, monkeypatch):
    # The engine drops node1's log stream after each line (a flaky connection) more often than a
    # stream asks again at once: it is asked for again, slower, from its last line.
    from orchestrate.engine.container_log import RESUMES

    monkeypatch.setattr("orchestrate.engine.container_log.RESUME_SLOWLY_S", 0.1)
    logs = FakeContainer.logs
    dropped = {"stdout": 0, "stderr": 0}
    node0_streams: list[str] = []

    def dropping(self, *args, **kwargs):  # each of node1's streams: a line at most, RESUMES + 1 times
        chunks = logs(self, *args, **kwargs)
        source = "stdout" if kwargs.get("stdout", True) else "stderr"
        if kwargs.get("stream") and self.name == "ddp-test-run-node0-1":
            node0_streams.append(source)
        if not kwargs.get("stream") or self.name != "ddp-test-run-node1-1" or dropped[source] > RESUMES:
            return chunks
        dropped[source] += 1

        def a_line_at_most():
            for chunk in chunks if source == "stdout" else ():  # (it prints nothing on stderr)
                yield chunk
                return
        return a_line_at_most()

    monkeypatch.setattr(FakeContainer, "logs", dropping)
    job = make_run(nodes=2)
    job.client = fake_engine(FakeDockerClient(), node0=[Script(["[0|0]:ok"], after=["[0|0]:bye"],
                                                               after_when=lambda: "line 5" in job.out.getvalue())],
                             node1=[Script([f"[1|0]:line {i}" for i in range(6)], delay_s=0.3)])
    result = job.run()
    text = job.out.getvalue()
    assert result.succeeded and dropped == {"stdout": RESUMES + 1, "stderr": RESUMES + 1}, text
    assert [text.count(f"[node1/rank1]  line {i}") for i in range(6)] == [1] * 6, text
    assert sorted(node0_streams) == ["stderr", "stdout"]  # node0's log, whole all along, is not asked for again


def test_a_node_whose_log_could_not_be_read_is_followed_again_once_an_inspection_sees_it_running(
        make_run, monkeypatch):
    # The engine did not answer the first read of node1's log (its connection dropped): the log
    # ended at once, with node1 running; an inspection that sees it running follows it again.
    import requests

    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    logs = FakeContainer.logs
    unanswered: list[str] = []

    def first_read_fails(self, *args, **kwargs):
        if self.name == "ddp-test-run-node1-1" and not kwargs.get("stream") and not unanswered:
            unanswered.append(self.name)
            raise requests.exceptions.ConnectionError("Connection aborted")
        return logs(self, *args, **kwargs)

    monkeypatch.setattr(FakeContainer, "logs", first_read_fails)
    job = make_run(nodes=2)
    job.client = fake_engine(FakeDockerClient(), node0=[Script(["[0|0]:ok"])],
                             node1=[Script([f"[1|0]:line {i}" for i in range(3)], delay_s=0.2)])
    result = job.run()
    text = job.out.getvalue()
    assert unanswered and result.succeeded, text
    assert [text.count(f"[node1/rank1]  line {i}") for i in range(3)] == [1] * 3, text
    assert sorted(e["node"] for e in node_events(job, "node-running")) == ["node0", "node1"]


def test_a_dead_node_the_engine_cannot_look_at_until_its_restart_is_restarted_not_taken_for_gone(
        make_run, monkeypatch):
    import requests

    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 60.0)  # the look before the restart is the only one
    reload = FakeContainer.reload
    unanswered: list[str] = []

    def looked_at(self) -> None:
        if self.name == "ddp-test-run-node1-1" and self.status == "exited":  # until its restart
            unanswered.append(self.name)
            raise requests.exceptions.ConnectionError("Connection aborted")
        reload(self)

    monkeypatch.setattr(FakeContainer, "reload", looked_at)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"])
    job.client = fake_engine(FakeDockerClient(),
                             node0=[Script(["[0|0]:step"], hang=True), Script(["[0|0]:resumed", "[0|0]:done"])],
                             node1=[Script(["[1|0]:step"], hang=True), Script(["[1|0]:back", "[1|0]:done"])])
    result = job.run()
    assert unanswered, "the look after node1's death was never made: the test tested nothing"
    assert result.succeeded and [r.node for r in result.recoveries] == ["node1"], job.out.getvalue()


def ends_late(monkeypatch, container: str, until, first_stream_only: bool = False) -> list[str]:
    """The engine ends ``container``'s live log streams (its first two, one per source, where
    ``first_stream_only``) only once ``until`` holds, whatever they held: its connection lags.
    Returns the live streams asked for, one entry each."""
    logs = FakeContainer.logs
    asked: list[str] = []

    def lagging(self, *args, **kwargs):
        chunks = logs(self, *args, **kwargs)
        if not kwargs.get("stream") or self.name != container:
            return chunks
        asked.append(self.name)
        if first_stream_only and len(asked) > 2:
            return chunks

        def late():
            yield from chunks
            wait_until(until)
        return late()

    monkeypatch.setattr(FakeContainer, "logs", lagging)
    return asked


@pytest.mark.timeout(60)
@pytest.mark.parametrize("new_attempt", ["prints", "hangs"])
def test_a_piece_of_a_line_the_old_attempts_stream_left_is_shown_once_as_a_restart_only_inspections_see_is_followed(
        make_run, monkeypatch, quick_watchdog, new_attempt):
    # Rank 0 printed part of a line (no newline yet) and rank 1 a whole line after it, in one raw
    # line of torchrun's tee; then node1 died and every node restarted. With no event stream and
    # node0's old log stream ending late (the engine's connection lags), an inspection sees node0
    # running again first: following its new log shows rank 0's piece first, once, as its rank's.
    # The piece is the job's latest progress: a new attempt that hangs without a line is ended
    # hung, --hang-timeout seconds on.
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_S", 0.05)
    monkeypatch.setattr(f"{INSPECTION}.INSPECT_EVERY_WITHOUT_EVENTS_S", 0.05)
    # (node0's first two streams, the attempt before, end once it is followed anew: two more)
    followed = ends_late(monkeypatch, "ddp-test-run-node0-1", lambda: len(followed) >= 4, first_stream_only=True)
    stop = threading.Event()
    job = make_run(nodes=2, nproc_per_node=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"],
                   **({"hang_timeout": 2} if new_attempt == "hangs" else {}))

    def answering(*ranks: int):
        stuck = [{"seq": 2, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:20",
                  "state": "entered"}]
        return lambda: [answering_worker(job, rank, stuck, stop=stop)() for rank in ranks]

    def new(*lines: str, ranks: tuple[int, int]) -> Script:
        return Script(list(lines)) if new_attempt == "prints" else Script([], hang=True, then=answering(*ranks))

    client = FakeDockerClient()
    client.events_break_after = 0
    job.client = fake_engine(
        client, node0=[Script(["[0|0]:saving ... [1|1]:step 1"], hang=True),
                       new("[0|0]:resumed", "[1|1]:resumed", ranks=(0, 1))],
        node1=[Script(["[2|0]:step 1"], hang=True), new("[2|0]:back", "[3|1]:back", ranks=(2, 3))])
    try:
        result = job.run()
    finally:
        stop.set()
    text = job.out.getvalue()
    assert [r.node for r in result.recoveries] == ["node1"], text
    assert len(followed) >= 4, "node0's old stream ended in time: the test tested nothing"
    assert text.count("[node0/rank0]  saving ...") == 1, text
    assert "[node0/rank1]  step 1" in text
    if new_attempt == "prints":
        assert result.succeeded, text
        assert text.index("[node0/rank0]  saving ...") < text.index("[node0/rank0]  resumed"), text
    else:  # (not the run's time limit, 20 s)
        assert result.hung and "HUNG: no progress for 2 s (--hang-timeout 2)" in text, text


def test_the_late_end_of_a_log_stream_a_restart_superseded_does_not_end_the_node_again(make_run, monkeypatch):
    # node0's stream of the attempt before the restart ends only after its new attempt failed:
    # the node failed once (taken again, the end recorded a second failure, and a lost node
    # would have been taken out of the job twice).
    monkeypatch.setattr(f"{SUPERVISOR}.FAILURE_GRACE_S", 0.5)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=1, faults=["kill:node1@t=0"])
    ends_late(monkeypatch, "ddp-test-run-node0-1", recorded(job, "node-failed", settle_s=0), first_stream_only=True)
    job.client = fake_engine(
        FakeDockerClient(), node0=[Script(["[0|0]:step"], hang=True), Script(["[0|0]:oops"], exit_code=3)],
        node1=[Script(["[1|0]:step"], hang=True), Script(["[1|0]:back"], hang=True)])
    result = job.run()
    assert [r.node for r in result.recoveries] == ["node1"], job.out.getvalue()
    assert node_events(job, "node-failed") == [{"event": "node-failed", "node": "node0", "exit_code": 3, "rank": None}]
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.FAILED, 3), (NodePhase.STOPPED, 143)]


def test_a_log_that_ends_after_the_node_ended_without_it_does_not_end_the_node_again(make_run, monkeypatch):
    # node0 failed, and its log had not ended 3 s on (here 0.2): the node ended without it. Its
    # log's end, later, is not a second end.
    monkeypatch.setattr(f"{SUPERVISOR}.FAILURE_GRACE_S", 0.5)
    monkeypatch.setattr(f"{SUPERVISOR}.LOG_DRAIN_S", 0.2)
    job = make_run(nodes=2)
    ends_late(monkeypatch, "ddp-test-run-node0-1", recorded(job, "node-failed", settle_s=0))
    job.client = fake_engine(FakeDockerClient(), node0=[Script(["[0|0]:oops"], exit_code=3)],
                             node1=[Script(["[1|0]:step"], hang=True)])
    result = job.run()
    assert "node0's log had not ended 0.2 s after it exited" in job.out.getvalue()
    assert node_events(job, "node-failed") == [{"event": "node-failed", "node": "node0", "exit_code": 3, "rank": None}]
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.FAILED, 3), (NodePhase.STOPPED, 143)]

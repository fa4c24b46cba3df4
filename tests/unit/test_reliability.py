"""No lost work, no leaked secret, no hang: graceful stops, secrets, a launcher that always ends,
engine errors read right, locks with a deadline, builds that clean only their own. Against the
fake engine of tests/fakes.py, which fails too."""
from __future__ import annotations

import _thread
import io
import json
import re
import stat
import subprocess
import threading
import time

import pytest
import requests

from orchestrate.errors import ComposeError, EngineError, ImageUnavailableError, LockTimeoutError, UsageError
from orchestrate.outcome.events import read_events
from orchestrate.outcome.states import NodePhase
from tests.fakes import FakeCompose, FakeDockerClient, Script, fake_engine, in_a_thread, wait_until

engine = fake_engine


def interrupt() -> None:
    """What Ctrl-C does to the launcher: a KeyboardInterrupt in its main thread."""
    _thread.interrupt_main()


# Graceful stops --------------------------------------------------------------------------------

def test_ctrl_c_gives_the_workers_sigterm_and_their_grace_and_the_summary_real_times(make_run, when):
    job = make_run(nodes=2, stop_grace=5)
    client = engine(FakeDockerClient(),
                    node0=[Script(["[0|0]:training"], hang=True, on_sigterm=["[0|0]:checkpoint saved on SIGTERM"])],
                    node1=[Script(["[1|0]:training"], hang=True, on_sigterm=["[1|0]:checkpoint saved on SIGTERM"])])
    job.client = client
    when(lambda: job.out.getvalue().count("training") == 2, interrupt)
    result = job.run()
    text = job.out.getvalue()
    assert result.interrupted and result.exit_code == 130
    assert "interrupted: stopping every node (SIGTERM, then SIGKILL after 5 s; interrupt again to kill them now)" in text
    assert "checkpoint saved on SIGTERM" in " ".join(text.split())  # the workers' last lines are kept
    assert ("kill", "ddp-test-run-node0-1", "SIGTERM") in client.calls
    assert ("kill", "ddp-test-run-node0-1") not in client.calls  # no SIGKILL was needed
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, 143)] * 2
    assert all(r.wall_s > 0 for r in result.results) and result.timings.job_s > 0  # not the 0.0 s of old
    assert FakeCompose.instances[-1].calls == ["up", "down"]
    stopping = [{k: e[k] for k in ("node", "grace_s")} for e in read_events(job.run_dir)
                if e["event"] == "node-stopping"]
    assert stopping == [{"node": "node0", "grace_s": 5}, {"node": "node1", "grace_s": 5}]


def test_a_second_ctrl_c_kills_at_once(make_run, when):
    job = make_run(nodes=1, stop_grace=60)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True, ignore_sigterm=True)])
    job.client = client
    when(lambda: "training" in job.out.getvalue(), interrupt)
    when(lambda: "interrupted: stopping every node" in job.out.getvalue(), interrupt)
    started = time.monotonic()
    result = job.run()
    assert time.monotonic() - started < 30  # not the 60 s grace
    assert "interrupted again: killing every node now" in job.out.getvalue()
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, 137)]
    assert result.exit_code == 130 and FakeCompose.instances[-1].calls == ["up", "down"]


def test_ctrl_c_with_no_stop_grace_says_it_kills_at_once_and_does_so(make_run, when):
    job = make_run(nodes=1, stop_grace=0)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True, ignore_sigterm=True)])
    job.client = client
    when(lambda: "training" in job.out.getvalue(), interrupt)
    result = job.run()
    text = job.out.getvalue()
    assert "interrupted: killing every node now (--stop-grace 0)" in text
    assert "interrupted again" not in text  # one Ctrl-C was given
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, 137)]


SUPERVISOR = "orchestrate.supervise.supervisor"


def signals_to(client: FakeDockerClient, container: str) -> list[str]:
    return [c[2] if len(c) > 2 else "SIGKILL" for c in client.calls if c[0] == "kill" and c[1] == container]


def said_lines(job, words: str) -> list[str]:
    return [line for line in job.out.getvalue().splitlines() if words in line]


def recorded(job, kind: str, settle_s: float = 0.5):
    """A condition: the run's record has had an event of ``kind`` for ``settle_s``. The
    supervisor has then acted and gone back to following the nodes, so that an interrupt sent
    now lands there, not in the launcher's hand-over nor in the step that wrote the event (which
    a loaded machine may not have left at once)."""
    seen_at: list[float] = []

    def holds() -> bool:
        if not seen_at and any(e["event"] == kind for e in read_events(job.run_dir)):
            seen_at.append(time.monotonic())
        return bool(seen_at) and time.monotonic() - seen_at[0] >= settle_s
    return holds


def test_ctrl_c_with_no_stop_grace_kills_every_node_without_a_sigterm(make_run, when):
    job = make_run(nodes=2, stop_grace=0)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True)],
                    node1=[Script(["[1|0]:training"], hang=True)])
    job.client = client
    when(lambda: job.out.getvalue().count("training") == 2, interrupt)
    result = job.run()
    assert [signals_to(client, f"ddp-test-run-node{i}-1") for i in range(2)] == [["SIGKILL"], ["SIGKILL"]]
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, 137)] * 2


@pytest.mark.parametrize("ended_by", ["ctrl-c", "failure"])
def test_the_launchers_own_stop_with_no_stop_grace_names_each_node_it_killed_as_given_none(make_run, when, ended_by):
    """`run --stop-grace 0`: the launcher's own stop (a Ctrl-C's, or the ending after a failure)
    kills at once, and says so of each node it killed, with what ran in it, as `stop --timeout 0`
    does: as it happens, in the summary and in the record (until 2026-12-07 it said nothing)."""
    from orchestrate.outcome.record import outcome_record
    from orchestrate.outcome.summary import format_summary

    job = make_run(nodes=2, stop_grace=0)
    failing = [Script(["[1|0]:training", "[1|0]:RuntimeError: boom"], exit_code=1)]
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True)],
                    node1=failing if ended_by == "failure" else [Script(["[1|0]:training"], hang=True)])
    job.client = client
    if ended_by == "ctrl-c":
        when(lambda: job.out.getvalue().count("training") == 2, interrupt)
    result = job.run()
    killed = ["node0", "node1"] if ended_by == "ctrl-c" else ["node0"]
    still = ["torchrun ... train.py (sleeping)", "python train.py (sleeping)"]
    lines = [f"{node} had no grace (its stop gave 0 s), so it got SIGKILL at once; what still ran: {'; '.join(still)}"
             for node in killed]
    assert [line.removeprefix("[orchestrate] ") for line in said_lines(job, "had no grace")] == lines
    summary = format_summary(result).splitlines()
    assert [line.strip() for line in summary if "had no grace" in line] == lines, summary
    assert [(n["name"], n["no_grace"], n["still_running"]) for n in outcome_record(result)["nodes"]] == [
        (node, node in killed, still if node in killed else []) for node in ("node0", "node1")]


def test_a_node_no_signal_ends_is_left_to_the_teardown_after_the_grace_and_a_margin(make_run, when, monkeypatch):
    monkeypatch.setattr(f"{SUPERVISOR}.WIND_DOWN_MARGIN_S", 1.0)
    job = make_run(nodes=1, stop_grace=0.5)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True, unkillable=True)])
    job.client = client
    interrupted_at = []
    when(lambda: "training" in job.out.getvalue(), lambda: (interrupted_at.append(time.monotonic()), interrupt()))
    result = job.run()
    waited = time.monotonic() - interrupted_at[0]
    assert 1.5 <= waited < 15  # the grace and the margin, then no longer: the teardown removes it
    assert signals_to(client, "ddp-test-run-node0-1") == ["SIGTERM", "SIGKILL"]
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, None)]
    assert result.exit_code == 130 and FakeCompose.instances[-1].calls == ["up", "down"]


def test_a_second_ctrl_c_kills_each_node_once_and_a_third_is_waited_out(make_run, when, monkeypatch):
    monkeypatch.setattr(f"{SUPERVISOR}.WIND_DOWN_MARGIN_S", 1.0)
    monkeypatch.setattr(f"{SUPERVISOR}.LOG_DRAIN_S", 2.0)
    job = make_run(nodes=1, stop_grace=2)  # its SIGKILL after the grace is not sent again
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True, unkillable=True)])
    job.client = client
    again_at = []
    when(lambda: "training" in job.out.getvalue(), interrupt)
    when(recorded(job, "node-stopping"), lambda: (again_at.append(time.monotonic()), interrupt()))
    when(recorded(job, "node-killed"), interrupt)
    result = job.run()
    assert said_lines(job, "interrupted again") == ["[orchestrate] interrupted again: killing every node now"]
    assert signals_to(client, "ddp-test-run-node0-1") == ["SIGTERM", "SIGKILL"]
    assert 3.0 <= time.monotonic() - again_at[0] < 15  # its last lines waited for, then no longer
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, None)]


def ctrl_c_twice(make_run, when, monkeypatch, stop_grace: float, first_did: str):
    """A run of one node no signal ends, given Ctrl-C twice: the second once the supervisor
    recorded ``first_did``."""
    monkeypatch.setattr(f"{SUPERVISOR}.WIND_DOWN_MARGIN_S", 2.5)
    monkeypatch.setattr(f"{SUPERVISOR}.LOG_DRAIN_S", 1.0)
    job = make_run(nodes=1, stop_grace=stop_grace)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True, unkillable=True)])
    job.client = client
    when(lambda: "training" in job.out.getvalue(), interrupt)
    # within a grace the second may land anywhere after the stop began; with none, once it is over
    when(recorded(job, first_did, settle_s=0.5 if stop_grace == 0 else 0.0), interrupt)
    job.run()
    return job, client


def test_a_second_ctrl_c_within_a_short_grace_still_kills_at_once(make_run, when, monkeypatch):
    job, _ = ctrl_c_twice(make_run, when, monkeypatch, 1, "node-stopping")
    assert said_lines(job, "interrupted again") == ["[orchestrate] interrupted again: killing every node now"]
    events = read_events(job.run_dir)
    stopping, killed = (next(e["time"] for e in events if e["event"] == kind) for kind in ("node-stopping", "node-killed"))
    assert killed - stopping < 1.0  # at the second Ctrl-C, not when the grace ran out


def test_with_no_stop_grace_a_second_ctrl_c_is_waited_out(make_run, when, monkeypatch):
    job, client = ctrl_c_twice(make_run, when, monkeypatch, 0, "node-killed")
    assert said_lines(job, "interrupted again") == []  # they were killed at the first
    assert signals_to(client, "ddp-test-run-node0-1") == ["SIGKILL"]


def test_a_ctrl_c_that_cuts_short_the_kill_of_every_node_still_kills_them_all(make_run, when, monkeypatch):
    monkeypatch.setattr(f"{SUPERVISOR}.WIND_DOWN_MARGIN_S", 2.0)
    job = make_run(nodes=2, stop_grace=0)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True)],
                    node1=[Script(["[1|0]:training"], hang=True)])
    job.client = client

    def interrupt_while_killing_node0() -> None:
        node0 = client.containers_by_name["ddp-test-run-node0-1"]
        real_kill = node0.kill

        def kill_then_ctrl_c(signal: str = "SIGKILL") -> None:  # a second Ctrl-C lands right after it
            real_kill(signal=signal)
            node0.kill = real_kill
            raise KeyboardInterrupt

        node0.kill = kill_then_ctrl_c
        interrupt()

    when(lambda: job.out.getvalue().count("training") == 2, interrupt_while_killing_node0)
    result = job.run()
    assert signals_to(client, "ddp-test-run-node1-1") == ["SIGKILL"]  # not left unsignalled
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, 137)] * 2
    assert said_lines(job, "interrupted again") == ["[orchestrate] interrupted again: killing every node now"]

def test_a_ctrl_c_of_an_elastic_job_restarts_nothing(make_run, when):
    job = make_run(nodes=2, rdzv="c10d", max_restarts=2, stop_grace=5)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True)],
                    node1=[Script(["[1|0]:training"], hang=True)])
    job.client = client
    when(lambda: job.out.getvalue().count("training") == 2, interrupt)
    result = job.run()
    assert "restarting" not in job.out.getvalue()
    assert not [c for c in client.calls if c[0] == "restart"]
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.STOPPED, 143)] * 2
    assert result.exit_code == 130

def test_a_node_removed_from_elsewhere_is_not_said_killed_and_does_not_stop_the_others(make_run, when):
    job = make_run(nodes=2, stop_grace=0.5)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True, ignore_sigterm=True)],
                    node1=[Script(["[1|0]:training"], hang=True)])
    job.client = client

    def remove_node1_as_it_is_stopped_then_interrupt() -> None:
        # `docker rm -f` by hand, landing just before the stop's SIGTERM: removed earlier, the
        # engine's event may tell the supervisor first (under load it did), and no SIGTERM is asked
        node1 = client.containers_by_name["ddp-test-run-node1-1"]
        kill = node1.kill

        def removed_first(signal: str = "SIGKILL") -> None:
            if node1.name in client.containers_by_name:
                node1.remove(force=True)
            kill(signal)

        node1.kill = removed_first
        interrupt()

    when(lambda: job.out.getvalue().count("training") == 2, remove_node1_as_it_is_stopped_then_interrupt)
    result = job.run()
    assert signals_to(client, "ddp-test-run-node1-1")[:1] == ["SIGTERM"]  # it was asked: the engine said gone
    assert signals_to(client, "ddp-test-run-node0-1") == ["SIGTERM", "SIGKILL"]  # the others stopped all the same
    killed = [e["node"] for e in read_events(job.run_dir) if e["event"] == "node-killed"]
    assert killed == ["node0"]
    assert result.exit_code == 130 and FakeCompose.instances[-1].calls == ["up", "down"]

def test_preempt_sends_sigterm_then_sigkill_after_the_grace(make_run):
    job = make_run(nodes=2, stop_grace=0.5, faults=["preempt:node1@t=0"])
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:waiting"], hang=True)],
                    node1=[Script(["[1|0]:training"], hang=True, ignore_sigterm=True)])
    job.client = client
    result = job.run()
    text = job.out.getvalue()
    calls = [c for c in client.calls if c[0] == "kill" and c[1] == "ddp-test-run-node1-1"]
    assert calls[:2] == [("kill", "ddp-test-run-node1-1", "SIGTERM"), ("kill", "ddp-test-run-node1-1")]
    assert "fault injected: preempt:node1" in text
    assert result.failure.describe() == "node1 failed (injected fault preempt:node1)"
    assert result.exit_code == 1


def test_a_preempt_with_no_stop_grace_names_the_node_it_killed_as_given_none(make_run):
    """`run --stop-grace 0` and a preempt: its SIGKILL follows the SIGTERM at once, and the node
    it killed was said not to have stopped "within its grace" (until 2026-12-07), where it had
    none; it is named as `stop --timeout 0` and the launcher's own stop name a node given none."""
    from orchestrate.outcome.record import outcome_record
    from orchestrate.outcome.summary import format_summary

    job = make_run(nodes=2, stop_grace=0, faults=["preempt:node1@t=0"])
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:waiting"], hang=True)],
                    node1=[Script(["[1|0]:training"], hang=True, ignore_sigterm=True)])
    job.client = client
    result = job.run()
    sent = [c[2] if len(c) > 2 else "SIGKILL" for c in client.calls if c[0] == "kill" and c[1] == "ddp-test-run-node1-1"]
    assert sent[:2] == ["SIGTERM", "SIGKILL"]  # a preempt's SIGTERM all the same, as a cluster sends it
    assert result.failure.describe() == "node1 failed (injected fault preempt:node1)"
    still = "what still ran: torchrun ... train.py (sleeping); python train.py (sleeping)"
    line = f"node1 had no grace (its stop gave 0 s), so it got SIGKILL at once; {still}"
    assert [said.removeprefix("[orchestrate] ") for said in said_lines(job, "node1 ")
            if "SIGKILL" in said] == [line]
    assert not said_lines(job, "within its grace")
    assert line in [summary.strip() for summary in format_summary(result).splitlines()]
    assert [(n["name"], n["grace_ran_out"], n["no_grace"]) for n in outcome_record(result)["nodes"]
            if n["name"] == "node1"] == [("node1", True, True)]


def test_a_preempted_node_of_an_elastic_job_rejoins(make_run):
    job = make_run(nodes=2, rdzv="c10d", max_restarts=1, faults=["preempt:node1@t=0"])
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:step"], hang=True), Script(["[0|0]:resumed"])],
                    node1=[Script(["[1|0]:step"], hang=True, on_sigterm=["[1|0]:saved"]), Script(["[1|0]:back"])])
    job.client = client
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    assert "node1 died (injected fault preempt:node1); restarting every node" in job.out.getvalue()


def exited(client: FakeDockerClient, service: str):
    """Whether the engine has said that a Compose service's container died (a Script's
    after_when): its event, not only its status, so that the events come in that order."""
    return lambda: any(e["Action"] == "die" and e["Actor"]["Attributes"].get("com.docker.compose.service") == service
                       for e in list(client.history))


# How late the engine's events come: the nodes' exits are then seen by an inspection first
EVENTS_IN_ORDER = pytest.mark.parametrize("events_lag_s", [0.0, 3.0], ids=["events-first", "inspection-first"])


@EVENTS_IN_ORDER
def test_the_runs_store_container_dying_explains_the_nodes_failures(make_run, events_lag_s):
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", max_restarts=3)
    client = FakeDockerClient()
    client.events_lag_s = events_lag_s
    store_gone = exited(client, "rdzv-store")
    lost = "RendezvousConnectionError: The connection to the C10d store has failed."
    job.client = engine(client, **{"rdzv-store": [Script(["serving"], exit_code=137, delay_s=0.3)]},
                        node0=[Script(["[0|0]:step 1"], exit_code=1, after=[f"[0|0]:{lost}"], after_when=store_gone)],
                        node1=[Script(["[1|0]:step 1"], exit_code=1, after=[f"[1|0]:{lost}"], after_when=store_gone)])
    result = job.run()
    assert result.exit_code == 1, job.out.getvalue()
    said = "the run's rendezvous store (its container rdzv-store) died (exit code 137)"
    assert result.store_lost == said and f"[orchestrate] {said}" in job.out.getvalue()
    failure = result.failure
    assert failure is not None and failure.describe().startswith(
        f"{said}: every node's torchrun agent lost the rendezvous; then node")
    events = [json.loads(line) for line in (job.run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["service"], e["exit_code"]) for e in events if e["event"] == "store-died"] == [("rdzv-store", 137)]
    assert not [e for e in events if e["event"] == "restart"]  # a failure, not a death: nothing to rejoin
    assert json.loads((job.run_dir / "outcome.json").read_text())["failure"]["store_lost"] == said
    if events_lag_s:
        assert {e.get("via") for e in events if e["event"] == "node-exited"} == {"inspection"}, events


@EVENTS_IN_ORDER
def test_a_store_container_that_dies_after_a_nodes_own_failure_is_no_cause(make_run, events_lag_s):
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container")
    client = FakeDockerClient()
    client.events_lag_s = events_lag_s
    # node1's log ends a while after its exit, so the store's death comes in while its failure is
    # still being read (a loaded machine did that at random: the store was blamed)
    client.log_end_lag_s = 1.0
    job.client = engine(client, **{"rdzv-store": [Script(["serving"], exit_code=137, after_when=exited(client, "node1"),
                                                         after=["going"])]},
                        node0=[Script(["[0|0]:step 1"], hang=True)],
                        node1=[Script(["[1|0]:step 1", "[1|0]:ValueError: bad batch"], exit_code=1, delay_s=0.2)])
    result = job.run()
    assert result.exit_code == 1 and result.store_lost == "", job.out.getvalue()
    assert result.failure is not None and result.failure.describe().startswith("node1"), result.failure.describe()
    if events_lag_s:  # the store had ended too when node1's exit was seen, but after node1
        events = [json.loads(line) for line in (job.run_dir / "events.jsonl").read_text().splitlines()]
        assert [e.get("via") for e in events if e["event"] == "node-exited" and e["node"] == "node1"] == ["inspection"]


def recorded_for(job, kind: str, node: str):
    """Whether the launcher has recorded an event of ``kind`` for ``node`` (a Script's after_when):
    the engine's next event then comes after the launcher has dealt with that one, however loaded
    the machine."""
    return lambda: any(e["event"] == kind and e.get("node") == node for e in read_events(job.run_dir))


def test_a_store_that_dies_after_a_node_was_lost_for_good_is_still_said(make_run):
    """A node a lose fault took ends for good, with exit code 137 and no restart: the store's death
    after it is the job's news, not a failure that came first (review: it went unsaid, and the
    node left hung on to the time limit with no word of why). The store dies only once the launcher
    has recorded node1 lost, so the order holds on any machine (a fixed delay after node1's die
    event let a loaded machine read the store's death before node1's exit, and pass without the fix)."""
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", nnodes="1:2", max_restarts=3, timeout_s=8.0,
                   faults=["lose:node1@t=1"])
    client = FakeDockerClient()
    job.client = engine(client, **{"rdzv-store": [Script(["serving"], exit_code=137, after=["going"],
                                                         after_when=recorded_for(job, "node-lost", "node1"))]},
                        node0=[Script(["[0|0]:step 1"], hang=True)],
                        node1=[Script(["[1|0]:step 1"], hang=True)])
    result = job.run()
    said = "the run's rendezvous store (its container rdzv-store) died (exit code 137)"
    assert result.store_lost == said and f"[orchestrate] {said}" in job.out.getvalue(), job.out.getvalue()


STORE_DIED = "the run's rendezvous store (its container rdzv-store) died (exit code 137)"


def store_deaths(job) -> list[tuple[str, int]]:
    return [(e["service"], e["exit_code"]) for e in read_events(job.run_dir) if e["event"] == "store-died"]


def test_a_store_that_dies_while_the_nodes_hang_on_is_said_when_it_dies_and_once(make_run):
    # No node fails (the time limit ends the run): the store's death is said from its event, as
    # it comes, not only looked for at a first failure. Started again by hand, its second death
    # is not said again.
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", stop_grace=1, timeout_s=6.0)
    client = FakeDockerClient()
    store = "ddp-test-run-rdzv-store-1"

    def start_it_again() -> None:  # `docker start` by hand
        wait_until(lambda: exited(client, "rdzv-store")() and "rendezvous store" in job.out.getvalue())
        client.containers_by_name[store].start()

    job.client = engine(client, **{"rdzv-store": [Script(["serving"], exit_code=137, delay_s=0.3),
                                                  Script(["serving again"], exit_code=137, delay_s=0.3)]},
                        node0=[Script(["[0|0]:step 1"], hang=True)],
                        node1=[Script(["[1|0]:step 1"], hang=True, then=in_a_thread(start_it_again))])
    result = job.run()
    assert [e["Action"] for e in client.history if e["Actor"]["Attributes"]["name"] == store].count("die") == 2
    text = job.out.getvalue()
    assert result.store_lost == STORE_DIED, text
    assert text.index(f"[orchestrate] {STORE_DIED}") < text.index("did not end within its time limit"), text
    assert text.count("rendezvous store") == 1 and store_deaths(job) == [("rdzv-store", 137)]


def test_a_store_killed_by_a_fault_is_named_with_it_as_what_ended_the_job(make_run):
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", max_restarts=3, faults=["kill:store@t=0.2"])
    client = FakeDockerClient()
    store_gone = exited(client, "rdzv-store")
    lost = "RendezvousConnectionError: The connection to the C10d store has failed."
    job.client = engine(client, **{"rdzv-store": [Script(["serving"], hang=True)]},
                        node0=[Script(["[0|0]:step 1"], exit_code=1, after=[f"[0|0]:{lost}"], after_when=store_gone)],
                        node1=[Script(["[1|0]:step 1"], exit_code=1, after=[f"[1|0]:{lost}"], after_when=store_gone)])
    result = job.run()
    assert ("kill", "ddp-test-run-rdzv-store-1") in client.calls, job.out.getvalue()
    said = f"{STORE_DIED}, killed by injected fault kill:store@t=0.2"
    assert result.store_lost == said and f"[orchestrate] {said}\n" in job.out.getvalue()
    assert result.failure is not None and result.failure.describe().startswith(
        f"{said}: every node's torchrun agent lost the rendezvous; then node"), result.failure.describe()
    [fault] = result.faults
    assert (fault.spec, fault.node, fault.fired) == ("kill:store@t=0.2", "store", True)
    assert [(e["node"], e["spec"]) for e in read_events(job.run_dir) if e["event"] == "fault"] == [
        ("store", "kill:store@t=0.2")]
    assert store_deaths(job) == [("rdzv-store", 137)]


@EVENTS_IN_ORDER
def test_a_dead_store_restarts_no_node_even_one_its_own_fault_would_restart(make_run, events_lag_s):
    # a node a fault slows fails as the store dies: a restart would wait out its rendezvous with no store
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", max_restarts=3,
                   faults=["slow:node1,cpus=0.5@t=0", "kill:store@t=0.3"])
    client = FakeDockerClient()
    client.events_lag_s = events_lag_s
    store_gone = exited(client, "rdzv-store")
    lost = "RendezvousConnectionError: The connection to the C10d store has failed."
    job.client = engine(client, **{"rdzv-store": [Script(["serving"], hang=True)]},
                        node0=[Script(["[0|0]:step 1"], hang=True)],  # (node1's exit is the first one seen)
                        node1=[Script(["[1|0]:step 1"], exit_code=1, after=[f"[1|0]:{lost}"], after_when=store_gone)])
    result = job.run()
    assert [e for e in read_events(job.run_dir) if e["event"] == "restart"] == [], job.out.getvalue()
    assert result.failure is not None and result.failure.describe().startswith(
        f"{STORE_DIED}, killed by injected fault kill:store@t=0.3: every node's torchrun agent lost the rendezvous")


@pytest.mark.parametrize("spec, done, undone", [
    ("pause:store@t=0.2..0.6", [("pause", "ddp-test-run-rdzv-store-1")], [("unpause", "ddp-test-run-rdzv-store-1")]),
    # connected again under its service's name, the host the agents reach it by
    ("disconnect:store@t=0.2..0.6", [("disconnect", "ddp-test-run-rdzv-store-1", "ddp-test-run_ddp")],
     [("connect", "ddp-test-run-rdzv-store-1", "ddp-test-run_ddp", ("rdzv-store",))]),
])
def test_a_store_hung_or_cut_off_for_a_while_is_made_whole_at_its_end_and_no_cause(make_run, spec, done, undone):
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", faults=[spec])
    client = FakeDockerClient()
    ended = lambda: "fault ended" in job.out.getvalue()  # noqa: E731
    job.client = engine(client, **{"rdzv-store": [Script(["serving"], hang=True)]},
                        node0=[Script(["[0|0]:step 1"], after_when=ended, after=["[0|0]:step 2"])],
                        node1=[Script(["[1|0]:step 1"], after_when=ended, after=["[1|0]:step 2"])])
    result = job.run()
    assert result.succeeded and result.store_lost == "", job.out.getvalue()
    acted = [c for c in client.calls if c[0] in ("pause", "unpause", "disconnect", "connect")]
    assert acted == done + undone
    [fault] = result.faults
    assert (fault.spec, fault.node, fault.fired) == (spec, "store", True) and fault.ended_s is not None
    assert f"fault ended: {spec} (" in job.out.getvalue()


@pytest.mark.parametrize("spec, undone", [
    ("pause:store@t=0.1..300", [("unpause", "ddp-test-run-rdzv-store-1")]),
    ("disconnect:store@t=0.1..300", [("connect", "ddp-test-run-rdzv-store-1", "ddp-test-run_ddp", ("rdzv-store",))]),
])
def test_ctrl_c_lets_a_store_still_held_by_its_fault_go_before_the_nodes_are_stopped(make_run, when, spec, undone):
    # (a node's own fault is let go by its stop, which unpauses it first: not ended early, nor said ended)
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", stop_grace=2,
                   faults=[spec, "slow:node1,cpus=0.5@t=0.1..300"])
    client = FakeDockerClient()
    store = "ddp-test-run-rdzv-store-1"
    job.client = engine(client, **{"rdzv-store": [Script(["serving"], hang=True)]},
                        node0=[Script(["[0|0]:training"], hang=True)], node1=[Script(["[1|0]:training"], hang=True)])
    when(lambda: job.out.getvalue().count("fault injected") == 2, interrupt)
    result = job.run()
    assert result.exit_code == 130, job.out.getvalue()
    acted = [c for c in client.calls
             if c[0] in ("unpause", "connect") and c[1] == store or c[:2] == ("kill", "ddp-test-run-node0-1")]
    assert acted[:2] == [*undone, ("kill", "ddp-test-run-node0-1", "SIGTERM")], acted  # the store first
    assert re.search(rf"^\[orchestrate\] fault ended: {re.escape(spec)} \(\d+\.\d s into the job\)$", job.out.getvalue(),
                     re.M)
    assert "fault ended: slow:node1" not in job.out.getvalue()
    assert [(f.spec, f.ended_s is not None) for f in result.faults] == [(spec, True), ("slow:node1,cpus=0.5@t=0.1..300",
                                                                                     False)]
    assert [e["event"] for e in read_events(job.run_dir)].count("fault-ended") == 1


def store_dies_when(condition) -> Script:
    """The store container's script: it serves until ``condition`` holds, then dies with 137."""
    return Script(["serving"], exit_code=137, after=["going"], after_when=condition)


def test_a_store_that_dies_as_ctrl_c_stops_the_nodes_is_no_cause(make_run, when):
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", stop_grace=2)
    client = FakeDockerClient()
    sigterm_sent = lambda: "SIGTERM" in signals_to(client, "ddp-test-run-node1-1")  # noqa: E731
    job.client = engine(client, **{"rdzv-store": [store_dies_when(sigterm_sent)]},
                        node0=[Script(["[0|0]:training"], hang=True, ignore_sigterm=True)],  # live past it
                        node1=[Script(["[1|0]:training"], hang=True)])
    when(lambda: job.out.getvalue().count("training") == 2, interrupt)
    result = job.run()
    assert exited(client, "rdzv-store")(), "the store never died: the test tested nothing"
    assert result.exit_code == 130 and result.store_lost == "", job.out.getvalue()
    assert "rendezvous store" not in job.out.getvalue() and store_deaths(job) == []


def test_a_store_that_dies_as_a_failures_grace_ends_and_the_others_are_stopped_is_no_cause(make_run, monkeypatch):
    monkeypatch.setattr(f"{SUPERVISOR}.FAILURE_GRACE_S", 0.5)
    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", stop_grace=2)
    client = FakeDockerClient()
    sigterm_sent = lambda: "SIGTERM" in signals_to(client, "ddp-test-run-node0-1")  # noqa: E731
    job.client = engine(client, **{"rdzv-store": [store_dies_when(sigterm_sent)]},
                        node0=[Script(["[0|0]:training"], hang=True, ignore_sigterm=True)],  # live past it
                        node1=[Script(["[1|0]:training", "[1|0]:ValueError: bad batch"], exit_code=1, delay_s=0.2)])
    result = job.run()
    assert exited(client, "rdzv-store")(), "the store never died: the test tested nothing"
    assert result.failure is not None and result.failure.describe().startswith("node1"), job.out.getvalue()
    assert result.store_lost == "" and "rendezvous store" not in job.out.getvalue() and store_deaths(job) == []


def test_a_store_that_dies_while_stop_run_stops_the_nodes_is_no_cause(make_run):
    from orchestrate.engine.runs import list_runs, mark_stop_requested

    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container")
    client = FakeDockerClient()
    asked = lambda: (job.run_dir / "stop-requested").exists()  # noqa: E731

    def stop_from_another_terminal() -> None:  # the request first, as `stop RUN` writes it; the SIGTERMs later
        wait_until(lambda: job.out.getvalue().count("training") == 2)
        mark_stop_requested(list_runs(client)[0].run_dir, ["node0", "node1"], grace_s=5)
        wait_until(exited(client, "rdzv-store"))
        for node in ("node0", "node1"):
            client.containers_by_name[f"ddp-test-run-{node}-1"].kill("SIGTERM")

    job.client = engine(client, **{"rdzv-store": [store_dies_when(asked)]},
                        node0=[Script(["[0|0]:training"], hang=True)],
                        node1=[Script(["[1|0]:training"], hang=True, then=in_a_thread(stop_from_another_terminal))])
    result = job.run()
    assert result.stopped_by and result.store_lost == "", job.out.getvalue()
    assert "rendezvous store" not in job.out.getvalue() and store_deaths(job) == []


def test_stop_run_lets_a_store_still_held_by_its_fault_go(make_run):
    from orchestrate.engine.runs import list_runs, mark_stop_requested

    job = make_run(nodes=2, rdzv="c10d", rdzv_store="container", faults=["pause:store@t=0.1..300"])
    client = FakeDockerClient()

    def stop_from_another_terminal() -> None:  # the request first, as `stop RUN` writes it; the SIGTERMs later
        wait_until(lambda: "fault injected" in job.out.getvalue())
        mark_stop_requested(list_runs(client)[0].run_dir, ["node0", "node1"], grace_s=5)
        wait_until(lambda: "fault ended" in job.out.getvalue())
        for node in ("node0", "node1"):
            client.containers_by_name[f"ddp-test-run-{node}-1"].kill("SIGTERM")

    job.client = engine(client, **{"rdzv-store": [Script(["serving"], hang=True)]},
                        node0=[Script(["[0|0]:training"], hang=True)],
                        node1=[Script(["[1|0]:training"], hang=True, then=in_a_thread(stop_from_another_terminal))])
    result = job.run()
    assert result.stopped_by, job.out.getvalue()
    acted = [c[0] for c in client.calls if c[0] in ("pause", "unpause")]
    assert acted == ["pause", "unpause"] and result.faults[0].ended_s is not None


def test_a_preempts_sigkill_belongs_to_the_attempt_it_was_set_for(make_run):
    """The preempted node exits on SIGTERM and rejoins; its grace then runs out while the next
    attempt trains: that attempt is not killed, and one fault is one recovery."""
    import time

    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, stop_grace=0.5, faults=["preempt:node1@t=0"])
    started = time.monotonic()
    past_the_grace = lambda: time.monotonic() - started > 2.0  # noqa: E731
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:step"], hang=True),
                                               Script(["[0|0]:resumed"], after=["[0|0]:done"], after_when=past_the_grace)],
                    node1=[Script(["[1|0]:step"], hang=True, on_sigterm=["[1|0]:saved"]),
                           Script(["[1|0]:back"], after=["[1|0]:done"], after_when=past_the_grace)])
    job.client = client
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    assert len(result.recoveries) == 1
    events = [json.loads(line)["event"] for line in (job.run_dir / "events.jsonl").read_text().splitlines()]
    assert "node-killed" not in events
    assert events.count("restart") == 1


def test_a_restart_seen_by_inspection_before_its_late_die_event_is_one_restart(make_run, monkeypatch):
    # Inspections find the restarted containers running before the engine's event stream
    # brings the restart's own "die": that old death must not count as a new one.
    monkeypatch.setattr("orchestrate.supervise.inspection.INSPECT_EVERY_S", 0.05)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node1@t=0"])
    client = engine(FakeDockerClient(),
                    node0=[Script(["[0|0]:step"], hang=True), Script(["[0|0]:resumed", "[0|0]:done"], delay_s=1.0)],
                    node1=[Script(["[1|0]:step"], hang=True), Script(["[1|0]:back", "[1|0]:done"], delay_s=1.0)])
    client.events_lag_s = 0.2
    job.client = client
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    assert [r.node for r in result.recoveries] == ["node1"], job.out.getvalue()
    assert [c[1][-7:-2] for c in client.calls if c[0] == "restart"] == ["node0", "node1"]


def test_a_restart_fault_in_an_elastic_job_is_one_recovery(make_run):
    # The fault's own restart brings a die and a start; the policy's restart of every node
    # follows: the events from before it must not count as another death.
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["restart:node1@t=0"])
    client = engine(FakeDockerClient(),
                    node0=[Script(["[0|0]:step"], hang=True), Script(["[0|0]:resumed", "[0|0]:done"], delay_s=0.5)],
                    node1=[Script(["[1|0]:step"], hang=True), Script(["[1|0]:rebooted"], hang=True),
                           Script(["[1|0]:back", "[1|0]:done"], delay_s=0.5)])
    client.events_lag_s = 0.05
    job.client = client
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    assert [r.node for r in result.recoveries] == ["node1"], job.out.getvalue()


def test_an_inspection_taken_before_a_restart_does_not_undo_it(make_run, monkeypatch):
    # One inspection sees node0 dead and node1 running; node0's death restarts every node, then
    # the same inspection's sighting of node1 (from before its restart) comes up: it must not
    # stand for node1's new start, or node1's restart would count as a death of its own.
    monkeypatch.setattr("orchestrate.supervise.inspection.INSPECT_EVERY_S", 0.01)
    job = make_run(nodes=2, rdzv="c10d", max_restarts=3, faults=["kill:node0@t=0"])
    client = engine(FakeDockerClient(),
                    node0=[Script(["[0|0]:step"], hang=True), Script([f"[0|0]:resumed {i}" for i in range(4)], delay_s=0.5)],
                    node1=[Script(["[1|0]:step"], hang=True), Script([f"[1|0]:back {i}" for i in range(4)], delay_s=0.5)])
    client.events_lag_s = 0.1  # the inspection sees the kill before its event comes
    job.client = client
    result = job.run()
    assert result.succeeded, job.out.getvalue()
    assert [r.node for r in result.recoveries] == ["node0"], job.out.getvalue()


# A launcher that always ends ----------------------------------------------------------------------

def test_a_broken_event_stream_is_said_and_the_nodes_are_followed_by_inspection(make_run):
    job = make_run(nodes=2)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:a", "[0|0]:b"])], node1=[Script(["[1|0]:c"], exit_code=3)])
    client.events_break_after = 0  # as a daemon restart cuts it
    job.client = client
    result = job.run()
    reason = "Connection aborted: the engine went away"
    assert (f"[orchestrate] the engine's event stream ended ({reason}); following the nodes by inspecting their"
            " containers\n") in job.out.getvalue()
    assert [(r.state, r.exit_code) for r in result.results] == [(NodePhase.SUCCEEDED, 0), (NodePhase.FAILED, 3)]
    assert [e["reason"] for e in read_events(job.run_dir) if e["event"] == "events-ended"] == [reason]


def test_a_lost_engine_ends_the_run_with_exit_2_and_one_line(make_run, monkeypatch, when):
    monkeypatch.setattr("orchestrate.supervise.inspection.ENGINE_LOST_S", 0.5)
    monkeypatch.setattr("orchestrate.launch.teardown.TEARDOWN_BACKOFF", __import__("tenacity").wait_none())
    job = make_run(nodes=2, faults=["kill:node1@t=300"])
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:training"], hang=True)],
                    node1=[Script(["[1|0]:training"], hang=True)])
    client.events_break_after = 0
    job.client = client
    when(lambda: job.out.getvalue().count("training") == 2,
         lambda: client.failures.update(reload=requests.exceptions.ConnectionError("Connection refused")))
    started = time.monotonic()
    result = job.run()
    assert time.monotonic() - started < 30
    assert result.exit_code == 2 and result.error.startswith("lost the Docker engine: no answer for")
    assert "Connection refused" in result.error
    assert "the engine does not answer (Connection refused)" in job.out.getvalue()
    assert "down" in FakeCompose.instances[-1].calls  # the teardown was tried
    [fault] = result.faults  # a fault still pending is listed as not fired, with why
    assert (fault.spec, fault.fired) == ("kill:node1@t=300", False) and "before t=300 s" in fault.reason


def test_an_exit_seen_by_inspection_and_by_its_event_counts_once(make_run):
    job = make_run(nodes=1)
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:bye"], exit_code=4)])
    job.client = client
    result = job.run()
    events = [json.loads(line) for line in (job.run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("node-exited") == 1
    assert [e["event"] for e in events].count("node-failed") == 1
    assert result.results[0].exit_code == 4


# Secrets -----------------------------------------------------------------------------------------

def test_a_planted_secret_is_in_the_compose_file_only(make_run, tmp_path):
    (tmp_path / "job.env").write_text("HF_TOKEN=file-secret-42\n")
    job = make_run(nodes=2, env={"WANDB_API_KEY": "supersecret123"}, env_file=tmp_path / "job.env")
    job.command_line = "python -m orchestrate run --env WANDB_API_KEY=supersecret123 --env-file job.env"
    client = engine(FakeDockerClient(), node0=[Script(["[0|0]:hi"])], node1=[Script(["[1|0]:hi"], exit_code=1)])
    job.client = client
    result = job.run()
    assert result.exit_code == 1
    compose = job.run_dir / "compose.json"
    assert stat.S_IMODE(compose.stat().st_mode) == 0o600
    assert "supersecret123" in compose.read_text() and "file-secret-42" in compose.read_text()
    leaked = [p.name for p in job.run_dir.rglob("*") if p.is_file() and p != compose
              and ("supersecret123" in p.read_text(errors="replace") or "file-secret-42" in p.read_text(errors="replace"))]
    assert leaked == []
    assert "supersecret123" not in job.out.getvalue()
    # The labels live in the Compose file too (the engine shows them to anyone who inspects):
    # only the environment may hold the value there.
    services = json.loads(compose.read_text())["services"].values()
    assert all("supersecret123" not in json.dumps(s["labels"]) for s in services)
    assert all(s["environment"]["WANDB_API_KEY"] == "supersecret123" for s in services)
    assert json.loads((job.run_dir / "run.json").read_text())["command"].endswith("--env WANDB_API_KEY=*** --env-file job.env")


# Engine errors read right -----------------------------------------------------------------------

def test_an_engine_that_cannot_say_which_gpus_it_has_is_an_error_not_a_cpu_run():
    from orchestrate.engine.gpus import detect_gpus

    client = FakeDockerClient()
    client.failures["info"] = requests.exceptions.ReadTimeout("Read timed out")
    with pytest.raises(EngineError, match="cannot ask the engine which GPUs it has: Read timed out"):
        detect_gpus(client)


def test_a_broken_stream_ends_but_a_bug_is_raised():
    from orchestrate.engine.client import stream_lines

    def broken():
        yield b"one\ntw"
        raise requests.exceptions.ConnectionError("reset")

    def buggy():
        yield b"one\n"
        raise TypeError("a bug")

    assert list(stream_lines(broken())) == [b"one", b"tw"]
    with pytest.raises(TypeError):
        list(stream_lines(buggy()))


def test_a_lost_connection_in_a_command_is_one_line_and_exit_2(capsys):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    client.failures["containers.list"] = requests.exceptions.ConnectionError("Connection aborted")
    assert main(["ps"], out=io.StringIO(), client=client) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: engine error: Connection aborted"]


def test_an_engine_that_takes_the_connection_and_never_answers_is_given_up_on_quickly_in_one_line(monkeypatch):
    """A wedged dockerd (or a tunnel to a machine gone) accepts and says nothing: the commands
    gave up only after the 120 s request limit, saying nothing meanwhile. Here a real socket that
    listens and never answers, as DOCKER_HOST."""
    import socket

    from orchestrate.engine.client import connect
    from orchestrate.errors import EngineUnavailableError

    silent = socket.create_server(("127.0.0.1", 0))
    address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    taken: list[socket.socket] = []
    threading.Thread(target=lambda: taken.append(silent.accept()[0]), daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", address)
    started = time.monotonic()
    try:
        with pytest.raises(EngineUnavailableError) as raised:
            connect(timeout_s=30, reach_timeout_s=0.5)
    finally:
        silent.close()
        for connection in taken:
            connection.close()
    assert time.monotonic() - started < 5  # not the 30 s each later request may take
    assert str(raised.value) == (f"the Docker engine at {address} did not answer within 0.5 s (a stuck dockerd, or a"
                                 " host or tunnel gone); restart it, or point DOCKER_HOST at one that answers")


def test_an_engine_that_answers_gets_the_whole_request_limit_after_its_quick_first_answer(monkeypatch):
    """The short limit is for the engine's first answer only: a request after it (a container's
    wait, a build) has the client's whole ``timeout_s``. A stand-in engine that answers the
    version and the ping over real HTTP."""
    import http.server

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"ApiVersion": "1.41"}' if self.path.endswith("/version") else b"OK"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    from orchestrate.engine.client import connect

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.server_address[1]}")
    try:
        client = connect(timeout_s=77, reach_timeout_s=0.5)
        assert client.api.timeout == 77
        assert client.ping() is True
    finally:
        server.shutdown()
        server.server_close()


# Teardown gaps ----------------------------------------------------------------------------------

def test_a_hung_compose_is_a_compose_error(tmp_path, monkeypatch):
    from orchestrate.engine.compose_cli import ComposeProject

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr("orchestrate.engine.compose_cli.compose_command", lambda: ("docker", "compose"))
    monkeypatch.setattr("orchestrate.engine.compose_cli.subprocess.run", hang)
    with pytest.raises(ComposeError, match="no answer in 60 s"):
        ComposeProject("p", tmp_path / "compose.json").down()


def test_a_ctrl_c_during_the_teardown_does_not_stop_it(monkeypatch):
    from orchestrate.launch import teardown as teardown_module

    class InterruptedCompose:
        project_name = "p"
        attempts = 0

        def down(self):
            self.attempts += 1
            if self.attempts == 1:
                raise KeyboardInterrupt  # the user presses Ctrl-C while the project is removed

    monkeypatch.setattr(teardown_module, "TEARDOWN_BACKOFF", __import__("tenacity").wait_none())
    compose, said = InterruptedCompose(), []
    assert teardown_module.teardown(compose, said.append) == ""  # removed all the same
    assert compose.attempts == 2 and said == ["teardown in progress; please wait"]


def test_a_teardown_against_a_hung_engine_gives_up_in_bounded_time(monkeypatch):
    from orchestrate.launch import teardown as teardown_module

    class HungCompose:
        project_name = "p"
        attempts = 0

        def down(self):
            self.attempts += 1
            raise ComposeError(["docker", "compose", "down"], -1, "no answer in 60 s")

    monkeypatch.setattr(teardown_module, "TEARDOWN_BACKOFF", __import__("tenacity").wait_none())
    monkeypatch.setattr(teardown_module, "TEARDOWN_GIVE_UP_S", 0.0)  # as if each attempt had hung its minute
    compose, said = HungCompose(), []
    assert teardown_module.teardown(compose, said.append) == "could not remove project p; run: docker compose -p p down -v"
    assert compose.attempts == 1  # not the 5 attempts an engine that answers is given


def test_a_second_interrupt_while_the_record_is_written_does_not_skip_the_teardown(tmp_path, monkeypatch):
    from orchestrate.launch import teardown as teardown_module
    from orchestrate.outcome.model import RunResult, Timings

    calls = []
    real_write = teardown_module.write_outcome
    interrupted = []

    def write_once_interrupted(result):
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        real_write(result)

    class Compose:
        project_name = "p"

        def down(self):
            calls.append("down")

    monkeypatch.setattr(teardown_module, "write_outcome", write_once_interrupted)
    result = RunResult("r", tmp_path, [], Timings())
    teardown_module.tear_down_and_record(result, Compose(), print, time.monotonic)
    assert calls == ["down"] and interrupted == [True]
    assert json.loads((tmp_path / "outcome.json").read_text())["run_id"] == "r"


# The GPU lease and the host lock -----------------------------------------------------------------

def test_two_gpu_runs_started_at_once_never_take_the_same_gpus(make_run, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    client = engine(FakeDockerClient(), node0=[Script(hang=True)], node1=[Script(hang=True)])
    client.gpus = ("0", "1")
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: client.gpus)
    jobs = [make_run(f"gpu-{i}", client=client, nodes=2, gpus_per_node=1, backend="nccl", detach=True)
            for i in range(2)]
    outcomes: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def start(job):
        barrier.wait()
        try:
            outcomes[job.run_id] = job.start()
        except UsageError as exc:
            outcomes[job.run_id] = exc

    threads = [threading.Thread(target=start, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    refused = [o for o in outcomes.values() if isinstance(o, UsageError)]
    started = [o for o in outcomes.values() if not isinstance(o, UsageError)]
    assert len(refused) == 1 and len(started) == 1, outcomes
    assert "2 GPU(s) wanted but only 0 of 2 are free: GPUs 0,1 are held by run" in str(refused[0])
    for job in jobs:
        job.close()


def test_a_held_host_lock_says_for_whom_it_waits_and_gives_up_naming_the_holder(tmp_path):
    from orchestrate.engine.locks import host_lock

    said: list[str] = []
    with host_lock("gpu-lease", "run first", directory=tmp_path):
        with pytest.raises(LockTimeoutError, match="run first has held the gpu-lease lock for over 0 s"):
            with host_lock("gpu-lease", "run second", directory=tmp_path, timeout_s=0.2, say=said.append):
                pass
    assert said == ["waiting for run first (gpu-lease), at most 0 s"]
    with host_lock("gpu-lease", "run third", directory=tmp_path, timeout_s=0.2):  # free again
        assert (tmp_path / "gpu-lease.holder").read_text() == "run third\n"


def test_the_lock_directory_is_the_users_own(tmp_path, monkeypatch):
    from orchestrate.engine.locks import lock_dir

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    directory = lock_dir()
    assert directory == tmp_path / "ddp-compose" and stat.S_IMODE(directory.stat().st_mode) == 0o700


# Builds -------------------------------------------------------------------------------------------

def test_a_build_removes_the_stage_images_it_made_and_no_one_elses(tmp_path):
    from orchestrate.engine.images import build_context, docker_build
    from tests.fakes import FakeImage

    client = FakeDockerClient()
    mine, cached, others = (FakeImage(name, {}) for name in ("mine", "cached", "others"))
    mine.id, cached.id, others.id = ("sha256:" + c * 64 for c in "abc")
    client.images.dangling = [mine, cached, others]
    client.build_output = [{"stream": "Step 1/4 : FROM base AS stage"}, {"stream": " ---> Using cache\n"},
                           {"stream": f" ---> {'b' * 12}\n"}, {"stream": "Step 2/4 : RUN make"},
                           {"stream": " ---> Running in 0123456789ab\n"}, {"stream": f" ---> {'a' * 12}\n"},
                           {"stream": "Successfully built ffffffffffff\n"}]
    docker_build(client, build_context({"Dockerfile": b"FROM base\n"}), "t:1", buildargs={},
                 progress=lambda _: None)
    removed = [c[1] for c in client.calls if c[0] == "images.remove"]
    assert removed == [mine.id]  # not the cached one, not the one another build left


def test_a_build_removes_its_stage_images_while_another_client_removes_its_own(tmp_path):
    from orchestrate.engine.images import build_context, docker_build
    from tests.fakes import FakeImage

    client = FakeDockerClient()
    others, mine = (FakeImage(name, {}) for name in ("others", "mine"))
    others.id, mine.id = ("sha256:" + c * 64 for c in "ca")
    client.images.dangling = [others, mine]
    client.images.vanishing = [others]  # another build's stage, removed as this one lists them
    client.build_output = [{"stream": "Step 1/2 : FROM base AS stage"}, {"stream": " ---> Running in 0123456789ab\n"},
                           {"stream": f" ---> {'a' * 12}\n"}, {"stream": "Successfully built ffffffffffff\n"}]
    docker_build(client, build_context({"Dockerfile": b"FROM base\n"}), "t:1", buildargs={},
                 progress=lambda _: None)
    assert client.images.dangling == [others]  # its own went; the other client's was not its to remove


def test_an_import_the_engine_refuses_part_way_ends_the_tar_and_says_why(tmp_path):
    from orchestrate.engine.images import import_rootfs

    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "big").write_bytes(b"\0" * (4 << 20))
    client = FakeDockerClient()
    client.import_fails_after = 65536
    started = time.monotonic()
    with pytest.raises(ImageUnavailableError, match="importing base:1 failed: no space left on device"):
        import_rootfs(client, rootfs, "base:1")
    assert time.monotonic() - started < 30  # the tar did not wait on a reader that was gone
    client.import_fails_after = None
    import_rootfs(client, rootfs, "base:1")
    assert "base:1" in client.images.by_name

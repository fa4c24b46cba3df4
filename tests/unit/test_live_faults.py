"""The live-fault API (``fault RUN``'s library side, :class:`~orchestrate.faults.live.LiveFaults`)
against the fake engine: what it refuses before doing anything, what it does to each node, what
it holds and undoes, the notes it leaves for the run's launcher, and what it says."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import docker.errors
import pytest

from orchestrate.config.fault_spec import FaultAction, parse_fault
from orchestrate.config.link import parse_link
from orchestrate.errors import EngineError, NodeLookupError, UsageError
from orchestrate.faults.live import LiveFaults
from orchestrate.faults.live_notes import LiveFaultReader
from orchestrate.faults.storage import armed
from orchestrate.node import rank_signal
from orchestrate.node.storage_faults import EVENTS_FILE
from orchestrate.plan.layout import PROGRESS_SUBDIR
from tests.fakes import FakeDockerClient, FakeNetwork, conflict

PROJECT = "ddp-live"
FLUSH = ("ip", "route", "flush", "type", "blackhole")  # a heal, on each node


class Run:
    """A run of ``nodes`` live nodes on the fake engine, and a LiveFaults for it (``net_admin``:
    its nodes have NET_ADMIN, as a run started with --link or a network fault has)."""

    def __init__(self, tmp_path: Path, nodes: tuple[str, ...] = ("node0", "node1"), *, with_dir: bool = True,
                 link: Optional[str] = None, store: bool = False, net_admin: bool = True) -> None:
        self.client = FakeDockerClient()
        labels = {"com.docker.compose.project": PROJECT, "com.docker.compose.network": "ddp"}
        self.client.networks_by_name[f"{PROJECT}_ddp"] = FakeNetwork(self.client, f"{PROJECT}_ddp", labels)
        self.nodes = {n: self.client.running(f"{PROJECT}-{n}-1", labels={"com.docker.compose.project": PROJECT})
                      for n in nodes}
        for index, container in enumerate(self.nodes.values()):
            container.networks[f"{PROJECT}_ddp"]["IPAddress"] = f"10.0.0.{index + 2}"
            if net_admin:
                container.service["cap_add"] = ["NET_ADMIN"]
        self.run_dir = tmp_path / "run"
        (self.run_dir / PROGRESS_SUBDIR).mkdir(parents=True)
        self.said: list[str] = []
        self.store = self.client.running(f"{PROJECT}-rdzv-store-1", labels={"com.docker.compose.project": PROJECT}) \
            if store else None
        self.faults = LiveFaults(self.client, "R1", PROJECT, dict(self.nodes), stop_grace_s=2.5, cpus_per_node=1.5,
                                 link=parse_link(link) if link else None, run_dir=self.run_dir if with_dir else None,
                                 store=self.store, say=self.said.append)
        self.reader = LiveFaultReader(self.run_dir)

    def notes(self) -> list[tuple[str, str, str, str]]:
        """The notes written since the last call: (spec, node, phase, error)."""
        return [(str(n.spec), n.node, n.phase, n.error) for n in self.reader.take()]

    def calls(self, kind: str) -> list[tuple]:
        return [c[1:] for c in self.client.calls if c[0] == kind]

    def execs(self, node: str) -> list[tuple[str, ...]]:
        return [c[1] for c in self.calls("exec_create") if c[0] == f"{PROJECT}-{node}-1"]


class Clock:
    """A sleep that only counts (the holds' waits), and the clock it moves (what a hold reads)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds

    def time(self) -> float:
        return self.now

    def stamped(self, said: list[str]):
        """A ``say`` that puts each line in ``said`` with the seconds into the test it came at."""
        return lambda line: said.append(f"{self.now - 1000.0:g} s: {line}")


def test_a_pause_with_an_end_is_held_its_duration_from_now_then_undone_and_each_step_noted(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    spec = parse_fault("pause:node1@t=0..25")  # held 25 s from now
    run.faults.check([spec])
    assert run.faults.inject(spec) == "node1"
    assert run.nodes["node1"].status == "paused" and run.nodes["node0"].status == "running"
    assert run.notes() == [("pause:node1@t=0..25", "node1", "doing", ""), ("pause:node1@t=0..25", "node1", "done", "")]
    assert run.said == ["injected pause into node1 of run R1"]
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [1.0] * 25  # its nodes looked for once a second, and undone after 25 s
    assert run.nodes["node1"].status == "running"
    assert run.notes() == [("pause:node1@t=0..25", "node1", "ended", "")]
    assert run.said[1:] == ["holding pause:node1@t=0..25 for up to 25 s; Ctrl-C ends them now",
                            "ended pause:node1@t=0..25 on node1 of run R1"]
    ids = {json.loads(line)["id"] for line in (run.run_dir / "live-faults.jsonl").read_text().splitlines()}
    assert len(ids) == 1  # one fault's notes share its id


@pytest.mark.parametrize("text, said", [
    ("pause:node1@step=3", "pause:node1@step=3: a start at a step needs the run's launcher (give it to run --fault);"
                           " here a fault is injected now: give pause:node1, or an end in seconds: pause:node1@t=0..30"),
    ("kill:node1@step=+2", "kill:node1@step=+2: a start at a step needs the run's launcher (give it to run --fault);"
                           " here a fault is injected now: give kill:node1"),
    ("pause:node1@t=5..30", "pause:node1@t=5..30: a fault is injected now, not at t=5 (a start needs the run's"
                            " launcher: give it to run --fault); give pause:node1@t=0..25 to hold it 25 s"),
    ("kill:node0@t=5", "kill:node0@t=5: a fault is injected now, not at t=5 (a start needs the run's launcher: give"
                       " it to run --fault); give kill:node0"),
    ("slow:node1,cpus=0.5@t=0..3", None)])
def test_a_start_is_refused_before_anything_is_done_as_fault_run_injects_now(tmp_path, text, said):
    # A start was ignored without a word, then named everywhere as if waited for ("injected fault
    # pause:node1@step=3" in stacks, stop and the summary, of a pause done at step 40).
    run = Run(tmp_path)
    spec = parse_fault(text)
    if said is None:
        run.faults.check([spec])
        return
    with pytest.raises(UsageError) as refused:
        run.faults.check([parse_fault("pause:node0"), spec])
    assert str(refused.value) == said
    assert run.notes() == [] and all(node.status == "running" for node in run.nodes.values())


@pytest.mark.parametrize("text, said", [
    ("degrade:node1,rate=1gbit@t=0..30", "degrade:node1,rate=1gbit@t=0..30: a degraded link's rate must be below the"
                                         " run's --link rate=50mbit (rate=1gbit would leave node1's link as fast, or"
                                         " make it faster); e.g. rate=5mbit"),
    ("slow:node1,cpus=2", "slow:node1,cpus=2: a slow node's cpus must be below its --cpus-per-node 1.5 (cpus=2 would"
                          " leave node1 as fast, or make it faster); e.g. cpus=0.75"),
])
def test_fault_run_refuses_a_fault_that_would_leave_its_node_no_slower_than_the_run_made_it(tmp_path, text, said):
    run = Run(tmp_path, link="rate=50mbit")  # and --cpus-per-node 1.5, as the run recorded them
    with pytest.raises(UsageError) as refused:
        run.faults.check([parse_fault("pause:node0"), parse_fault(text)])
    assert str(refused.value) == said
    assert run.notes() == [] and all(node.status == "running" for node in run.nodes.values())
    run.faults.check([parse_fault("degrade:node1,rate=10mbit@t=0..30"), parse_fault("slow:node1,cpus=1")])


def test_fault_run_compares_a_slow_in_a_run_without_a_cpu_limit_with_the_engines_cpus(tmp_path):
    run = Run(tmp_path)
    run.faults.cpus_per_node = None
    with pytest.raises(UsageError) as refused:
        run.faults.check([parse_fault("slow:node1,cpus=2")])
    assert str(refused.value) == ("slow:node1,cpus=2: a slow node's cpus must be below the engine's 2 CPUs, all a node"
                                  " of run R1 (no --cpus-per-node) has (cpus=2 would leave node1 as fast, or make it"
                                  " faster); e.g. cpus=1")
    run.faults.check([parse_fault("slow:node1,cpus=1.5")])


def test_held_faults_end_shortest_first_each_at_its_own_time_and_a_slow_node_gets_the_runs_quota_back(
        tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    pause, slow = parse_fault("pause:node0@t=0..5"), parse_fault("slow:node1,cpus=0.2@t=0..2")
    for spec in (pause, slow):
        run.faults.inject(spec)
    assert run.nodes["node1"].resources["cpu_quota"] == 20_000
    run.faults.say = clock.stamped(run.said)
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert [line for line in run.said if " ended " in line] == [  # each end counts from the start of the hold
        "2 s: ended slow:node1,cpus=0.2@t=0..2 on node1 of run R1", "5 s: ended pause:node0@t=0..5 on node0 of run R1"]
    assert [c[0] for c in run.client.calls if c[0] in ("update", "unpause")] == ["update", "update", "unpause"]
    assert run.nodes["node1"].resources["cpu_quota"] == 150_000  # the run's --cpus-per-node 1.5
    assert run.said[2] == ("0 s: holding slow:node1,cpus=0.2@t=0..2, pause:node0@t=0..5 for up to 5 s; Ctrl-C ends"
                           " them now")
    assert [n[:3] for n in run.notes() if n[2] == "ended"] == [("slow:node1,cpus=0.2@t=0..2", "node1", "ended"),
                                                               ("pause:node0@t=0..5", "node0", "ended")]


def test_a_store_cut_off_for_a_while_is_its_containers_and_connected_again_under_its_hosts_name(tmp_path):
    run = Run(tmp_path, store=True)
    clock = Clock()
    spec = parse_fault("disconnect:store@t=0..4")
    run.faults.check([spec])
    assert run.faults.inject(spec) == "store"
    assert run.calls("disconnect") == [(f"{PROJECT}-rdzv-store-1", f"{PROJECT}_ddp")]
    assert run.said == ["injected disconnect into the rendezvous store of run R1"]
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert run.calls("connect") == [(f"{PROJECT}-rdzv-store-1", f"{PROJECT}_ddp", ("rdzv-store",))]
    assert run.notes() == [(str(spec), "store", "doing", ""), (str(spec), "store", "done", ""),
                           (str(spec), "store", "ended", "")]
    assert run.said[-1] == f"ended {spec} on the rendezvous store of run R1"
    assert all(node.status == "running" for node in run.nodes.values())


def test_a_killed_store_is_the_stores_container_and_no_node(tmp_path):
    run = Run(tmp_path, store=True)
    run.faults.check([parse_fault("kill:store")])
    run.faults.inject(parse_fault("kill:store"))
    assert run.store.status == "exited" and [n.status for n in run.nodes.values()] == ["running", "running"]


def test_a_fault_to_a_store_the_run_has_not_or_that_ended_is_refused_before_anything_is_done(tmp_path):
    run = Run(tmp_path)
    with pytest.raises(UsageError) as refused:
        run.faults.check([parse_fault("pause:node1"), parse_fault("kill:store")])
    assert str(refused.value) == ("kill:store: run R1 has no rendezvous store of its own (--rdzv c10d --rdzv-store"
                                  " container); node0's torchrun agent holds it, if any: kill:node0 takes it with the"
                                  " node")
    stored = Run(tmp_path / "stored", store=True)
    stored.store.kill()
    with pytest.raises(UsageError) as refused:
        stored.faults.check([parse_fault("pause:store@t=0..5")])
    assert str(refused.value) == "pause:store@t=0..5: run R1's rendezvous store is not running (exited)"
    assert run.client.calls.count(("pause", f"{PROJECT}-node1-1")) == 0 and run.notes() == []


def test_a_fault_without_an_end_is_not_held(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("kill:node1"))
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert run.nodes["node1"].status == "exited" and run.nodes["node1"].exit_code == 137
    assert clock.slept == [] and run.said == ["injected kill into node1 of run R1"]


def test_a_lasting_fault_without_an_end_is_said_to_hold_for_the_rest_of_the_run(tmp_path):
    # a trial's `fault RUN hang-rank:1` said only that it was injected: not that nothing ends it; then a
    # pause was said to be undone by no command, where a restart of its node ends it (until 2026-12-07)
    run = Run(tmp_path)
    clock = Clock()
    run.client.command_outputs[(f"{PROJECT}-node0-1", "python3")] = (rank_signal.NOT_HERE, b"")
    run.faults.inject(parse_fault("hang-rank:1"))
    run.faults.inject(parse_fault("pause:node0"))
    run.faults.inject(parse_fault("disk-full:node1"))
    run.faults.inject(parse_fault("slow:node1,cpus=0.5"))
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [] and run.said == [
        "injected hang-rank into rank 1 on node1 of run R1; it holds for the rest of the run, or until node1"
        " restarts (`fault R1 restart:node1` ends it, starting its workers anew): no command of this tool undoes it"
        " in place (`fault R1 hang-rank:1@t=0..SECONDS` holds one for SECONDS, then undoes it)",
        "injected pause into node0 of run R1; it holds for the rest of the run, or until node0 restarts (`fault R1"
        " restart:node0` ends it, starting its workers anew): no command of this tool undoes it in place (`fault R1"
        " pause:node0@t=0..SECONDS` holds one for SECONDS, then undoes it)",
        "armed disk-full:node1 on node1's workers of run R1, files '*' of the work directory; it holds for the rest"
        " of the run: no command of this tool undoes it, nor does a restart of node1 (`fault R1"
        " disk-full:node1@t=0..SECONDS` holds one for SECONDS, then undoes it)",
        "injected slow into node1 of run R1; it holds for the rest of the run: no command of this tool undoes it,"
        " nor does a restart of node1 (`fault R1 slow:node1,cpus=0.5@t=0..SECONDS` holds one for SECONDS, then"
        " undoes it)"]
    stored = Run(tmp_path / "stored", store=True)  # no fault restarts the store: none is offered
    stored.faults.inject(parse_fault("pause:store"))
    assert stored.said == ["injected pause into the rendezvous store of run R1; it holds for the rest of the run: no"
                           " command of this tool undoes it (`fault R1 pause:store@t=0..SECONDS` holds one for"
                           " SECONDS, then undoes it)"]


@pytest.mark.parametrize("action", [a for a in FaultAction if a.lasting])
def test_what_a_restart_does_to_each_lasting_fault_is_known_where_it_is_said(action):
    """Measured on Docker 20.10 (`docker restart -t 0`, as a restart fault does): a paused container
    restarts unpaused, its tc qdisc and iptables rules are gone (its node's start shapes its link
    again), a stopped worker dies with its node; a `docker update` CPU quota and a network left stay.
    A storage fault is armed in the run's directory, which the new workers read again."""
    ends = {FaultAction.PAUSE: True, FaultAction.HANG_RANK: True, FaultAction.DEGRADE: True, FaultAction.LOSSY: True,
            FaultAction.SLOW: False, FaultAction.DISCONNECT: False, FaultAction.DISK_FULL: False,
            FaultAction.PARTITION: None}
    assert action.restart_ends is ends[action]


def test_a_preempt_is_the_engines_stop_with_the_runs_stop_grace(tmp_path):
    run = Run(tmp_path)
    run.nodes["node1"].script.ignore_sigterm = True  # so the engine waits the grace, then kills
    assert run.faults.inject(parse_fault("preempt:node1")) == "node1"
    assert run.nodes["node1"].stop_timeouts == [3]  # a grace of 2.5 s, in the engine's whole seconds
    assert run.nodes["node1"].exit_code == 137 and run.nodes["node0"].status == "running"
    assert run.notes() == [("preempt:node1", "node1", "doing", ""), ("preempt:node1", "node1", "done", "")]


def test_a_fault_the_engine_refuses_is_noted_as_failed_and_raised_as_one_line_and_nothing_is_held(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.nodes["node1"].exit(1)  # it ended: the engine refuses to pause it (409)
    with pytest.raises(EngineError, match=r"^cannot pause node1 of run R1: .*is not running"):
        run.faults.inject(parse_fault("pause:node1@t=0..10"))
    [doing, failed] = run.notes()
    assert doing[2] == "doing" and failed[:3] == ("pause:node1@t=0..10", "node1", "failed")
    assert "is not running" in failed[3]
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [] and run.calls("unpause") == []


def test_an_end_the_engine_refuses_is_said_and_noted_and_its_hold_is_over(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("pause:node1@t=0..10"))
    run.client.failures["unpause"] = docker.errors.APIError("the engine went away")
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert run.said[-1] == "could not end pause:node1@t=0..10 on node1: the engine went away"
    assert run.notes()[-1] == ("pause:node1@t=0..10", "node1", "ended", "the engine went away")
    run.faults.end_all()  # nothing is held any more: not tried again
    assert len(run.calls("unpause")) == 1


def test_a_paused_node_stopped_during_the_hold_has_nothing_left_to_undo_and_says_so_not_the_engines_refusal(
        tmp_path):
    """`stop RUN` unpauses a paused node before its SIGTERM; the hold's unpause then meets a
    stopped container, which the engine refuses (409): nothing failed."""
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("pause:node1@t=0..10"))
    run.notes()

    def stopped_on_request(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now - 1000.0 == 3.0:
            run.nodes["node1"].unpause()
            run.nodes["node1"].stop(timeout=1)
    run.faults.hold(sleep=stopped_on_request, clock=clock.time)
    assert run.said[-1] == "pause:node1@t=0..10: node1 of run R1 stopped meanwhile; nothing left to undo", run.said
    assert run.notes() == [("pause:node1@t=0..10", "node1", "ended", "node1 of run R1 stopped meanwhile")]
    assert len(run.calls("unpause")) == 2  # stop's, and the hold's, which the engine refused


def test_end_all_undoes_every_fault_still_held_and_disarms_the_torn_writes_still_to_come(tmp_path):
    run = Run(tmp_path)
    progress = run.run_dir / PROGRESS_SUBDIR
    for text in ("pause:node0@t=0..60", "disconnect:node1@t=0..60", "torn-write:node1"):
        run.faults.inject(parse_fault(text))
    assert [f["kind"] for f in armed(progress)] == ["torn-write"]
    assert f"{PROJECT}_ddp" not in run.nodes["node1"].networks
    run.faults.end_all()  # as an interrupt ends them
    assert run.nodes["node0"].status == "running"
    assert run.calls("connect") == [(f"{PROJECT}-node1-1", f"{PROJECT}_ddp", ("node1",))]  # under its own name
    assert armed(progress) == []
    assert run.said[-3:] == ["ended pause:node0@t=0..60 on node0 of run R1",
                             "ended disconnect:node1@t=0..60 on node1 of run R1",
                             "disarmed torn-write:node1: no write came"]
    assert sorted(n[:3] for n in run.notes() if n[2] == "ended") == [
        ("disconnect:node1@t=0..60", "node1", "ended"), ("pause:node0@t=0..60", "node0", "ended"),
        ("torn-write:node1", "node1", "ended")]


def test_a_full_disk_is_armed_for_the_nodes_workers_held_then_disarmed(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    progress = run.run_dir / PROGRESS_SUBDIR
    spec = parse_fault("disk-full:node1,path=ckpt/*@t=0..8")
    assert run.faults.inject(spec) == "node1"
    [listed] = armed(progress)
    assert (listed["kind"], listed["node"], listed["path"]) == ("disk-full", "node1", "ckpt/*")
    assert listed["spec"] == str(spec)
    assert run.said == ["armed disk-full:node1,path=ckpt/*@t=0..8 on node1's workers of run R1, files 'ckpt/*' of the"
                        " work directory"]
    assert run.client.calls == []  # the engine is not asked: the workers meet it
    [done] = run.reader.take()  # its key goes with it: a follower knows the workers' events of it
    assert (done.phase, done.storage_key) == ("done", listed["key"])
    run.reader = LiveFaultReader(run.run_dir)
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [1.0] * 8 and armed(progress) == []
    assert run.notes() == [(str(spec), "node1", "done", ""), (str(spec), "node1", "ended", "")]
    assert run.said[-1] == ("ended disk-full:node1,path=ckpt/*@t=0..8 on node1 of run R1: no write of node1's workers"
                            " reached it (storage faults reach the writes of Python's open() and torch.save, not"
                            " os.open() and os.write(), memory maps, or a native library's own files)")


def test_a_full_disk_says_at_its_end_the_files_whose_writes_it_failed_and_no_other_commands(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    spec = parse_fault("disk-full:node1@t=0..3")
    run.faults.inject(spec)
    [listed] = armed(run.run_dir / PROGRESS_SUBDIR)

    def workers_write(seconds: float) -> None:  # while it is held, rank 1 saves four files, and again
        clock.sleep(seconds)
        if len(clock.slept) == 2:
            for name in ("a.pt", "b.pt", "a.pt", "c.pt", "d.pt"):
                write_storage_event(run, kind="disk-full", key=listed["key"], node="node1", file=name, rank=1)
            write_storage_event(run, kind="disk-full", key="s-other", node="node1", file="e.pt", rank=1)

    run.faults.hold(sleep=workers_write, clock=clock.time)
    assert run.said[-1] == ("ended disk-full:node1@t=0..3 on node1 of run R1: writes to 4 file(s) failed with ENOSPC:"
                            " a.pt, b.pt, c.pt and 1 more")


def test_a_full_disk_held_after_a_torn_write_counts_the_writes_it_failed_while_the_tear_was_awaited(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("torn-write:node1"))
    run.faults.inject(parse_fault("disk-full:node0@t=0..3"))
    torn, full = armed(run.run_dir / PROGRESS_SUBDIR)

    def workers_write(seconds: float) -> None:  # node0's save fails while node1's next write is awaited
        clock.sleep(seconds)
        if len(clock.slept) == 1:
            write_storage_event(run, kind="disk-full", key=full["key"], node="node0", file="opt.pt", rank=0)
            write_storage_event(run, kind="torn-write", key=torn["key"], node="node1", file="m.pt", rank=1, byte=1,
                                size=2)

    run.faults.hold(sleep=workers_write, clock=clock.time)
    assert "torn-write:node1: rank 1's write of m.pt was cut at byte 1 of 2; killing node1" in run.said
    assert run.said[-1] == ("ended disk-full:node0@t=0..3 on node0 of run R1: writes to 1 file(s) failed with ENOSPC:"
                            " opt.pt")


def write_storage_event(run: Run, **fields) -> None:
    with open(run.run_dir / PROGRESS_SUBDIR / EVENTS_FILE, "a") as handle:
        handle.write(json.dumps(fields) + "\n")


def test_a_torn_write_waits_for_the_nodes_next_write_then_kills_the_node_and_passes_other_events(
        tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    spec = parse_fault("torn-write:node1")
    run.faults.inject(spec)
    [listed] = armed(run.run_dir / PROGRESS_SUBDIR)

    def worker_writes(seconds: float) -> None:  # while the launcher waits, the node's worker saves
        clock.sleep(seconds)
        if len(clock.slept) == 2:  # not at once: the wait polls
            write_storage_event(run, kind="disk-full", key="s-other", node="node0", file="a.pt", rank=0)
            write_storage_event(run, kind="torn-write", key=listed["key"], node="node1", file="ckpt.pt", rank=1,
                                byte=100, size=4096)

    run.faults.hold(sleep=worker_writes, clock=clock.time)
    assert clock.slept == [0.2, 0.2]
    assert run.nodes["node1"].status == "exited" and run.nodes["node0"].status == "running"
    assert armed(run.run_dir / PROGRESS_SUBDIR) == []
    assert run.said[1:] == ["waiting for the next write on node1; Ctrl-C disarms",
                            "torn-write:node1: rank 1's write of ckpt.pt was cut at byte 100 of 4096; killing node1"]


def test_a_torn_write_whose_node_ended_first_is_disarmed_saying_no_write_was_cut(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("torn-write:node1"))
    run.nodes["node1"].exit(0)
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [] and armed(run.run_dir / PROGRESS_SUBDIR) == []
    assert run.said[-1] == "disarmed torn-write:node1: node1 is no longer running, and no write of it was cut"
    assert run.notes()[-1] == ("torn-write:node1", "node1", "ended", "")


def test_a_torn_write_whose_node_its_launcher_killed_before_this_looked_is_said_as_cut_not_missed(tmp_path):
    """`attach` following the run kills the node the moment its worker cut the write: `fault`,
    polling, then finds the node ended, and the cut already written."""
    run = Run(tmp_path)
    clock = Clock()
    spec = parse_fault("torn-write:node1")
    run.faults.inject(spec)
    [listed] = armed(run.run_dir / PROGRESS_SUBDIR)

    def cut_and_killed_meanwhile(seconds: float) -> None:
        clock.sleep(seconds)
        write_storage_event(run, kind="torn-write", key=listed["key"], node="node1", file="ckpt.pt", rank=1,
                            byte=100, size=4096)
        run.nodes["node1"].kill()

    run.faults.hold(sleep=cut_and_killed_meanwhile, clock=clock.time)
    assert run.said[2] == "torn-write:node1: rank 1's write of ckpt.pt was cut at byte 100 of 4096; killing node1"
    assert not any("no write of it was cut" in line for line in run.said), run.said


def test_a_torn_node_the_engine_will_not_kill_is_said(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("torn-write:node1"))
    [listed] = armed(run.run_dir / PROGRESS_SUBDIR)
    write_storage_event(run, kind="torn-write", key=listed["key"], node="node1", file="m.pt", rank=1, byte=1, size=2)
    run.client.failures["kill"] = conflict("Container ddp-live-node1-1 is not running")
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert run.said[-1] == "node1 was not killed here: Container ddp-live-node1-1 is not running"


def test_a_hung_rank_is_found_on_its_node_stopped_as_root_and_continued_at_its_end(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.client.command_outputs[(f"{PROJECT}-node0-1", "python3")] = (rank_signal.NOT_HERE, b"")
    assert run.faults.inject(parse_fault("hang-rank:1@t=0..4")) == "node1"
    assert run.said == ["injected hang-rank into rank 1 on node1 of run R1"]
    assert run.notes() == [("hang-rank:1@t=0..4", "node1", "done", "")]  # a rank's node is known only once done
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert [cmd[-2:] for cmd in run.execs("node1")] == [("1", "SIGSTOP"), ("1", "SIGCONT")]
    assert [cmd[-2:] for cmd in run.execs("node0")] == [("1", "SIGSTOP")]  # looked for there first, not ended there
    assert run.client.api.ran_as(f"{PROJECT}-node1-1", "python3") == ["0:0", "0:0"]  # its workers may be another user's


def test_a_partition_cuts_each_group_off_the_other_as_root_and_its_end_heals_both(tmp_path):
    run = Run(tmp_path, ("node0", "node1", "node2"))
    clock = Clock()
    spec = parse_fault("partition:node0|node1,node2@t=0..3")
    assert run.faults.inject(spec) == "node0"
    assert run.execs("node0") == [("ip", "route", "add", "blackhole", "10.0.0.3/32"),
                                  ("ip", "route", "add", "blackhole", "10.0.0.4/32")]
    assert run.execs("node2") == [("ip", "route", "add", "blackhole", "10.0.0.2/32")]
    assert run.said == ["injected partition into node0|node1,node2 of run R1"]
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert [run.execs(n)[-1] for n in ("node0", "node1", "node2")] == [FLUSH, FLUSH, FLUSH]
    assert set(run.client.api.ran_as(f"{PROJECT}-node1-1", "ip")) == {"0:0"}


def test_a_split_a_node_refuses_is_undone_where_routes_were_added_and_the_refusal_raised(tmp_path):
    run = Run(tmp_path, ("node0", "node1", "node2"))
    run.client.command_outputs[(f"{PROJECT}-node1-1", "ip")] = (2, b"RTNETLINK answers: Operation not permitted\n")
    with pytest.raises(EngineError) as refused:
        run.faults.inject(parse_fault("partition:node0,node2|node1"))
    assert str(refused.value) == ("cannot split the network at ddp-live-node1-1 (ip route add blackhole 10.0.0.2/32):"
                                  " RTNETLINK answers: Operation not permitted (the run's nodes lack NET_ADMIN: only"
                                  " runs started with --link or a degrade, lossy or partition fault have it)")
    assert run.execs("node0")[-1] == FLUSH and run.execs("node2")[-1] == FLUSH  # their routes undone
    assert FLUSH not in run.execs("node1")  # it refused its first route: it holds none
    assert run.notes()[-1][2:] == ("failed", str(refused.value))


def test_a_split_whose_undoing_fails_too_says_both(tmp_path):
    run = Run(tmp_path, ("node0", "node1"))
    run.client.command_outputs[(f"{PROJECT}-node0-1", "ip")] = (  # node0 takes its route, then will not flush it
        lambda cmd: (0, b"") if cmd[2] == "add" else (1, b"RTNETLINK answers: Busy\n"))
    run.client.command_outputs[(f"{PROJECT}-node1-1", "ip")] = (2, b"RTNETLINK answers: File exists\n")
    with pytest.raises(EngineError, match=r"^cannot split the network at ddp-live-node1-1 \(ip route add blackhole"
                                          r" 10.0.0.2/32\): RTNETLINK answers: File exists; undoing the routes"
                                          r" already added failed too: cannot heal the network at ddp-live-node0-1"
                                          r" \(ip route flush type blackhole\): RTNETLINK answers: Busy$"):
        run.faults.inject(parse_fault("partition:node0|node1"))


def test_a_heal_a_node_refuses_still_heals_the_others_then_says_the_refusal(tmp_path):
    run = Run(tmp_path, ("node0", "node1", "node2"))
    clock = Clock()
    run.faults.inject(parse_fault("partition:node0|node1,node2@t=0..1"))
    run.client.command_outputs[(f"{PROJECT}-node0-1", "ip")] = (1, b"RTNETLINK answers: Busy\n")
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert run.execs("node1")[-1] == FLUSH and run.execs("node2")[-1] == FLUSH
    assert run.said[-1] == ("could not end partition:node0|node1,node2@t=0..1 on node0: cannot heal the network at"
                            " ddp-live-node0-1 (ip route flush type blackhole): RTNETLINK answers: Busy")


def test_a_degrade_ends_by_restoring_the_runs_link_and_without_netem_its_rate_alone(tmp_path):
    run = Run(tmp_path, link="rate=1gbit,loss=1%")
    clock = Clock()
    run.client.command_outputs[(f"{PROJECT}-node1-1", "tc")] = (  # this kernel has no netem: tc refuses that alone
        lambda cmd: (2, b"Error: Specified qdisc kind is unknown.\n") if "netem" in cmd else (0, b""))
    run.faults.inject(parse_fault("degrade:node1,rate=10mbit@t=0..1"))
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert run.execs("node1") == [
        # the degrade: netem kept as the root, refused here, so the rate alone in the root
        ("tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "netem", "loss", "1%"),
        ("tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "10mbit", "burst", "32768", "latency",
         "100ms"),
        ("tc", "qdisc", "del", "dev", "eth0", "root"),
        ("tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem", "loss", "1%"),
        ("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "1gbit", "burst", "500000", "latency",
         "100ms")]  # the link's rate alone: its loss is iptables' here
    assert run.said[-1] == "ended degrade:node1,rate=10mbit@t=0..1 on node1 of run R1"


@pytest.mark.parametrize("text, message", [
    ("slow:node1,cpus=0.5@step=3..9", "slow:node1,cpus=0.5@step=3..9: a start at a step needs the run's launcher"
                                      " (give it to run --fault); here a fault is injected now: give"
                                      " slow:node1,cpus=0.5, or an end in seconds: slow:node1,cpus=0.5@t=0..30"),
    ("partition:node0|node7", "no running node7 in run R1 (see `python -m orchestrate ps`)"),
    ("kill:node5", "no running node5 in run R1 (see `python -m orchestrate ps`)"),
])
def test_what_cannot_be_done_now_is_refused_before_anything_is_done(tmp_path, text, message):
    run = Run(tmp_path)
    with pytest.raises(UsageError) as refused:
        run.faults.check([parse_fault("kill:node0"), parse_fault(text)])
    assert str(refused.value) == message
    assert run.client.calls == [] and run.notes() == []



def test_a_network_fault_in_a_run_whose_nodes_lack_net_admin_is_refused_in_one_line_saying_what_to_do(tmp_path):
    """A note (session 112) left alone: `fault RUN lossy:node1,p=30%` on a run started without
    --link ran iptables in the node all the same, and said its refusal: the command, iptables'
    "Could not fetch rule set generation id: Permission denied (you must be root)", then a hint.
    The nodes' capabilities are the engine's to say: such a fault is refused before anything is
    done, in one line saying why and what to do, exit 2."""
    run = Run(tmp_path, ("node0", "node1", "node2"), net_admin=False)
    with pytest.raises(UsageError) as refused:
        run.faults.check([parse_fault("pause:node0"), parse_fault("lossy:node1,p=30%@t=0..5")])
    assert str(refused.value) == (
        "lossy:node1,p=30%@t=0..5: run R1's nodes lack NET_ADMIN, which a lossy fault needs (iptables as root in"
        " node1); a run's nodes have it only when it starts with --link or a degrade, lossy or partition --fault:"
        " start it again with --link SPEC (e.g. --link 100gbe), or give this fault to run --fault (not with"
        " --detach)")
    assert refused.value.exit_code == 2 and "\n" not in str(refused.value)
    with pytest.raises(UsageError, match=r"^partition:node0\|node2: run R1's nodes lack NET_ADMIN, which a partition"
                                         r" fault needs \(ip route as root in node0, node2\); "):
        run.faults.check([parse_fault("partition:node0|node2")])
    with pytest.raises(UsageError, match=r"^degrade:node2,rate=1mbit: .* \(tc as root in node2\); "):
        run.faults.check([parse_fault("degrade:node2,rate=1mbit")])
    assert run.client.calls == [] and run.notes() == []
    run.faults.check([parse_fault("pause:node0"), parse_fault("slow:node1,cpus=0.5")])  # no capability needed
    run.nodes["node1"].service["cap_add"] = ["CAP_NET_ADMIN"]  # as a newer engine spells it
    run.faults.check([parse_fault("lossy:node1,p=30%@t=0..5")])

def test_a_lost_node_is_refused_where_the_run_could_not_go_on_without_it(tmp_path):
    run = Run(tmp_path)  # a static run
    with pytest.raises(UsageError) as refused:
        run.faults.check([parse_fault("lose:node1")])
    assert str(refused.value).startswith("lose:node1: a lost node is for an elastic job that goes on without it")
    run.faults.min_nodes, run.faults.max_restarts = 2, 3  # elastic, but MIN is every node it has
    with pytest.raises(UsageError, match=r"^lose:node1: losing node1 leaves 1 of 2 nodes, fewer than --nnodes MIN"):
        run.faults.check([parse_fault("lose:node1")])
    run.faults.min_nodes = 1
    run.faults.check([parse_fault("lose:node1")])
    assert run.client.calls == [] and run.notes() == []


def test_a_rank_fault_is_not_refused_for_its_node_and_storage_needs_the_runs_directory(tmp_path):
    Run(tmp_path).faults.check([parse_fault("kill-rank:7")])  # a rank is looked for when it is done
    run = Run(tmp_path / "elsewhere", with_dir=False)
    with pytest.raises(UsageError, match=r"^disk-full:node1: run R1's directory cannot be reached from here, and"
                                         r" storage faults are armed there$"):
        run.faults.check([parse_fault("disk-full:node1")])


def test_where_the_runs_directory_cannot_be_written_it_is_said_once(tmp_path):
    run = Run(tmp_path, with_dir=False)
    run.faults.inject(parse_fault("kill:node0"))
    run.faults.inject(parse_fault("kill:node1"))
    unnoted = [line for line in run.said if "cannot be written from here" in line]
    assert unnoted == ["run R1's directory cannot be written from here: its summary will not name the faults done now"]
    assert not (run.run_dir / "live-faults.jsonl").exists()


def test_faults_that_end_together_are_each_ended_without_waiting_again_and_each_has_its_own_notes(
        tmp_path):
    run = Run(tmp_path, ("node0", "node1", "node2"))
    clock = Clock()
    for text in ("pause:node0@t=0..4", "pause:node1@t=0..4", "pause:node2@t=0..1"):
        run.faults.inject(parse_fault(text))
    run.faults.say = clock.stamped(run.said)
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [1.0] * 4
    assert [line for line in run.said if " ended " in line] == [
        "1 s: ended pause:node2@t=0..1 on node2 of run R1", "4 s: ended pause:node0@t=0..4 on node0 of run R1",
        "4 s: ended pause:node1@t=0..4 on node1 of run R1"]
    ids = [json.loads(line)["id"] for line in (run.run_dir / "live-faults.jsonl").read_text().splitlines()]
    assert len(set(ids)) == 3  # doing, done, ended of each share one id; no two faults do


def test_a_restart_is_at_once_and_a_disconnected_node_is_taken_off_the_runs_network(tmp_path):
    run = Run(tmp_path)
    run.faults.inject(parse_fault("restart:node0"))
    assert run.nodes["node0"].restart_timeouts == [0]  # SIGKILL at once: a node that reboots
    run.faults.inject(parse_fault("disconnect:node1"))
    assert run.calls("disconnect") == [(f"{PROJECT}-node1-1", f"{PROJECT}_ddp")]


def test_torn_writes_on_two_nodes_are_waited_for_together_and_another_commands_tear_is_not_ours(
        tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    node0, node1 = parse_fault("torn-write:node0"), parse_fault("torn-write:node1")
    run.faults.inject(node0)
    run.faults.inject(node1)
    keys = {f["node"]: f["key"] for f in armed(run.run_dir / PROGRESS_SUBDIR)}
    write_storage_event(run, kind="torn-write", key="s-of-another-command", node="node1", file="x.pt", rank=1,
                        byte=1, size=2)
    write_storage_event(run, kind="torn-write", key=keys["node0"], node="node0", file="y.pt", byte=3, size=9)

    def then_node1(seconds: float) -> None:
        clock.sleep(seconds)
        write_storage_event(run, kind="torn-write", key=keys["node1"], node="node1", file="z.pt", rank=1, byte=5,
                            size=9)

    run.faults.hold(sleep=then_node1)
    assert run.said[2:] == ["waiting for the next write on node0, node1; Ctrl-C disarms",
                            "torn-write:node0: a worker of node0's write of y.pt was cut at byte 3 of 9; killing node0",
                            "torn-write:node1: rank 1's write of z.pt was cut at byte 5 of 9; killing node1"]


def test_a_torn_write_on_a_paused_node_waits_and_on_a_removed_one_is_disarmed(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("torn-write:node1"))
    run.nodes["node1"].pause()  # paused is not ended: its write may still come

    def removed_meanwhile(seconds: float) -> None:
        clock.sleep(seconds)
        run.nodes["node1"].remove(force=True)

    run.faults.hold(sleep=removed_meanwhile, clock=clock.time)
    assert clock.slept == [0.2]
    assert run.said[-1] == "disarmed torn-write:node1: node1 is no longer running, and no write of it was cut"


def test_a_degrade_in_a_run_without_a_link_ends_by_deleting_the_shaping_and_a_refusal_is_said(tmp_path):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("degrade:node1,rate=10mbit@t=0..1"))
    run.faults.inject(parse_fault("degrade:node0,rate=10mbit@t=0..2"))
    run.client.command_outputs[(f"{PROJECT}-node0-1", "tc")] = (2, b"RTNETLINK answers: No such file or directory\n")
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert run.execs("node1")[-1] == ("tc", "qdisc", "del", "dev", "eth0", "root")  # nothing to restore
    assert run.said[-2] == "ended degrade:node1,rate=10mbit@t=0..1 on node1 of run R1"
    assert run.said[-1] == ("could not end degrade:node0,rate=10mbit@t=0..2 on node0: cannot shape the link at"
                            " ddp-live-node0-1 (tc qdisc del dev eth0 root): RTNETLINK answers: No such file or"
                            " directory")


def test_a_rank_is_looked_for_on_the_other_nodes_when_one_has_ended_and_nowhere_is_said_why(tmp_path):
    run = Run(tmp_path)
    run.nodes["node0"].exit(1)  # the engine refuses an exec there (409)
    assert run.faults.inject(parse_fault("kill-rank:1")) == "node1"
    run.client.command_outputs[(f"{PROJECT}-node1-1", "python3")] = (1, b"")
    with pytest.raises(EngineError, match=r"^rank 3 is not running on any node now \(the rank script on node1: exit"
                                          r" code 1: no output\)$"):
        run.faults.inject(parse_fault("kill-rank:3"))
    run.nodes["node1"].exit(1)
    with pytest.raises(EngineError, match=r"^rank 3 is not running on any node now \(the engine: Container"
                                          r" id-ddp-live-node1-1 is not running\)$"):
        run.faults.inject(parse_fault("kill-rank:3"))


def test_a_partition_over_a_node_off_the_network_is_refused_naming_it_and_nothing_is_cut(tmp_path):
    run = Run(tmp_path, ("node0", "node1", "node2"))
    for node in ("node1", "node2"):
        run.nodes[node].networks.clear()
    with pytest.raises(NodeLookupError, match=r"^node1, node2 not running on the run's network$"):
        run.faults.inject(parse_fault("partition:node0|node1,node2"))
    assert run.calls("exec_create") == []


def test_a_heal_the_engine_refuses_is_raised_once_every_node_was_tried(tmp_path):
    from orchestrate.faults.network import heal

    run = Run(tmp_path)
    run.client.failures["exec"] = docker.errors.APIError("500 Server Error: the engine is busy")
    with pytest.raises(docker.errors.APIError, match="the engine is busy"):
        heal(run.client, dict(run.nodes), (("node0",), ("node1",)))


def test_a_rank_fault_and_a_kill_are_checked_without_the_runs_directory_and_names_are_listed(tmp_path):
    run = Run(tmp_path, with_dir=False)
    run.faults.check([parse_fault("kill:node0"), parse_fault("pause:node1@t=0..5")])  # not refused
    with pytest.raises(UsageError, match=r"^no running node5, node7 in run R1 "):
        run.faults.check([parse_fault("partition:node0,node5|node7")])


def test_no_run_directory_is_not_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / PROGRESS_SUBDIR).mkdir()
    monkeypatch.chdir(tmp_path)  # a "progress" directory here is not the run's
    client = FakeDockerClient()
    faults = LiveFaults(client, "R1", PROJECT, {"node1": client.running("n1")}, stop_grace_s=1, run_dir=Path(""))
    with pytest.raises(UsageError, match="directory cannot be reached from here"):
        faults.check([parse_fault("disk-full:node1")])


def test_a_node_fault_is_done_by_inject_and_a_rank_fault_is_not_one():
    from orchestrate.faults.inject import do_fault, inject

    client = FakeDockerClient()
    with pytest.raises(NodeLookupError, match="^node1 is not running$"):
        do_fault(client, PROJECT, {"node0": client.running("n0")}, parse_fault("pause:node1"))
    with pytest.raises(ValueError, match="^kill-rank is not a node fault$"):
        inject(client, PROJECT, client.running("n1"), parse_fault("kill-rank:1"))


def test_a_hold_whose_nodes_were_removed_meanwhile_ends_then_and_the_others_are_held_to_their_end(tmp_path):
    """``down RUN`` during a 60 s pause: ``fault`` does not wait out the minute to unpause nothing."""
    run = Run(tmp_path, ("node0", "node1", "node2"))
    clock = Clock()
    for text in ("pause:node1@t=0..60", "partition:node0|node2@t=0..60", "slow:node2,cpus=0.5@t=0..10"):
        run.faults.inject(parse_fault(text))
    run.notes()
    run.faults.say = clock.stamped(run.said)

    def taken_down(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now - 1000.0 == 3.0:  # node1 and node0 removed, as `down` removes them
            for node in ("node1", "node0"):
                run.client.containers_by_name.pop(f"{PROJECT}-{node}-1")
    run.faults.hold(sleep=taken_down, clock=clock.time)
    assert run.said[3:] == [
        "0 s: holding slow:node2,cpus=0.5@t=0..10, pause:node1@t=0..60, partition:node0|node2@t=0..60 for up to"
        " 60 s; Ctrl-C ends them now",
        "3 s: pause:node1@t=0..60: node1 of run R1 removed meanwhile; nothing left to undo",
        "10 s: ended slow:node2,cpus=0.5@t=0..10 on node2 of run R1",
        # the partition's node2 still runs: it is healed at its end, on what is left
        "60 s: ended partition:node0|node2@t=0..60 on node0 of run R1"], run.said
    assert ("pause:node1@t=0..60", "node1", "ended", "node1 of run R1 removed meanwhile") in run.notes()
    assert run.calls("unpause") == []


def test_a_removed_partition_names_every_node_it_split_and_a_removed_ranks_fault_names_the_ranks_node(tmp_path):
    run = Run(tmp_path, ("node0", "node1", "node2"))
    run.client.command_outputs[(f"{PROJECT}-node0-1", "python3")] = (rank_signal.NOT_HERE, b"")
    clock = Clock()
    for text in ("partition:node0|node2@t=0..60", "hang-rank:1@t=0..60"):
        run.faults.inject(parse_fault(text))
    for node in ("node0", "node1", "node2"):
        run.client.containers_by_name.pop(f"{PROJECT}-{node}-1")
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [] and sorted(run.said[-2:]) == [
        "hang-rank:1@t=0..60: node1 of run R1 removed meanwhile; nothing left to undo",
        "partition:node0|node2@t=0..60: node0, node2 of run R1 removed meanwhile; nothing left to undo"]


@pytest.mark.parametrize("case", ["ended", "engine busy"])
def test_a_node_that_only_ended_or_an_engine_that_cannot_answer_keeps_the_fault_held_to_its_end(tmp_path, case):
    run = Run(tmp_path)
    clock = Clock()
    run.faults.inject(parse_fault("pause:node1@t=0..3"))
    if case == "ended":  # an elastic run's launcher may start it again
        run.nodes["node1"].exit(1)
    else:
        run.client.failures["reload"] = docker.errors.APIError("the engine is busy")
    run.faults.hold(sleep=clock.sleep, clock=clock.time)
    assert clock.slept == [1.0] * 3 and len(run.calls("unpause")) == 1  # tried at its end, as asked

"""Where every rank of a running run is (``stacks RUN``): the two looks and what they write, an
elastic run's ranks placed by the node they say, and the engine's word on ranks that did not
answer (``stacks`` and the hang watchdog): a paused node's ranks, a stopped process's rank, each
with the fault that did it, and nothing said of ranks that were not asked about or of a node the
engine cannot inspect."""
from __future__ import annotations

import json
from dataclasses import replace

import docker.errors
import pytest

from orchestrate.config.fault_spec import FaultSpec, parse_fault
from orchestrate.supervise.rank_probe import RankHost, absent_reasons
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_supervisor_collaborators import node_container

STOPPED_RANKS_3_AND_5 = (0, b"2 4242 S\n3 4243 T\n5 4245 T\nend\n")  # what the rank script prints in node1


def faults(*texts: str) -> tuple[FaultSpec, ...]:
    return tuple(parse_fault(text) for text in texts)


def hosts(client: FakeDockerClient, *nodes: tuple, nproc: int = 0) -> list[RankHost]:
    """Running nodes, each ``(name, ranks, fault)``, each running ``nproc`` workers (0: as many as
    its ranks)."""
    found = []
    for name, ranks, fault in nodes:
        container = node_container(client, "r", name, Script(hang=True))
        container.start()
        found.append(RankHost(name, container, ranks, nproc or len(ranks), (parse_fault(fault),) if fault else ()))
    return found


def test_a_paused_nodes_asked_ranks_and_a_stopped_rank_are_named_with_their_faults():
    client = FakeDockerClient()
    paused, stopped = hosts(client, ("node0", (0, 1), "pause:node0"), ("node1", (2, 3), ""))
    paused.container.pause()
    client.command_outputs[(stopped.container.name, "python3")] = STOPPED_RANKS_3_AND_5
    assert absent_reasons(client, [paused, stopped], {1, 2, 3}) == {
        1: "is on node0, whose container is paused (injected fault pause:node0)",
        3: "is stopped: its process on node1 got SIGSTOP"}  # 2 answers for itself; 5 was not asked about


def test_a_planned_rank_whose_script_returned_and_has_no_process_on_its_running_node_has_exited():
    """The rank script lists every worker process of a node: a planned rank it leaves out, whose
    script returned (by the progress channel), has exited while its node runs on (its torchrun
    waits for the others). One whose script did not return may not have started yet (its torchrun
    still in the rendezvous); an elastic node's ranks are not known; a node whose answer lost its
    end line says nothing."""
    client = FakeDockerClient()
    planned, elastic = hosts(client, ("node1", (2, 3), ""), ("node2", (), ""), nproc=2)
    client.command_outputs[(planned.container.name, "python3")] = (0, b"2 4242 S\nend\n")
    client.command_outputs[(elastic.container.name, "python3")] = (0, b"end\n")
    assert absent_reasons(client, [planned, elastic], {3, 5}, returned={2, 3, 5}) == {
        3: "has exited: its script returned on node1, whose torchrun runs on"}
    assert absent_reasons(client, [planned, elastic], {3, 5}, returned={2}) == {}  # 3 may not have started
    client.command_outputs[(planned.container.name, "python3")] = (0, b"2 4242 S\n")  # the end line lost
    assert absent_reasons(client, [planned], {3}, returned={3}) == {}


def test_a_rank_with_two_processes_one_stopped_is_stopped():
    """An orphaned child that kept the rank's environment beside the rank's own process: either
    being stopped stops the rank."""
    client = FakeDockerClient()
    [node1] = hosts(client, ("node1", (2,), ""))
    client.command_outputs[(node1.container.name, "python3")] = (0, b"2 4242 T\n2 4250 S\nend\n")
    assert absent_reasons(client, [node1], {2}) == {2: "is stopped: its process on node1 got SIGSTOP"}


def test_a_node_with_none_of_the_ranks_is_not_asked_and_the_next_one_still_is():
    client = FakeDockerClient()
    other, stopped = hosts(client, ("node0", (0, 1), ""), ("node1", (2, 3), "hang-rank:3"))
    client.command_outputs[(stopped.container.name, "python3")] = STOPPED_RANKS_3_AND_5
    assert absent_reasons(client, [other, stopped], {3}) == {
        3: "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:3)"}
    assert [call for call in client.calls if call[1] == other.container.name] == []


def test_a_node_the_engine_cannot_inspect_is_left_out_and_the_others_are_not():
    client = FakeDockerClient()
    gone, paused = hosts(client, ("node0", (0,), ""), ("node1", (), ""))  # node1's ranks: any (elastic)

    def not_found() -> None:
        raise docker.errors.NotFound("No such container")
    gone.container.reload = not_found
    paused.container.pause()
    assert absent_reasons(client, [gone, paused], {0, 4}) == {0: "is on node1, whose container is paused",
                                                              4: "is on node1, whose container is paused"}


def test_a_paused_node_of_an_elastic_run_accounts_only_for_ranks_no_other_node_does():
    """Its ranks are not known: a rank stopped on another node is not said to be on it, and
    where two such nodes are paused, both are named."""
    client = FakeDockerClient()
    stopped, first, second = hosts(client, ("node1", (), "hang-rank:3"), ("node2", (), "pause:node2"),
                                   ("node3", (), ""), nproc=2)
    client.command_outputs[(stopped.container.name, "python3")] = (0, b"3 4243 T\nend\n")
    first.container.pause()
    assert absent_reasons(client, [stopped, first], {3, 5}) == {
        3: "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:3)",
        5: "is on node2, whose container is paused (injected fault pause:node2)"}
    second.container.pause()
    assert absent_reasons(client, [first, stopped, second], {3, 5}) == {
        3: "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:3)",
        5: "is on one of node2, node3, whose containers are paused (injected faults pause:node2)"}
    fourth, fifth = hosts(client, ("node4", (), "pause:node4"), ("node5", (), ""), nproc=2)
    fourth.container.pause()
    fifth.container.pause()
    assert absent_reasons(client, [first, fourth], {5}) == {
        5: "is on one of node2, node4, whose containers are paused (injected faults pause:node2, pause:node4)"}
    assert absent_reasons(client, [second, fifth], {5}) == {5: "is on one of node3, node5, whose containers are paused"}


INTERVAL_S = 7.0  # the tests' interval between the two looks, told apart from a look's polls by its length


class AnsweringWorkers:
    """The ranks' snapshot threads, in simulated time: ``clock`` and ``sleep`` are
    ``where_ranks_are``'s. Each sleep moves the time on; a rank answers the request it finds once
    0.25 s have passed since it was asked (as the workers look every 0.25 s), a ``late`` one after
    1 s. ``between_looks`` runs at the interval's sleep; ``cpu_s`` and ``answering`` may change
    there."""

    def __init__(self, run_dir, ranks, waiting_at: dict[int, int], per_node: int = 1):
        """``waiting_at``: the line of train.py where a rank waits in all_reduce #2 (a rank not
        in it computes at line 30); ``per_node``: ranks on each node, in order."""
        self.directory = run_dir / "debug"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cpu_s = {rank: 1.0 for rank in ranks}
        self.answering = set(ranks)
        self.late: set[int] = set()
        self.in_debugger: set[int] = set()  # ranks stopped at a breakpoint() of train.py's, no terminal came
        self.waiting_at = waiting_at
        self.per_node = per_node
        self.between_looks = lambda: None
        self.now = 0.0
        self.request, self.asked_at, self.answered = "", 0.0, set()
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if seconds == INTERVAL_S:
            self.between_looks()
        before, self.now = self.now, self.now + seconds
        try:
            request = json.loads((self.directory / "request.json").read_text())["id"]
        except (OSError, ValueError):
            return
        if request != self.request:  # asked since the last sleep
            self.request, self.asked_at, self.answered = request, before, set()
        for rank in sorted(self.answering - self.answered):
            if self.now - self.asked_at >= (1.0 if rank in self.late else 0.25):
                self.answer(rank)

    def answer(self, rank: int) -> None:
        self.answered.add(rank)
        line = None if rank in self.in_debugger else self.waiting_at.get(rank)
        done = {"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:9",
                "state": "done"}
        waits = [{**done, "seq": 2, "at": f"train.py:{line}", "state": "entered"}] if line else []
        (self.directory / f"rank{rank}.json").write_text(json.dumps({
            "request": self.request, "rank": rank, "pid": 40 + rank, "node": f"node{rank // self.per_node}",
            "completed": 1, "cpu_s": self.cpu_s[rank], "collectives": [done, *waits],
            "stacks": [{"thread": "MainThread", "main": True, "frames": [["train.py", line or 30, "<module>", ""]]}],
            **({"debugger": {"state": "waits", "call": "breakpoint()", "file": "train.py", "line": 30,
                             "function": "<module>", "text": "breakpoint()", "attached": False}}
               if rank in self.in_debugger else {})}))

    def where_ranks_are(self, client, hosts: list[RankHost]):
        from orchestrate.supervise.rank_probe import where_ranks_are

        return where_ranks_are(client, self.directory.parent, hosts, INTERVAL_S, sleep=self.sleep, clock=self.clock)


def test_where_ranks_are_looks_twice_an_interval_apart_and_writes_what_it_found(tmp_path):
    from orchestrate.supervise.rank_probe import stack_lines

    client = FakeDockerClient()
    planned = hosts(client, ("node0", (0,), ""), ("node1", (1,), ""))
    workers = AnsweringWorkers(tmp_path, (0, 1), {0: 20})

    def rank_1_computes() -> None:  # 7 s of CPU in the 7.3 s between the two requests
        workers.cpu_s[1] = 8.0
    workers.between_looks = rank_1_computes
    found = workers.where_ranks_are(client, planned)
    assert workers.slept == [0.1, 0.1, 0.1, INTERVAL_S, 0.1, 0.1, 0.1]  # each look's answers came after 0.3 s
    assert [(a.rank, a.state) for a in found.activities] == [(0, "collective"), (1, "busy")]
    assert not found.hung  # rank 1 made progress
    written = json.loads((tmp_path / "stacks.json").read_text())
    assert written["activities"] == [a.__dict__ for a in found.activities] and written["time"] > 0
    assert written["headline"] == "the job is working: rank 1 computing"  # no time without output: it knows none
    # the verdict first; no "rank 0 waits in all_reduce #2; rank 1 is at #1": looked at a moment apart, a working
    # job's ranks are collectives apart as they go (a healthy job read as a desync)
    assert stack_lines(found) == [
        "the job is working: rank 1 computing",
        "rank 0: all_reduce at train.py:20 in <module>", "    train.py:20 in <module>",
        "rank 1: <module> at train.py:30", "    train.py:30 in <module>",
        "rank 1 is computing (96% of a core)"]


def test_where_ranks_are_waits_for_no_rank_of_a_paused_node_and_names_it(tmp_path):
    client = FakeDockerClient()
    planned = hosts(client, ("node0", (0,), ""), ("node1", (1,), "pause:node1"))
    planned[1].container.pause()
    workers = AnsweringWorkers(tmp_path, (0,), {0: 20})
    found = workers.where_ranks_are(client, planned)
    assert workers.slept == [0.1, 0.1, 0.1, INTERVAL_S, 0.1, 0.1, 0.1]  # not the 3 s a rank is waited for
    assert [(a.rank, a.state, a.detail) for a in found.activities] == [
        (0, "collective", "waits in all_reduce(float32[4]) #2 at train.py:20"),
        (1, "stopped", "is on node1, whose container is paused (injected fault pause:node1)")]
    assert found.headline.startswith("no rank made progress between two looks 7.3 s apart: rank 0 waits in"), \
        found.headline  # asked at 0.0, then 7.3 s later: after three 0.1 s waits and the interval
    assert json.loads((tmp_path / "stacks.json").read_text())["quiet_s"] is None


def test_where_ranks_are_in_an_elastic_run_asks_every_rank_that_answers(tmp_path):
    """Hosts with no planned ranks (the rendezvous assigns them): the ranks are those that answer."""
    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), ""), nproc=2)
    workers = AnsweringWorkers(tmp_path, (0, 1, 2, 3), {0: 20, 1: 20, 2: 20, 3: 21}, per_node=2)
    found = workers.where_ranks_are(client, elastic)
    assert [a.rank for a in found.activities] == [0, 1, 2, 3]
    assert [group.ranks for group in found.groups] == [(3,), (0, 1, 2)]  # the odd one out first
    assert found.unheard_nodes == []
    assert [call for call in client.calls if call[0] == "exec_create"] == []  # nothing to ask the engine


def test_where_ranks_are_in_an_elastic_run_waits_in_its_second_look_for_a_rank_the_first_missed(tmp_path):
    """A node whose worker answers late (it was starting) is waited for again, not left out."""
    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), ""), nproc=1)
    workers = AnsweringWorkers(tmp_path, (0, 1), {0: 20, 1: 20})
    workers.answering.discard(1)

    def rank_1_is_up() -> None:  # and answers 1 s after it is asked
        workers.answering.add(1)
        workers.late.add(1)
    workers.between_looks = rank_1_is_up
    found = workers.where_ranks_are(client, elastic)
    assert [(a.rank, a.state) for a in found.activities] == [(0, "collective"), (1, "collective")]
    assert found.unheard_nodes == []


def test_where_ranks_are_names_a_rank_that_stopped_answering_between_the_looks_with_why(tmp_path):
    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), "pause:node1"), nproc=1)
    workers = AnsweringWorkers(tmp_path, (0, 1), {0: 20, 1: 20})

    def node1_paused() -> None:
        workers.answering.discard(1)
        elastic[1].container.pause()
    workers.between_looks = node1_paused
    found = workers.where_ranks_are(client, elastic)
    assert [(a.rank, a.state, a.detail) for a in found.activities] == [
        (0, "collective", "waits in all_reduce(float32[4]) #2 at train.py:20"),
        (1, "stopped", "is on node1, whose container is paused (injected fault pause:node1)")]


def test_where_ranks_are_still_answers_when_the_run_directory_cannot_take_its_file(tmp_path):
    client = FakeDockerClient()
    planned = hosts(client, ("node0", (0,), ""))
    workers = AnsweringWorkers(tmp_path, (0,), {0: 20})
    (tmp_path / "stacks.json").mkdir()  # writing it fails as a vanished directory would
    found = workers.where_ranks_are(client, planned)
    assert [(a.rank, a.state) for a in found.activities] == [(0, "collective")]


def test_where_ranks_are_in_an_elastic_run_says_which_node_did_not_answer_and_names_a_stopped_rank(tmp_path):
    """Ranks that never answered have no number the launcher knows: a paused node is named with
    how many of its ranks are missing; a stopped process's rank comes from the engine, asked once."""
    from orchestrate.supervise.rank_probe import stack_lines

    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), "hang-rank:3"), ("node2", (), "pause:node2"), nproc=2)
    client.command_outputs[(elastic[1].container.name, "python3")] = (0, b"2 4242 T\n3 4243 T\nend\n")
    elastic[2].container.pause()
    workers = AnsweringWorkers(tmp_path, (0, 1, 2), {0: 20, 1: 20, 2: 20}, per_node=2)
    workers.between_looks = lambda: workers.answering.discard(2)  # rank 2 answers the first look only
    found = workers.where_ranks_are(client, elastic)
    assert [(a.rank, a.state) for a in found.activities] == [(0, "collective"), (1, "collective"), (2, "stopped"),
                                                            (3, "stopped")]
    assert [a.detail for a in found.activities[2:]] == [  # stopped by hand, and by the fault that names rank 3
        "is stopped: its process on node1 got SIGSTOP", "is stopped: its process on node1 got SIGSTOP (injected"
        " fault hang-rank:3)"]
    assert found.unheard_nodes == [
        "node2: 2 of its 2 ranks did not answer: its container is paused (injected fault pause:node2)"]
    assert [call[1] for call in client.calls if call[0] == "exec_create"] == [elastic[1].container.name]
    said = stack_lines(found)
    assert said.index("node2: 2 of its 2 ranks did not answer: its container is paused (injected fault pause:node2)") \
        == said.index("rank 3: is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:3)") + 1, said
    assert said[0] == "ranks 0, 1: all_reduce at train.py:20 in <module>", said
    assert json.loads((tmp_path / "stacks.json").read_text())["unheard_nodes"] == found.unheard_nodes


def test_where_ranks_are_in_an_elastic_run_counts_a_node_still_starting_without_a_reason(tmp_path):
    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), "pause:node1"), nproc=1)
    client.command_outputs[(elastic[1].container.name, "python3")] = (0, b"end\n")  # no process stopped
    workers = AnsweringWorkers(tmp_path, (0,), {0: 20})
    found = workers.where_ranks_are(client, elastic)
    assert [a.rank for a in found.activities] == [0]
    assert found.unheard_nodes == ["node1: 1 of its 1 ranks did not answer"]  # its fault is not what stopped it


def run_stacks(tmp_path, monkeypatch, before=lambda run_dir, nodes: None, *, rdzv: str = "c10d", nprocs: str = "2",
               answering: tuple[int, ...] = (0, 1), in_debugger: tuple[int, ...] = (),
               store: bool = False) -> tuple[int, list[str]]:
    """``stacks RUN`` as a user runs it, on a run of 2 nodes in the fake engine (by default
    elastic, 2 workers each), node1 paused and ranks 0 and 1 answering (``before``: done to the
    run first, given the store's container last where ``store`` gives the run one of its own;
    ``in_debugger``: ranks that answer from their debugger's wait)."""
    import functools
    import io

    from orchestrate.cli.main import main
    from orchestrate.engine.labels import (COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, NODE_RANK_LABEL,
                                           NPROC_LABEL, RDZV_LABEL, ROLE_LABEL, RUN_DIR_LABEL, RUN_ID_LABEL,
                                           STORE_HOST_LABEL, STORE_ROLE)
    from orchestrate.supervise.rank_probe import where_ranks_are

    client = FakeDockerClient()
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    common = {RUN_ID_LABEL: "r", COMPOSE_PROJECT_LABEL: "ddp-r", RUN_DIR_LABEL: str(run_dir), NPROC_LABEL: nprocs,
              RDZV_LABEL: rdzv, **({STORE_HOST_LABEL: "rdzv-store"} if store else {})}
    nodes = [client.running(f"ddp-r-node{n}-1", {**common, NODE_RANK_LABEL: str(n), COMPOSE_SERVICE_LABEL: f"node{n}"},
                            script_as=f"node{n}")
             for n in (0, 1)]
    if store:
        nodes.append(client.running("ddp-r-rdzv-store-1", {RUN_ID_LABEL: "r", COMPOSE_PROJECT_LABEL: "ddp-r",
                                                           COMPOSE_SERVICE_LABEL: "rdzv-store", ROLE_LABEL: STORE_ROLE},
                                    script_as="rdzv-store"))
    before(run_dir, nodes)
    nodes[1].pause()
    workers = AnsweringWorkers(run_dir, answering, {0: 20, 1: 21}, per_node=2)
    workers.in_debugger = set(in_debugger)
    monkeypatch.setattr("orchestrate.cli.stacks.where_ranks_are",
                        functools.partial(where_ranks_are, sleep=workers.sleep, clock=workers.clock))
    out = io.StringIO()
    code = main(["stacks", "r", "--interval", str(INTERVAL_S)], out=out, client=client)
    assert INTERVAL_S in workers.slept
    return code, out.getvalue().splitlines()


def test_stacks_of_an_elastic_run_waits_for_each_nodes_workers_and_says_the_node_that_did_not_answer(tmp_path,
                                                                                                    monkeypatch):
    """Until 2026-11-27 it said "0 of 0 ranks answered" there, whatever the ranks did."""
    code, said = run_stacks(tmp_path, monkeypatch)
    assert code == 0, said
    assert said[0] == "run r: 2 of 4 ranks answered"
    assert "node1: 2 of its 2 ranks did not answer: its container is paused" in said


def test_stacks_of_a_static_run_names_each_nodes_own_ranks_and_the_command_for_a_rank_in_its_debugger(
        tmp_path, monkeypatch):
    """A static run of 2 + 1 workers: node1's rank is named by the run's plan (rank 2, not a
    count of ranks that did not answer), rank 1, silent on a running node, is asked of the engine,
    and rank 0, at its breakpoint(), is named with the debug command for this run."""
    code, said = run_stacks(tmp_path, monkeypatch, rdzv="static", nprocs="2,1", answering=(0,), in_debugger=(0,))
    assert code == 0, said
    assert said[:-1] == [
        "run r: 1 of 3 ranks answered",
        "rank 0: stopped in its debugger at train.py:30 in <module>", "    train.py:30 in <module>",
        "rank 1: did not answer",
        "rank 2: is on node1, whose container is paused",
        "rank 0 stopped in its debugger at train.py:30 (breakpoint()), no terminal came: debug it with python -m"
        " orchestrate debug r 0, or take the breakpoint out"], said
    assert said[-1] == f"(written to {tmp_path / 'runs' / 'r' / 'stacks.json'})"


STORE_WAITS = "no rendezvous can form while it cannot answer (a worker group restarted waits)"


def test_stacks_of_a_run_with_a_store_of_its_own_says_it_serves_or_why_not_with_its_fault(tmp_path, monkeypatch):
    """A store paused by ``fault RUN pause:store`` (noted for a run no launcher follows), one
    killed, one serving; the store is said after the count of ranks, and the ranks as before."""
    from orchestrate.config.fault_spec import parse_fault
    from orchestrate.faults.live_notes import note_live_fault

    def paused(run_dir, containers) -> None:
        assert note_live_fault(run_dir, "p", parse_fault("pause:store@t=0..30"), "store", "done")
        containers[-1].pause()

    code, said = run_stacks(tmp_path / "paused", monkeypatch, paused, store=True)
    assert code == 0 and said[0] == "run r: 2 of 4 ranks answered", said
    assert said[1] == ("the run's rendezvous store (its container rdzv-store): its container is paused (hung) (injected"
                       f" fault pause:store@t=0..30): {STORE_WAITS}")
    assert "node1: 2 of its 2 ranks did not answer: its container is paused" in said
    _, said = run_stacks(tmp_path / "killed", monkeypatch, lambda run_dir, containers: containers[-1].kill(),
                         store=True)
    assert said[1] == f"the run's rendezvous store (its container rdzv-store): its container has ended (exit code 137): {STORE_WAITS}"
    _, said = run_stacks(tmp_path / "serving", monkeypatch, store=True)
    assert said[1] == "the run's rendezvous store (its container rdzv-store) is serving"
    code, said = run_stacks(tmp_path / "removed", monkeypatch, lambda run_dir, containers: containers[-1].remove(
        force=True), store=True)
    assert code == 0 and said[1] == "run r's rendezvous store (its container rdzv-store) is gone from the engine", said
    assert "node1: 2 of its 2 ranks did not answer: its container is paused" in said  # the ranks all the same


def test_stacks_exits_1_when_no_rank_answered(tmp_path, monkeypatch):
    code, said = run_stacks(tmp_path, monkeypatch, rdzv="static", nprocs="2,1", answering=())
    assert code == 1, said
    assert said[0] == "run r: 0 of 3 ranks answered"


def test_stacks_names_the_fault_that_paused_a_node_from_the_runs_record(tmp_path, monkeypatch):
    """``fault RUN pause:node1``, noted by ``fault`` for a run no launcher follows: named, not a
    later fault since undone, nor one that freezes nothing."""
    from orchestrate.config.fault_spec import parse_fault
    from orchestrate.faults.live_notes import note_live_fault

    def faulted(run_dir, nodes) -> None:
        held = parse_fault("pause:node1@t=0..5")
        assert note_live_fault(run_dir, "now", parse_fault("pause:node1"), "node1", "done")
        assert note_live_fault(run_dir, "held", held, "node1", "done")
        assert note_live_fault(run_dir, "held", held, "node1", "ended")
        assert note_live_fault(run_dir, "slow", parse_fault("slow:node1,cpus=0.5"), "node1", "done")
    code, said = run_stacks(tmp_path, monkeypatch, faulted)
    assert code == 0, said
    assert "node1: 2 of its 2 ranks did not answer: its container is paused (injected fault pause:node1)" in said


def test_each_stopped_rank_is_named_with_its_own_fault_and_a_paused_node_with_a_pause_only():
    """Faults in effect on a node, oldest first: two hang-ranks of its two ranks, then (from
    another record) a pause; a paused node whose only fault is a hang-rank gets no note."""
    client = FakeDockerClient()
    [node1] = hosts(client, ("node1", (0, 1), ""))
    both = RankHost("node1", node1.container, (0, 1), 2, faults("hang-rank:0", "hang-rank:1", "slow:node1,cpus=0.5"))
    client.command_outputs[(node1.container.name, "python3")] = (0, b"0 4240 T\n1 4241 T\nend\n")
    assert absent_reasons(client, [both], {0, 1}) == {
        0: "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:0)",
        1: "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:1)"}
    node1.container.pause()
    assert absent_reasons(client, [replace(both, faults=faults("pause:node1@t=0..9", "hang-rank:1"))], {1}) \
        == {1: "is on node1, whose container is paused (injected fault pause:node1@t=0..9)"}
    assert absent_reasons(client, [replace(both, faults=faults("hang-rank:1"))], {1}) == {
        1: "is on node1, whose container is paused"}


def test_stacks_names_no_fault_done_before_the_node_started_again(tmp_path, monkeypatch):
    from orchestrate.config.fault_spec import parse_fault
    from orchestrate.faults.live_notes import note_live_fault

    def restarted_since(run_dir, nodes) -> None:
        assert note_live_fault(run_dir, "then", parse_fault("pause:node1"), "node1", "done")
        nodes[1].started = "2999-01-01T00:00:00Z"
    code, said = run_stacks(tmp_path, monkeypatch, restarted_since)
    assert "node1: 2 of its 2 ranks did not answer: its container is paused" in said, said


def test_where_ranks_are_names_a_planned_rank_whose_process_is_stopped(tmp_path):
    client = FakeDockerClient()
    planned = hosts(client, ("node0", (0,), ""), ("node1", (1,), "hang-rank:1"))
    client.command_outputs[(planned[1].container.name, "python3")] = (0, b"1 4241 T\nend\n")
    found = AnsweringWorkers(tmp_path, (0,), {0: 20}).where_ranks_are(client, planned)
    assert [(a.rank, a.state, a.detail) for a in found.activities][1] == (
        1, "stopped", "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:1)")


def test_where_ranks_are_names_a_rank_whose_script_returned_as_exited_and_not_one_never_heard_of(tmp_path):
    """``stacks`` has no launcher: a rank whose script returned is one whose latest record on the
    progress channel says so."""
    client = FakeDockerClient()
    planned = hosts(client, ("node0", (0,), ""), ("node1", (1,), ""))
    client.command_outputs[(planned[1].container.name, "python3")] = (0, b"end\n")  # no worker process
    found = AnsweringWorkers(tmp_path, (0,), {0: 20}).where_ranks_are(client, planned)
    assert [(a.rank, a.state) for a in found.activities] == [(0, "collective"), (1, "absent")]  # not known to have run
    (tmp_path / "progress").mkdir()
    (tmp_path / "progress" / "rank1.jsonl").write_text(json.dumps(
        {"rank": 1, "finished": True, "after_step": None, "time": 1.0, "attempt": "a"}) + "\n")
    found = AnsweringWorkers(tmp_path, (0,), {0: 20}).where_ranks_are(client, planned)
    assert [(a.rank, a.state, a.detail) for a in found.activities][1] == (
        1, "exited", "has exited: its script returned on node1, whose torchrun runs on")
    assert found.headline.endswith(": rank 0 waits in all_reduce(float32[4]) #2 at train.py:20; rank 1 has exited: its"
                                   " script returned on node1, whose torchrun runs on"), found.headline
    # a step after it: a new process of the rank, not yet up
    with open(tmp_path / "progress" / "rank1.jsonl", "a") as handle:
        handle.write(json.dumps({"rank": 1, "step": 1, "time": 2.0, "attempt": "b"}) + "\n")
    found = AnsweringWorkers(tmp_path, (0,), {0: 20}).where_ranks_are(client, planned)
    assert [(a.rank, a.state) for a in found.activities] == [(0, "collective"), (1, "absent")]


def test_where_ranks_are_in_an_elastic_run_asks_the_engine_of_a_rank_it_heard_only_in_the_first_look(tmp_path):
    """Its node answered as many ranks as it runs, across the two looks: the rank is placed there,
    and the engine asked why it fell silent."""
    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), "hang-rank:1"), nproc=1)
    client.command_outputs[(elastic[1].container.name, "python3")] = (0, b"1 4241 T\nend\n")
    workers = AnsweringWorkers(tmp_path, (0, 1), {0: 20, 1: 20})
    workers.between_looks = lambda: workers.answering.discard(1)
    found = workers.where_ranks_are(client, elastic)
    assert [(a.rank, a.state, a.detail) for a in found.activities][1] == (
        1, "stopped", "is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:1)")
    assert found.unheard_nodes == []


def test_where_ranks_are_in_an_elastic_run_asks_a_node_for_its_stopped_processes_once(tmp_path):
    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), ""), nproc=2)
    client.command_outputs[(elastic[1].container.name, "python3")] = (0, b"3 4243 T\nend\n")
    workers = AnsweringWorkers(tmp_path, (0, 1, 2), {0: 20, 1: 20, 2: 20}, per_node=2)
    workers.between_looks = lambda: workers.answering.discard(2)  # rank 2 goes quiet, not stopped (restarting, say)
    found = workers.where_ranks_are(client, elastic)
    assert [(a.rank, a.state, a.detail) for a in found.activities][2:] == [
        (2, "absent", "did not answer"), (3, "stopped", "is stopped: its process on node1 got SIGSTOP")]
    assert [call[1] for call in client.calls if call[0] == "exec_create"] == [elastic[1].container.name]


def test_where_ranks_are_in_an_elastic_run_names_each_paused_nodes_own_ranks(tmp_path):
    """Ranks heard in the first look are placed on their node: two nodes paused by the second look
    are each named for their own rank, not as "one of" them."""
    client = FakeDockerClient()
    elastic = hosts(client, ("node0", (), ""), ("node1", (), ""), nproc=1)
    workers = AnsweringWorkers(tmp_path, (0, 1), {0: 20, 1: 20})

    def both_paused() -> None:
        workers.answering.clear()
        for host in elastic:
            host.container.pause()
    workers.between_looks = both_paused
    found = workers.where_ranks_are(client, elastic)
    assert [(a.rank, a.detail) for a in found.activities] == [(0, "is on node0, whose container is paused"),
                                                              (1, "is on node1, whose container is paused")]


@pytest.mark.parametrize("interval, said", [
    ("-1", "error: --interval must be 0 or more seconds, got -1"),
    ("nan", "error: --interval must be 0 or more seconds, got nan"),
    ("0", "error: no run r in the engine"),  # taken: the run is looked for
    ("0.5", "error: no run r in the engine"),
])
def test_stacks_takes_an_interval_of_0_or_more_seconds(capsys, interval, said):
    import io

    from orchestrate.cli.main import main

    assert main(["stacks", "r", "--interval", interval], out=io.StringIO(), client=FakeDockerClient()) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err


def test_where_ranks_are_names_the_fault_in_effect_that_cut_the_network_they_wait_across(tmp_path):
    """`stacks RUN` of a run a partition split: the ranks answer (their answers go through the run's
    directory), both wait in the same all_reduce, and the fault is why."""
    client = FakeDockerClient()
    spec = "partition:node0|node1@step=5"
    split = hosts(client, ("node0", (0,), spec), ("node1", (1,), "slow:node1,cpus=0.5"))
    workers = AnsweringWorkers(tmp_path, (0, 1), {0: 20, 1: 20})
    found = workers.where_ranks_are(client, split)
    assert found.hung and found.cut_by == (spec,)  # the slow node cuts nothing
    assert found.headline.endswith(f"; injected fault {spec} cuts the nodes' network")
    assert json.loads((tmp_path / "stacks.json").read_text())["cut_by"] == [spec]
    from orchestrate.hangs.diagnosis import CUT_HINT
    from orchestrate.supervise.rank_probe import stack_lines

    assert stack_lines(found)[-1] == CUT_HINT.format(faults=f"injected fault {spec}")  # what `stacks` prints

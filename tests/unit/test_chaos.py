"""The chaos check's pure parts: the seeded schedule, the comparison of two runs' files (the
script a node runs, here under the test's own torch), and the verdict."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrate.chaos.check import describe_reference, reference_facts
from orchestrate.chaos.compare import COMPARE_SCRIPT, compare_files
from orchestrate.chaos.schedule import DEFAULT_KINDS, ChaosKind, Reference, draw_schedule, parse_kinds
from orchestrate.chaos.attempts import Strike, attempts_of, steps_redone, strikes
from orchestrate.chaos.step_metrics import StepsComparison, compare_step_metrics
from orchestrate.chaos.verdict import COMPARE_STEPS_HINT, ChaosResult, ChaosVerdict, FileComparison, resume_never_ran
from orchestrate.config.fault_spec import FaultAction
from orchestrate.errors import UsageError
from orchestrate.node import compare_tensors
from orchestrate.hangs.diagnosis import HangDiagnosis
from orchestrate.outcome.model import FaultRecord, Recovery, RunResult, Timings, WrittenFile
from orchestrate.outcome.progress import ProgressRecord
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.states import NodePhase
from orchestrate.plan.layout import PROGRESS_SUBDIR
from tests.unit.test_cli import orchestrate

pytest_plugins = ["pytester"]

NODES = ["node0", "node1", "node2"]


# --- the schedule ---------------------------------------------------------------------------

def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    reference = Reference(last_step=100, job_s=60.0)
    first = draw_schedule(7, 3, DEFAULT_KINDS, NODES, reference)
    assert first == draw_schedule(7, 3, DEFAULT_KINDS, NODES, reference)
    others = {draw_schedule(seed, 3, DEFAULT_KINDS, NODES, reference) for seed in range(8, 18)}
    assert first not in others and len(others) > 5


def positions(schedule) -> list[int]:
    """The steps of the job a schedule's step faults fall at, the reference's numbering: the
    first at its step, each later one that many steps into the attempt after the one before."""
    steps: list[int] = []
    for fault in schedule:
        steps.append(steps[-1] + fault.at_step if fault.in_attempt else fault.at_step)
    return steps


def test_faults_at_steps_fall_one_in_each_stretch_never_at_the_first_or_last_step():
    reference = Reference(last_step=41, job_s=60.0)  # steps 2..38 (3 before the last): four stretches of 9.25 steps
    for seed in range(50):
        schedule = draw_schedule(seed, 4, DEFAULT_KINDS, NODES, reference)
        assert [f.in_attempt for f in schedule] == [False, True, True, True]
        assert all(f.at_step >= 1 for f in schedule)
        steps = positions(schedule)
        assert steps == sorted(steps) and len(set(steps)) == 4
        assert 2 <= steps[0] <= 10 and 11 <= steps[1] <= 19 and 20 <= steps[2] <= 28 and 29 <= steps[3] <= 38, steps


def test_faults_fall_after_the_first_save_where_there_is_room_and_from_step_2_where_there_is_not():
    saved = Reference(last_step=41, job_s=60.0, first_write="ckpt/step_9/model.pt", first_step_after_write=10)
    short = Reference(last_step=41, job_s=60.0, first_write="final.pt", first_step_after_write=39)
    for seed in range(50):
        assert min(positions(draw_schedule(seed, 3, DEFAULT_KINDS, NODES, saved))) >= 11
        assert min(positions(draw_schedule(seed, 3, DEFAULT_KINDS, NODES, short))) < 39  # the verdict: inconclusive
    assert saved.describe_first_write() == "ckpt/step_9/model.pt, before step 10"


def test_a_fault_after_a_lasting_one_counts_the_jobs_steps_again():
    kinds = (FaultAction.PAUSE, FaultAction.KILL)
    for seed in range(60):
        schedule = draw_schedule(seed, 3, kinds, NODES, Reference(last_step=90, job_s=60.0))
        for before, fault in zip(schedule, schedule[1:]):
            if fault.at_step is not None:
                assert fault.in_attempt == (before.at_step is not None), schedule


def test_a_drawn_slow_or_degrade_takes_a_level_below_the_nodes_own_and_a_kind_that_cannot_is_refused_first(
        tmp_path):
    """A slow drew 0.25 CPUs and a degrade 10mbit whatever the nodes had: on nodes of 0.25 CPUs or a
    10mbit --link the run with faults was refused, after the undisturbed run, for a --fault the user
    never gave."""
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.chaos.schedule import check_drawn_levels
    from orchestrate.config.link import parse_link
    from orchestrate.config.request import RunRequest

    kinds, reference = (FaultAction.SLOW, FaultAction.DEGRADE), Reference(last_step=None, job_s=60.0)
    drawn = [f for seed in range(20) for f in draw_schedule(seed, 2, kinds, NODES, reference, node_cpus=0.25,
                                                            link=parse_link("rate=10mbit"))]
    assert {f.slow_cpus for f in drawn if f.action is FaultAction.SLOW} == {0.12}
    assert {f.degraded_rate_bits for f in drawn if f.action is FaultAction.DEGRADE} == {10**6}
    roomy = [f for seed in range(20) for f in draw_schedule(seed, 2, kinds, NODES, reference, node_cpus=4.0,
                                                            link=parse_link("rate=1gbit"))]
    assert {(f.slow_cpus if f.action is FaultAction.SLOW else f.degraded_rate_bits) for f in roomy} == {0.25, 10**7}
    check_drawn_levels(kinds, "node0", 0.25, parse_link("rate=10mbit"))  # (room below both)
    with pytest.raises(UsageError, match=r"^--kinds: a drawn slow:node0,cpus=0.01@t=1: a slow node's cpus must be"
                                         r" below its --cpus-per-node 0.01"):
        check_drawn_levels(kinds, "node0", 0.01, None)
    (tmp_path / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=tmp_path, runs_dir=tmp_path / "runs", nodes=2,
                                      cpu=True, cpus_per_node=0.01)
    with pytest.raises(UsageError, match="--kinds: a drawn slow"):
        ChaosCheck(request, faults=1, seed=1, kinds=(FaultAction.SLOW,)).run()
    assert not (tmp_path / "runs").exists()  # before any copy or run


def test_without_steps_faults_fall_after_the_first_write_when_there_is_room():
    reference = Reference(last_step=None, job_s=100.0, first_write="ckpt.pt", first_write_s=40.0)
    for seed in range(30):
        times = [f.at_seconds for f in draw_schedule(seed, 2, DEFAULT_KINDS, NODES, reference)]
        assert all(41.0 <= t <= 90.0 for t in times), times


def test_only_the_kinds_and_nodes_asked_for_are_drawn_and_all_of_them_come_up():
    kinds = parse_kinds("kill, disconnect,kill")
    assert kinds == (ChaosKind(FaultAction.KILL), ChaosKind(FaultAction.DISCONNECT))
    drawn = [f for seed in range(40) for f in draw_schedule(seed, 3, kinds, NODES, Reference(30, 20.0))]
    assert {f.action for f in drawn} == {kind.action for kind in kinds}
    assert {f.node for f in drawn} == set(NODES)


def test_a_reference_too_short_for_the_faults_and_an_unknown_kind_are_usage_errors():
    with pytest.raises(UsageError, match="reached step 4: no room for 3 faults"):
        draw_schedule(1, 3, DEFAULT_KINDS, NODES, Reference(4, 60.0))
    with pytest.raises(UsageError, match="too short for 5 faults"):
        draw_schedule(1, 5, DEFAULT_KINDS, NODES, Reference(None, 5.0))
    with pytest.raises(UsageError, match="no fault kind 'explode'"):
        parse_kinds("kill,explode")
    with pytest.raises(UsageError, match="chaos does not draw lose: a job that goes on with fewer nodes ends with"
                                         " other results"):
        parse_kinds("kill,lose")


def test_the_stretches_of_steps_cover_the_range_once_each_never_empty():
    from orchestrate.chaos.schedule import _stretch

    for low, high in ((2, 9), (5, 9), (2, 40), (11, 11), (3, 100)):
        for count in range(1, high - low + 2):
            stretches = [_stretch(low, high, count, i) for i in range(count)]
            covered = [step for first, last in stretches for step in range(first, last + 1)]
            assert covered == list(range(low, high + 1)), (low, high, count, stretches)


def test_the_steps_and_seconds_faults_fall_in_with_their_bounds():
    # steps: after the first save (step 4 came after it) where there are `count` steps from there to
    # 3 before the last (a resume with one step left tests little), or to the one before the last,
    # else from step 2, to 3 before the last where there is room so
    reference = Reference(10, 100.0, "ckpt.pt", 3.5, 4)
    assert [reference.step_range(n) for n in (1, 3, 4, 5, 6, 7, 8)] == [
        (5, 7), (5, 7), (5, 9), (5, 9), (2, 7), (2, 9), (2, 9)]
    assert Reference(40, 30.0, "ckpt.pt", 1.0, 2).step_range(1) == (3, 37)  # never at step 39 of 40
    assert Reference(None, 100.0).step_range(1) == (2, -1)
    # seconds: the middle 80% of the job, from a second after the first save where `count` seconds
    # are left from there
    assert Reference(None, 100.0, "ckpt.pt", 20.0).time_range(1) == (21.0, 90.0)
    assert Reference(None, 100.0, "ckpt.pt", 5.0).time_range(1) == (10.0, 90.0)  # (the first tenth is left out)
    assert Reference(None, 100.0, "ckpt.pt", 88.0).time_range(1) == (89.0, 90.0)
    assert Reference(None, 100.0, "ckpt.pt", 88.0).time_range(2) == (10.0, 90.0)
    assert Reference(None, 100.0).time_range(1) == (10.0, 90.0)
    # where the first write was made: before a step, or only when
    assert Reference(10, 100.0, "ckpt.pt", 3.5, 4).describe_first_write() == "ckpt.pt, before step 4"
    assert Reference(10, 100.0, "ckpt.pt", 3.5).describe_first_write() == "ckpt.pt, 3.5 s into the job"
    assert Reference(10, 100.0, "ckpt.pt").describe_first_write() == "ckpt.pt, 0.0 s into the job"
    assert Reference(10, 100.0).describe_first_write() == ""
    # exactly as many distinct steps, or seconds, as faults: room enough; one fewer: none
    assert len(draw_schedule(1, 3, (FaultAction.KILL,), NODES, Reference(5, 60.0))) == 3  # steps 2, 3, 4
    with pytest.raises(UsageError) as no_room:
        draw_schedule(1, 4, (FaultAction.KILL,), NODES, Reference(5, 60.0))
    assert str(no_room.value) == ("the undisturbed run reached step 5: no room for 4 faults at distinct steps; ask"
                                  " for fewer, or train longer")
    assert len(draw_schedule(1, 4, (FaultAction.KILL,), NODES, Reference(None, 5.0))) == 4  # 0.5 s to 4.5 s
    with pytest.raises(UsageError) as too_short:
        draw_schedule(1, 5, (FaultAction.KILL,), NODES, Reference(None, 5.0))
    assert str(too_short.value) == ("the undisturbed run's job took 5.0 s: too short for 5 faults spread over it; ask"
                                    " for fewer, or train longer")


def test_faults_at_seconds_fall_in_their_stretch_and_a_lasting_one_ends_within_it():
    reference = Reference(None, 100.0)  # 10 s to 90 s: four stretches of 20 s
    for seed in range(40):
        for i, fault in enumerate(draw_schedule(seed, 4, (FaultAction.KILL, FaultAction.PAUSE), NODES, reference)):
            assert fault.at_step is None and fault.at_seconds == round(fault.at_seconds, 1)
            stretch_start = 10.0 + 20.0 * i
            if fault.action is FaultAction.KILL:
                assert fault.until_seconds is None
                assert stretch_start - 0.05 <= fault.at_seconds <= stretch_start + 20.0 + 0.05, (i, fault)
            else:  # begins in the first half, lasts 10 s at most (and half its stretch)
                assert stretch_start - 0.05 <= fault.at_seconds <= stretch_start + 10.0 + 0.05, (i, fault)
                assert fault.until_seconds == round(fault.at_seconds + 10.0, 1), fault
    # a fault that ends an attempt falls anywhere in its stretch, the second half too
    kills = [(i, f.at_seconds) for seed in range(40)
             for i, f in enumerate(draw_schedule(seed, 4, (FaultAction.KILL,), NODES, reference))]
    assert any(at > 10.0 + 20.0 * i + 10.0 for i, at in kills)
    # a short stretch: a lasting fault lasts half of it
    short = draw_schedule(3, 2, (FaultAction.PAUSE,), NODES, Reference(None, 10.0))  # 1 s to 9 s: stretches of 4 s
    assert [round(f.until_seconds - f.at_seconds, 1) for f in short] == [2.0, 2.0]
    # with steps, a lasting fault still falls at a time (no step comes while it lasts)
    [paused] = draw_schedule(3, 1, (FaultAction.PAUSE,), NODES, Reference(30, 100.0))
    assert paused.at_step is None and 10.0 <= paused.at_seconds <= 50.0


def test_rank_faults_aim_at_every_rank_of_the_world_and_storage_faults_at_the_first_node():
    reference = Reference(30, 20.0)
    drawn = [f for seed in range(60) for f in draw_schedule(seed, 2, (FaultAction.KILL_RANK,), NODES, reference,
                                                            world_size=6)]
    assert {f.rank for f in drawn} == set(range(6)) and not any(f.node for f in drawn)
    without_size = [f for seed in range(60) for f in draw_schedule(seed, 2, (FaultAction.KILL_RANK,), NODES,
                                                                   reference)]
    assert {f.rank for f in without_size} == {0, 1, 2}  # a rank per node
    storage = [f for seed in range(20) for f in draw_schedule(seed, 2, (FaultAction.DISK_FULL,), NODES, reference)]
    assert {f.node for f in storage} == {"node0"}


def test_kinds_chaos_cannot_draw_are_refused_with_what_to_do_instead():
    with pytest.raises(UsageError) as unknown:
        parse_kinds("kill,explode")
    # (not the kinds it refuses below: it listed lose and partition, then refused them)
    assert str(unknown.value) == ("--kinds: no fault kind 'explode' (kinds chaos draws: kill, pause, disconnect,"
                                  " restart, preempt, slow, degrade, kill-rank, hang-rank, torn-write, disk-full, lossy, pause:store,"
                                  " disconnect:store)")
    with pytest.raises(UsageError) as partition:
        parse_kinds("partition")
    assert str(partition.value) == ("--kinds: chaos does not draw partitions (their groups are yours to choose: give"
                                    " one to run --fault, e.g. 'partition:node0|node1@t=5..20')")
    with pytest.raises(UsageError) as lose:
        parse_kinds("lose")
    assert str(lose.value).endswith("; give run --fault lose:node1 with --nnodes MIN:MAX")
    with pytest.raises(UsageError) as none:
        parse_kinds(" , ")
    assert str(none.value) == "--kinds: name at least one fault kind, e.g. kill,restart"


def test_store_kinds_are_spelled_as_run_fault_aims_them_and_a_target_chaos_does_not_take_is_refused():
    assert parse_kinds("kill,pause:store, disconnect:store") == (
        ChaosKind(FaultAction.KILL), ChaosKind(FaultAction.PAUSE, on_store=True),
        ChaosKind(FaultAction.DISCONNECT, on_store=True))
    assert [str(kind) for kind in parse_kinds("disconnect:store,disconnect")] == ["disconnect:store", "disconnect"]
    with pytest.raises(UsageError) as restart:
        parse_kinds("kill,restart:store")
    assert str(restart.value) == ("--kinds: restart:store: chaos aims pause or disconnect at the rendezvous store"
                                  " (restart aims at a node)")  # (not kill, which it refuses there)
    with pytest.raises(UsageError) as node:
        parse_kinds("kill:node1")
    assert str(node.value) == ("--kinds: 'kill:node1': chaos draws the node or rank each fault aims at; the one target"
                               " a kind may name is the run's rendezvous store, e.g. kill:store")
    with pytest.raises(UsageError, match="chaos does not draw partitions"):  # (its own words, not a target's)
        parse_kinds("partition:node0|node1")
    # a store's death no torchrun job survives: a check of it could never hold (a trial's DOES NOT HOLD
    # read as its script's fault, until 2026-12-07)
    with pytest.raises(UsageError) as killed:
        parse_kinds("kill,kill:store")
    assert str(killed.value) == ("--kinds: chaos does not draw kill:store: torchrun's agents cannot outlive their"
                                 " rendezvous store, so no job survives its death and the check could never hold;"
                                 " pause:store and disconnect:store test a store that comes back (run --rdzv-store"
                                 " container --fault kill:store@step=N shows how a job ends without it)")


def test_store_kinds_aim_at_the_store_drawn_from_the_seed_and_a_pause_of_it_lasts_long_enough_to_be_felt():
    from orchestrate.chaos.schedule import LASTING_S, STORE_FELT_S

    kinds = (ChaosKind(FaultAction.KILL, on_store=True), *parse_kinds("kill,pause:store,disconnect:store"))  # (the draw
    # aims a kill at the store as it would, though --kinds refuses it)
    reference = Reference(40, 80.0, first_write="ckpt.pt", first_write_s=10.0, first_step_after_write=5)
    drawn = [draw_schedule(seed, 2, kinds, NODES, reference) for seed in range(40)]
    assert drawn == [draw_schedule(seed, 2, kinds, NODES, reference) for seed in range(40)]  # the same seed, the same
    faults = [f for schedule in drawn for f in schedule]
    on_store = [f for f in faults if f.on_store]
    assert {f.action for f in on_store} == {FaultAction.KILL, FaultAction.PAUSE, FaultAction.DISCONNECT}
    assert {f.node for f in faults if f.action is FaultAction.KILL and not f.on_store} <= set(NODES)
    assert all(str(f).startswith(f"{f.action.value}:store@") for f in on_store)
    kills_of_the_store = [f for f in on_store if f.action is FaultAction.KILL]
    assert all(f.at_step is not None for f in kills_of_the_store)  # at a step, as a node's kill
    outages = [f.until_seconds - f.at_seconds for f in on_store if f.action is not FaultAction.KILL]
    assert outages and all(STORE_FELT_S <= round(s, 1) <= LASTING_S for s in outages)
    # stretches too short for 5 s of outage each: refused, naming the kind, not drawn shorter
    short = Reference(None, 20.0)  # 2 s to 18 s: two stretches of 8 s, outages of 4 s at most
    with pytest.raises(UsageError) as refused:
        draw_schedule(1, 2, parse_kinds("pause:store"), NODES, short)
    assert str(refused.value).startswith("--kinds pause:store: the faults fall over the middle of the undisturbed"
                                         " run's 20.0 s job, from 2.0 s to 18.0 s: 16.0 s for 2 fault(s), 4.0 s of"
                                         " store outage each at most")
    # a trial's: the stretch after the first save is the limit, not the whole job (4.3 s each, not 48.1 s)
    after_save = Reference(80, 48.1, first_write="ckpt.pt", first_write_s=25.1, first_step_after_write=2)
    with pytest.raises(UsageError) as refused:
        draw_schedule(2, 2, parse_kinds("kill,pause:store"), NODES, after_save)
    assert str(refused.value) == (
        "--kinds pause:store: the faults fall after the undisturbed run's first write (ckpt.pt, 25.1 s into its 48.1 s"
        " job), from 26.1 s to 43.3 s: 17.2 s for 2 fault(s), 4.3 s of store outage each at most (half its own"
        " stretch), under the 5 s torchrun's agents need to feel it (they call the store every 5 s: a shorter outage"
        " may go unfelt); ask for 1 fault, or train longer (a job of 51.3 s or more, against 48.1 s, gives 2 room)")
    assert draw_schedule(2, 1, parse_kinds("kill,pause:store"), NODES, after_save)  # the 1 fault it names fits
    assert draw_schedule(2, 2, parse_kinds("kill,pause:store"), NODES, replace(after_save, job_s=51.3))
    assert [f.node for f in draw_schedule(1, 2, (ChaosKind(FaultAction.KILL, on_store=True),), NODES, short)] == [
        "store", "store"]
    assert draw_schedule(1, 1, parse_kinds("pause:store"), NODES, short)[0].until_seconds is not None


def test_a_check_with_store_kinds_keeps_every_runs_store_in_a_container_and_says_so_once():
    from orchestrate.chaos.check import chaos_rendezvous
    from orchestrate.config.request import RunRequest

    request = RunRequest.from_options(("train.py",), nodes=2)
    plain, said = chaos_rendezvous(request, parse_kinds("kill,restart"))
    assert (plain.rdzv, plain.rdzv_store, said) == ("c10d", "node0", "")
    stored, said = chaos_rendezvous(request, parse_kinds("kill,pause:store,disconnect:store"))
    assert (stored.rdzv, stored.rdzv_store) == ("c10d", "container")
    assert said == ("every run keeps the rendezvous store in a container of its own (--rdzv-store container), for"
                    " pause:store, disconnect:store to aim at")
    asked, said = chaos_rendezvous(request.replace(rdzv_store="container"), parse_kinds("pause:store"))
    assert asked.rdzv_store == "container" and said == ""  # the user's own choice is not said back


def test_each_runs_copy_of_the_work_directory_leaves_the_runs_directory_out(tmp_path):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "x.txt").write_text("x")
    (work / "runs" / "old-run").mkdir(parents=True)
    for runs_dir in (work / "runs", work):  # ./runs, or the work directory itself (--runs-dir .)
        request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=runs_dir, nodes=2, cpu=True)
        check = ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS)
        base = runs_dir.resolve() / f"chaos-{runs_dir.name}"
        for copy in check.copies(base, ["undisturbed", "with-faults"]):
            assert (copy / "data" / "x.txt").read_text() == "x"
            assert not (copy / "runs").exists() if runs_dir != work else not (copy / base.name).exists()


def test_another_chaos_checks_copies_under_the_work_directory_are_left_out_of_this_ones(tmp_path):
    """Two checks at once whose runs directories lie under one work directory (pytest's
    --basetemp in the project): each copied the other's copies as they grew, until the names
    were too long for the file system."""
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    beside = work / "tmp" / "test_other0" / "runs" / "chaos-20261125-032136-9947a1" / "undisturbed"
    beside.mkdir(parents=True)
    (beside / "big.bin").write_bytes(b"x")
    (work / "train.py").write_text("print('hi')\n")
    (work / "chaos-notes").mkdir()  # a directory of the user's own, named otherwise: copied
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=work / "tmp" / "mine" / "runs", nodes=2,
                                      cpu=True)
    check = ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS)
    [copy] = check.copies((work / "tmp" / "mine" / "runs").resolve() / "chaos-20261125-032137-000000", ["undisturbed"])
    assert (copy / "train.py").is_file() and (copy / "chaos-notes").is_dir()
    assert (copy / "tmp" / "test_other0" / "runs").is_dir()
    assert not (copy / "tmp" / "test_other0" / "runs" / "chaos-20261125-032136-9947a1").exists()


# --- the comparison -------------------------------------------------------------------------

@pytest.fixture
def torch():
    """torch, for the tests that write tensors (the launcher itself runs without it)."""
    return pytest.importorskip("torch")


def compare_by_script(rtol: float, first: Path, second: Path, *paths: str) -> list[dict]:
    """The node's comparison script as a node runs it (``python3 -c`` its text), by this
    interpreter (which has torch): its JSON lines."""
    done = subprocess.run([sys.executable, "-c", COMPARE_SCRIPT, f"{rtol:g}", str(first), str(second), *paths],
                          capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def compare_in_process(rtol: float, first: Path, second: Path, *paths: str) -> list[dict]:
    """The same script's ``main`` with the same arguments, in this process: its JSON lines. A
    process that imports torch anew costs seconds on a slow machine, and these tests run about
    twenty; :func:`compare_by_script` runs the script as a node does."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        compare_tensors.main([f"{rtol:g}", str(first), str(second), *paths])
    return [json.loads(line) for line in printed.getvalue().splitlines()]


class LocalEngine:
    """Stands for the engine's ``containers.run``: the same script, with the mounts as paths."""

    def __init__(self) -> None:
        self.containers = self

    def run(self, image, command, volumes, **kwargs) -> bytes:
        mounts = {spec["bind"]: host for host, spec in volumes.items()}
        args = [mounts.get(a, a) for a in command[3:]]
        return subprocess.run([sys.executable, "-c", command[2], *args], capture_output=True, check=True).stdout


def two_copies(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "undisturbed", tmp_path / "with-faults"
    first.mkdir()
    second.mkdir()
    return first, second


def test_tensors_compare_exactly_and_name_the_largest_difference_and_where(tmp_path, torch):
    first, second = two_copies(tmp_path)
    state = {"model": {"w": torch.ones(3, 3), "b": torch.zeros(3)}, "optimizer": {"state": {0: {"momentum": torch.ones(4)}}},
             "step": 10}
    torch.save(state, first / "final.pt")
    torch.save(state, second / "same.pt")
    torch.save(state, first / "same.pt")
    changed = {**state, "optimizer": {"state": {0: {"momentum": torch.tensor([1.0, 1.23, 1.0, 0.9])}}}}
    torch.save(changed, second / "final.pt")
    rows = {r["path"]: r for r in compare_by_script(0.0, first, second, "final.pt", "same.pt")}
    assert rows == {r["path"]: r for r in compare_in_process(0.0, first, second, "final.pt", "same.pt")}
    assert rows["same.pt"]["equal"] is True and rows["same.pt"]["max_difference"] == 0.0
    assert rows["same.pt"]["where"] == ""  # no key is the largest where none differs
    assert rows["final.pt"]["equal"] is False
    assert rows["final.pt"]["max_difference"] == pytest.approx(0.23, abs=1e-6)
    assert rows["final.pt"]["where"] == "optimizer.state.0.momentum"


class SelfHolding:
    """An object that holds itself and whose == refuses (a compared file may hold anything)."""

    def __init__(self):
        self.me = self

    def __eq__(self, other):
        raise TypeError("no")


def test_a_whole_model_numpy_arrays_and_other_objects_compare_by_their_values(tmp_path, torch):
    """torch.save(model) compared the modules by identity (never equal); numpy arrays' elementwise
    == failed the check with no verdict."""
    import numpy

    first, second = two_copies(tmp_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    torch.save(model, first / "model.pt")
    torch.save(model, second / "model.pt")
    torch.save({"w": numpy.array([1.0, 2.0]), "n": numpy.float64(3.0)}, first / "arrays.pt")
    torch.save({"w": numpy.array([1.0, 2.0]), "n": numpy.float64(3.0)}, second / "arrays.pt")
    rows = {r["path"]: r for r in compare_in_process(0.0, first, second, "model.pt", "arrays.pt")}
    assert rows["model.pt"]["equal"] is True and rows["arrays.pt"]["equal"] is True, rows
    with torch.no_grad():
        model[0].bias += 0.5
    torch.save(model, second / "model.pt")
    torch.save({"w": numpy.array([1.0, 2.25]), "n": numpy.float64(3.0)}, second / "arrays.pt")
    rows = {r["path"]: r for r in compare_in_process(0.0, first, second, "model.pt", "arrays.pt")}
    assert (rows["model.pt"]["equal"], rows["model.pt"]["where"]) == (False, "0.bias")
    assert rows["model.pt"]["max_difference"] == pytest.approx(0.5)
    assert (rows["arrays.pt"]["equal"], rows["arrays.pt"]["where"]) == (False, "w")
    assert rows["arrays.pt"]["max_difference"] == pytest.approx(0.25)
    # arrays torch cannot hold (strings, a reversed view), an optimizer saved whole, and an object that holds itself
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for base in (first, second):
        torch.save({"names": numpy.array(["cat", "dog"]), "back": numpy.arange(4.0)[::-1], "opt": optimizer,
                    "loop": SelfHolding()}, base / "odd.pt")
    [odd] = compare_in_process(0.0, first, second, "odd.pt")
    assert odd["loadable"] and odd["equal"] is False and "loop" in odd["where"], odd  # no crash: said, not equal
    for base in (first, second):
        torch.save({"names": numpy.array(["cat", "dog"]), "back": numpy.arange(4.0)[::-1], "opt": optimizer},
                   base / "odd.pt")
    assert compare_in_process(0.0, first, second, "odd.pt")[0]["equal"] is True


def test_a_relative_tolerance_lets_small_differences_pass_and_not_large_ones(tmp_path, torch):
    first, second = two_copies(tmp_path)
    torch.save({"w": torch.tensor([1.0, 2.0])}, first / "a.pt")
    torch.save({"w": torch.tensor([1.0, 2.0 + 1e-5])}, second / "a.pt")
    assert compare_in_process(0.0, first, second, "a.pt")[0]["equal"] is False
    assert compare_in_process(1e-4, first, second, "a.pt")[0]["equal"] is True
    torch.save({"w": torch.tensor([1.0, 2.1])}, second / "a.pt")
    assert compare_in_process(1e-4, first, second, "a.pt")[0]["equal"] is False


def test_a_difference_as_small_as_float_rounding_says_how_small_and_the_rtol_that_accepts_it(tmp_path, torch):
    """A trial's fpnoise: "final.pt: differs (tensors; largest difference 8.94e-08 at 0.weight)"
    said nothing of its relative size nor of --rtol."""
    first, second = two_copies(tmp_path)
    torch.save({"w": torch.tensor([1.0, 4.0]), "lr": 0.5}, first / "a.pt")
    torch.save({"w": torch.tensor([1.0, 4.0 * (1 + 2e-7)]), "lr": 0.5}, second / "a.pt")
    [row] = compare_in_process(0.0, first, second, "a.pt")
    assert row["rtol_needed"] == pytest.approx(2e-7, rel=0.3)  # (float32's rounding of the changed value)
    comparison = FileComparison("a.pt", "tensors", row["equal"], row["max_difference"], row["where"],
                                rtol_needed=row["rtol_needed"])
    assert comparison.describe() == (f"a.pt: differs (tensors; largest difference {row['max_difference']:.3g} at w;"
                                     f" at most {row['rtol_needed']:.2g} of any value, the size of float rounding:"
                                     " --rtol 1e-06 accepts such noise)")
    assert compare_in_process(1e-6, first, second, "a.pt")[0]["equal"] is True  # as it says
    # a difference beyond rounding, a value against 0, a shape: no such words
    torch.save({"w": torch.tensor([1.0, 4.1]), "lr": 0.5}, second / "a.pt")
    [far] = compare_in_process(0.0, first, second, "a.pt")
    assert "--rtol" not in FileComparison("a.pt", "tensors", False, far["max_difference"], "w",
                                          rtol_needed=far["rtol_needed"]).describe()
    torch.save({"w": torch.tensor([1e-9, 4.0]), "lr": 0.5}, first / "a.pt")  # against 0: no tolerance accepts it
    torch.save({"w": torch.tensor([0.0, 4.0]), "lr": 0.5}, second / "a.pt")
    assert compare_in_process(0.0, first, second, "a.pt")[0]["rtol_needed"] is None
    torch.save({"w": torch.tensor([0.0]), "lr": 0.5}, second / "a.pt")
    assert compare_in_process(0.0, first, second, "a.pt")[0]["rtol_needed"] is None
    # and a comparison already within --rtol says its tolerance, not another
    assert FileComparison("a.pt", "tensors", False, 1e-7, "w", rtol=1e-9, rtol_needed=2e-7).float_noise == ""


def test_numpy_scalars_compare_as_numbers_within_the_tolerance_too(tmp_path, torch):
    """np.float32 is no Python float: its loss compared exactly whatever --rtol said."""
    import numpy

    first, second = two_copies(tmp_path)
    torch.save({"loss": numpy.float32(0.5), "step": numpy.int64(7)}, first / "m.pt")
    torch.save({"loss": numpy.float32(0.5000001), "step": numpy.int64(7)}, second / "m.pt")
    [exact] = compare_in_process(0.0, first, second, "m.pt")
    assert (exact["equal"], exact["where"]) == (False, "loss") and 0 < exact["max_difference"] < 1e-6, exact
    assert compare_in_process(1e-4, first, second, "m.pt")[0]["equal"] is True
    torch.save({"loss": numpy.float32(0.5000001), "step": numpy.int64(8)}, second / "m.pt")  # a count is exact
    [count] = compare_in_process(1e-4, first, second, "m.pt")
    assert count["equal"] is False and count["where"].startswith("step"), count
    # np.longdouble's item() is one of numpy's scalars again: compared as it is, not walked for ever
    for base in (first, second):
        torch.save({"wide": numpy.longdouble(1.5)}, base / "wide.pt")
    [wide] = compare_in_process(0.0, first, second, "wide.pt")
    assert wide["equal"] is True, wide


def test_a_changed_shape_or_key_is_a_difference_without_a_number(tmp_path, torch):
    first, second = two_copies(tmp_path)
    torch.save({"w": torch.zeros(2), "extra": 1}, first / "a.pt")
    torch.save({"w": torch.zeros(2)}, second / "a.pt")
    torch.save({"w": torch.zeros(2)}, first / "b.pt")
    torch.save({"w": torch.zeros(3)}, second / "b.pt")
    rows = compare_in_process(0.0, first, second, "a.pt", "b.pt")
    assert [r["equal"] for r in rows] == [False, False]
    assert [r["max_difference"] for r in rows] == [None, None]
    assert "keys differ: ['extra']" in rows[0]["where"] and "shape (2,)" in rows[1]["where"]


def test_files_torch_cannot_load_compare_byte_for_byte_and_a_missing_file_is_named(tmp_path, torch):
    first, second = two_copies(tmp_path)
    (first / "log.txt").write_text("loss 0.5\n")
    (second / "log.txt").write_text("loss 0.5\n")
    (first / "metrics.txt").write_text("acc 0.9\n")
    (second / "metrics.txt").write_text("acc 0.8\n")
    (first / "only-here.pt").write_text("x")
    comparisons = compare_files(LocalEngine(), "img", first, second, ["log.txt", "metrics.txt", "only-here.pt"], 0.0)
    assert [(c.path, c.kind, c.equal) for c in comparisons] == [
        ("log.txt", "bytes", True), ("metrics.txt", "bytes", False), ("only-here.pt", "bytes", False)]
    assert comparisons[2].describe() == "only-here.pt: missing in the run with faults"


# --- attempts, strikes and steps redone ------------------------------------------------------

def steps(rank: int, attempt: str, numbers, start: float, counted: bool = True, **metrics) -> list[ProgressRecord]:
    return [ProgressRecord(rank, start + i, step=n, attempt=attempt, counted=counted, metrics=dict(metrics))
            for i, n in enumerate(numbers)]


def fired(spec: str, at: float, step: int = 0) -> FaultRecord:
    return FaultRecord(spec, "node1", elapsed_s=at - 100.0, step=step, fired_time=at)


def test_an_attempt_that_resumed_says_where_from_and_the_fault_before_it_what_was_redone():
    # Adam's carried count: the next attempt says it resumed from step 4 and counts on from 5
    records = steps(0, "a", range(1, 7), 101.0) + [ProgressRecord(0, 110.0, resumed=4, attempt="b")] \
        + steps(0, "b", range(5, 11), 111.0) + steps(1, "c", range(1, 7), 101.0)
    attempts = attempts_of(records, reference_steps=10, completed=True)
    assert [(a.token, a.offset, a.count) for a in attempts] == [("a", 0, 6), ("b", 4, 6)]
    writes = [WrittenFile("ckpt/step_3/model.pt", 103.5), WrittenFile("final.pt", 116.5)]
    [strike] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts, writes)
    assert (strike.steps_done, strike.training_s, strike.saved, strike.resumed_from, strike.redone) == (
        6, 5.5, ("ckpt/step_3/model.pt",), 4, 2)
    assert strike.describe_next() == "resumed from step 4: 2 step(s) redone"
    assert strike.describe_saved() == "yes: ckpt/step_3/model.pt"
    assert steps_redone(attempts, 10) == 2
    # a group made at start-up is before the attempt's work: the attempt begins at its own records
    made = [ProgressRecord(0, 90.0, attempt="a", init_call={"rank": 0, "world_size": 2})]
    assert [a.first_time for a in attempts_of(made + records, 10, completed=True)] == [101.0, 110.0]
    # ... and so is the call as it was made, before the group was
    asked = [ProgressRecord(0, 89.0, attempt="a", init_asked={"rank": 0, "world_size": 2})]
    assert [a.first_time for a in attempts_of(asked + made + records, 10, completed=True)] == [101.0, 110.0]


def test_a_resumed_record_alone_makes_an_attempt_and_says_where_it_started_whatever_else_would():
    # the second attempt said it resumed from step 2 (not 10 - 6 = 4, which the reference would
    # give); the third died after saying it resumed, before its first step; a rank's token with
    # neither a step nor a resume is no attempt
    records = (steps(0, "a", range(1, 7), 101.0) + [ProgressRecord(0, 110.0, resumed=2, attempt="b")]
               + steps(0, "b", range(3, 9), 111.0) + [ProgressRecord(0, 120.0, resumed=8, attempt="c"),
                                                      ProgressRecord(0, 121.0, attempt="d", finished=True)])
    attempts = attempts_of(records, reference_steps=10, completed=True)
    assert [(a.token, a.resumed, a.offset, a.count) for a in attempts] == [
        ("a", None, 0, 6), ("b", 2, 2, 6), ("c", 8, 8, 0)]
    # the last attempt's start is the reference's less its steps only for a job that completed
    counted = steps(0, "a", range(1, 7), 101.0) + steps(0, "b", range(1, 5), 111.0)
    assert [a.offset for a in attempts_of(counted, reference_steps=10)] == [0, None]
    assert [a.offset for a in attempts_of(counted, reference_steps=10, completed=True)] == [0, 6]
    assert attempts_of([ProgressRecord(0, 100.0, attempt="a", finished=True)]) == []  # no rank reported a step


def test_where_the_job_ended_is_what_its_last_attempts_own_records_say_never_the_undisturbed_runs():
    from orchestrate.chaos.attempts import ended_at

    def end(records):
        return ended_at(attempts_of(records, reference_steps=30, completed=True), records)

    # Adam's carried count: resumed from 12, then 13 steps counted on (a loop that skipped 5): step 25
    skipped = (steps(0, "a", range(1, 17), 101.0) + [ProgressRecord(0, 120.0, resumed=12, attempt="b")]
               + steps(0, "b", range(13, 26), 121.0))
    assert end(skipped) == 25
    # steps the script reports are the job's own; one attempt alone counted from the beginning
    reported = steps(0, "a", range(1, 9), 101.0, counted=False) + steps(0, "b", range(7, 29), 111.0, counted=False)
    assert end(reported) == 28
    assert end(steps(0, "a", range(1, 28), 101.0)) == 27
    # its highest step, not its last reported (a script that reports an epoch's number after its steps)
    assert end(reported + steps(0, "b", [3], 140.0, counted=False)) == 28
    # counted with no carried count: where it began is only assumed from the undisturbed run's end
    counted = steps(0, "a", range(1, 7), 101.0) + steps(0, "b", range(1, 20), 111.0)
    assert end(counted) is None
    # a last attempt that did one counted step reports none (the counter holds it for a second):
    # its group and its end are all it says, and where the job ended is not known
    one_step = skipped + [ProgressRecord(0, 150.0, attempt="c", init_call={"backend": "gloo"}),
                          ProgressRecord(0, 151.0, attempt="c", finished=True, after_step=None)]
    assert end(one_step) is None
    # a DataLoader worker's write, under a token of its own, is no attempt of the job
    assert end(skipped + [ProgressRecord(0, 130.0, attempt="loader", wrote="cache.pt")]) == 25
    assert ended_at([], []) is None


def test_a_resume_that_skipped_steps_does_not_hold_and_the_steps_done_are_the_attempts_own(make_job, tmp_path):
    # resumed from step 12 (Adam's count) but its loop went on from 17: 26 steps done, ending at
    # step 25. It said HOLDS, with "steps redone 0 (30 done against 30 undisturbed)".
    verdict = verdict_of(make_job, tmp_path, [strike(resumed_from=12, redone=4)], steps_done=26, ended_at_step=25)
    verdict.steps_redone = 0
    assert verdict.status == "DOES NOT HOLD" and verdict.steps_skipped == 5
    assert verdict.failures == ["the job ended at step 25, the undisturbed run at step 30: 5 step(s) it did were"
                                " never done under the faults (after kill:node1@step=12 it resumed from step 12 and"
                                " did 13 step(s) more, where the undisturbed run did 18 after step 12: a resume went"
                                " on past the step it restored, as a loop from the saved step + 2 does)"]
    assert "| steps redone 0 (26 done against 30 undisturbed) |" in verdict.format()
    # its row says the steps skipped beside those redone (the script's own numbering: no word on whose)
    assert verdict.fault_rows()[0][4] == "resumed from step 12: 4 step(s) redone, 5 skipped"
    # one that ended where the undisturbed run ended, or whose end is not known, is not held to it
    assert verdict_of(make_job, tmp_path, [strike()], steps_done=33, ended_at_step=30).status == "HOLDS"
    assert verdict_of(make_job, tmp_path, [strike()], steps_done=26).status == "HOLDS"
    # one that did all the undisturbed run's steps beside those redone, numbered short (a counter that took
    # the carried count of an optimizer that steps every other step, or a skip): not known, so never a hold
    misnumbered = replace(verdict_of(make_job, tmp_path, [strike(redone=1)], steps_done=31, ended_at_step=20),
                          comparisons=[])
    assert misnumbered.status == "INCONCLUSIVE" and misnumbered.steps_skipped == 0
    assert misnumbered.inconclusive[0].startswith(
        "the job ended at step 20, the undisturbed run at step 30, by its attempts' numbering, though it did 31"
        " step(s) in all with 1 redone: whether a step was skipped is not known")
    # what it saved, compared equal, says it did them all
    assert replace(misnumbered, comparisons=[FileComparison("final.pt", "tensors", True, 0.0, "w")]).status == "HOLDS"
    # nor one that did not complete: its failure says why
    failed = verdict_of(make_job, tmp_path, [strike()], ended_at_step=20)
    failed.disturbed = result(make_job, tmp_path, ok=False, faults=[KILL], run_id="dis")
    assert failed.steps_skipped == 0 and not any("never done" in reason for reason in failed.failures)


def test_a_resume_that_skipped_the_step_after_its_save_and_redid_one_never_holds(make_job, tmp_path):
    # skip_step/train.py: saved step 18, killed after step 19; it resumed at step 20 (the saved step + 2). Adam's
    # carried count numbers the resumed attempt from 19: it did 21 steps, 19 to 39. 40 steps in all, as the
    # undisturbed run's, one of them redone: it said "steps redone 0 (40 done against 40 undisturbed)" and
    # HOLDS, though its row said "resumed from step 18: 1 step(s) redone" and it ended at step 39
    from orchestrate.chaos.attempts import ended_at
    records = (steps(0, "a", range(1, 20), 101.0) + [ProgressRecord(0, 121.0, resumed=18, attempt="b")]
               + steps(0, "b", range(19, 40), 121.0))
    attempts = attempts_of(records, reference_steps=40, completed=True)
    writes = [WrittenFile("ckpt.pt", 101.5)]
    kill = fired("kill:node0@step=19", 119.2, 19)
    struck = strikes([kill], attempts, writes)
    assert (struck[0].resumed_from, struck[0].redone) == (18, 1)
    done = sum(a.count for a in attempts)
    verdict = ChaosVerdict(1, result(make_job, tmp_path, run_id="ref"),
                           result(make_job, tmp_path, faults=[kill], run_id="dis"), [kill.spec],
                           facts=Reference(40, 13.0, "ckpt.pt", 1.0, 2), strikes=struck,
                           steps_redone=steps_redone(attempts, 40, struck), steps_done=done,
                           ended_at_step=ended_at(attempts, records))
    assert (done, verdict.ended_at_step, verdict.steps_redone, verdict.steps_skipped) == (40, 39, 1, 1)
    assert verdict.status == "DOES NOT HOLD" and verdict.exit_code == 1
    assert verdict.failures == [
        "the job ended at step 39 by its optimizer's count, the undisturbed run at step 40: 1 step(s) it did were"
        " never done under the faults (after kill:node0@step=19 it resumed from step 18 and did 21 step(s) more, where"
        " the undisturbed run did 22 after step 18: a resume went on past the step it restored, as a loop from the"
        " saved step + 2 does; such a loop numbers its steps 1 ahead of the optimizer's count from the resume on, so"
        " the last it prints is step 40)"]
    # the row and the summary agree on the steps redone, and the row does not read as a clean resume: the
    # steps skipped, in the verdict's numbering, which is the optimizer's (the script printed steps 20 to 40)
    text = verdict.format()
    assert ("resumed from step 18: 1 step(s) redone, 1 skipped (steps by the optimizer's count)" in text
            and "| steps redone 1 (40 done against 40 undisturbed) |" in text)


def test_a_resume_that_redid_nothing_and_skipped_a_step_has_a_row_that_does_not_read_as_clean(make_job, tmp_path):
    # a trial's ckpt_train.py --bug off-by-one: saved step 6, killed at step 6, its loop went on from step 8; Adam's
    # count numbers that attempt 7 to 23. The row said "resumed from step 6 (...): 0 step(s) redone" under a
    # verdict that said a step was never done: it read as a clean resume
    from orchestrate.chaos.attempts import ended_at
    records = (steps(0, "a", range(1, 7), 101.0) + [ProgressRecord(0, 121.0, resumed=6, attempt="b")]
               + steps(0, "b", range(7, 24), 121.0))
    attempts = attempts_of(records, reference_steps=24, completed=True)
    kill = fired("kill:node1@step=6", 107.5, 6)
    struck = strikes([kill], attempts, [WrittenFile("ckpt.pt", 103.5)])
    verdict = ChaosVerdict(0, result(make_job, tmp_path, run_id="ref"),
                           result(make_job, tmp_path, faults=[kill], run_id="dis"), [kill.spec],
                           facts=Reference(24, 13.0, "ckpt.pt", 1.0, 4), strikes=struck,
                           steps_redone=steps_redone(attempts, 24, struck), steps_done=sum(a.count for a in attempts),
                           ended_at_step=ended_at(attempts, records))
    assert (verdict.steps_redone, verdict.ended_at_step, verdict.steps_skipped) == (0, 23, 1)
    assert verdict.fault_rows()[0][4] == "resumed from step 6: 0 step(s) redone, 1 skipped (steps by the optimizer's count)"
    assert verdict.failures[0].startswith("the job ended at step 23 by its optimizer's count, the undisturbed run at"
                                          " step 24: 1 step(s) it did were never done under the faults")
    assert verdict.failures[0].endswith("numbers its steps 1 ahead of the optimizer's count from the resume on, so the"
                                        " last it prints is step 24)")
    # a fault before it, which the job resumed after cleanly, keeps its clean row: the skip is the last resume's
    earlier = fired("kill:node1@step=3", 95.0, 3)
    records = (steps(0, "z", range(1, 4), 90.0) + [ProgressRecord(0, 100.5, resumed=3, attempt="a")]
               + steps(0, "a", range(4, 7), 101.0) + records[6:])
    attempts = attempts_of(records, reference_steps=24, completed=True)
    both = strikes([earlier, kill], attempts, [WrittenFile("ckpt.pt", 92.5)])
    two = replace(verdict, schedule=[earlier.spec, kill.spec], strikes=both,
                  disturbed=result(make_job, tmp_path, faults=[earlier, kill], run_id="dis2"))
    assert [row[4] for row in two.fault_rows()] == [
        "resumed from step 3: 0 step(s) redone",
        "resumed from step 6: 0 step(s) redone, 1 skipped (steps by the optimizer's count)"]


def test_an_attempts_step_is_the_jobs_once_its_start_is_known():
    from orchestrate.chaos.attempts import Attempt
    assert Attempt("b", 1.0, [(1, 2.0)], counted=True, offset=10).job_step(3) == 13
    assert Attempt("b", 1.0, [(1, 2.0)], counted=True).job_step(3) is None
    assert Attempt("b", 1.0, [(7, 2.0)], counted=False).job_step(7) == 7  # the script's own numbers


def test_each_strike_is_read_whole_with_what_is_not_known_said_so():
    from orchestrate.chaos.attempts import lasts
    # counted steps: the second attempt's start is not known (the job did not complete)
    attempts = attempts_of(steps(0, "a", range(1, 7), 101.0) + steps(0, "b", range(1, 5), 111.0), 10)
    [kill] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts, None)  # the work directory not followed
    assert kill == Strike("kill:node1@step=6", 6.5, 6, 6, 5.5, None, True, None, None, next_counted=True)
    assert (kill.describe_struck(), kill.describe_saved()) == ("6 step(s), 5.5 s training", "unknown")
    assert kill.describe_next() == ("started from a step not known (its steps were counted from 1 and no rank said where"
                                    " it resumed: an optimizer that carries no step count, or one whose state was not"
                                    " loaded)")
    assert Strike("k", 1.0, 3, 3, None, (), True, 5, None).describe_struck() == "3 step(s)"
    assert Strike("k", 1.0, 3, 3, None, (), True, 5, None).describe_next() == "resumed from step 5"
    assert Strike("k", 1.0, 3, 3, None, (), True, 0, None).describe_next() == "restarted from the beginning"
    # a fault with no time it fired at is not placed; one before the first attempt struck its start-up
    assert strikes([FaultRecord("kill:node1@t=1", "node1", elapsed_s=1.0)], attempts, []) == []
    [early] = strikes([fired("kill:node1@t=0.5", 100.5)], attempts, [])
    assert (early.steps_done, early.describe_struck(), early.training_s, early.saved) == (
        0, "in its start-up (no step yet)", None, ())
    # a fault between an attempt's resume and its first step struck it with no step done
    resumed = attempts_of([ProgressRecord(0, 101.0, resumed=4, attempt="a")] + steps(0, "a", range(5, 9), 103.0)
                          + steps(0, "b", range(5, 9), 111.0, counted=False))
    [between] = strikes([fired("kill:node1@t=2", 102.0)], resumed, [])
    assert (between.steps_done, between.restarted, between.resumed_from, between.redone) == (0, True, 4, None)
    # a rank read a step behind the launcher: the step the fault fired at counts, not the one after
    behind = attempts_of(steps(0, "a", [1, 2], 101.0) + [ProgressRecord(0, 103.2, step=3, attempt="a", counted=True),
                                                          ProgressRecord(0, 104.0, step=4, attempt="a", counted=True)])
    [at_three] = strikes([fired("kill:node1@step=3", 103.0, 3)], behind, [])
    assert at_three.steps_done == 3
    assert (lasts("pause:node1@t=5..10"), lasts("kill:node1@t=5"), lasts("no such fault")) == (True, False, False)


def test_steps_redone_are_every_attempts_less_the_undisturbed_runs():
    attempts = attempts_of(steps(0, "a", range(1, 7), 101.0) + steps(0, "b", range(1, 5), 111.0), 10)
    assert (steps_redone(attempts, 10), steps_redone(attempts, 12), steps_redone(attempts, None),
            steps_redone([], 10)) == (0, 0, None, None)


def test_counted_steps_without_a_carried_count_resume_as_far_as_the_last_attempt_tells():
    # SGD: every attempt counts from 1; the last one of a completed job did 10 - 4 steps: from step 4
    records = steps(0, "a", range(1, 7), 101.0) + steps(0, "b", range(1, 7), 111.0)
    [strike] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts_of(records, 10, completed=True), [])
    assert (strike.resumed_from, strike.redone, strike.resumed) == (4, 2, True)
    assert strike.describe_saved() == "no"
    # the job did not complete: the last attempt's start cannot be told
    saved = [WrittenFile("ckpt.pt", 103.0)]
    [unknown] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts_of(records, 10, completed=False), saved)
    assert unknown.resumed_from is None and unknown.resumed is None
    # with nothing saved before the fault there was nothing to resume from
    [nothing] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts_of(records, 10, completed=False), [])
    assert nothing.describe_next() == "restarted from the beginning: 6 step(s) redone"
    # ... and so its steps are the job's: a fault striking it knows how far it had got
    three = records + steps(0, "c", range(1, 11), 121.0)
    _, second = strikes([fired("kill:node1@step=6", 106.5, 6), fired("kill:node0@step=+5", 115.5, 5)],
                        attempts_of(three, 10, completed=True), [])
    assert (second.resumed_from, second.redone) == (0, 5)
    assert unknown.describe_next() == ("started from a step not known (its steps were counted from 1 and no rank said"
                                       " where it resumed: an optimizer that carries no step count, or one whose"
                                       " state was not loaded)")
    # a restart from the beginning: 10 steps again
    again = steps(0, "a", range(1, 7), 101.0) + steps(0, "b", range(1, 11), 111.0)
    attempts = attempts_of(again, 10, completed=True)
    [fresh] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts, [])
    assert fresh.describe_next() == "restarted from the beginning: 6 step(s) redone" and fresh.resumed is False
    assert steps_redone(attempts, 10) == 6


def test_a_job_that_saves_but_never_loads_is_said_to_have_never_resumed_from_its_save(make_job, tmp_path):
    """A trial's scratch/train.py: Adam, a save every step, no load. Every attempt counts from 1
    with no carried count; the last did all 40 steps again, so the one between them started over
    too (not "a step not known"), and the verdict names the save, each fault it started over
    after and the steps redone (33, as the summary line), never "?" nor "could not have caught"."""
    records = (steps(0, "a", range(1, 5), 101.0) + steps(0, "b", range(1, 30), 120.0)
               + steps(0, "c", range(1, 41), 160.0))
    attempts = attempts_of(records, 40, completed=True)
    assert [a.offset for a in attempts] == [0, 0, 0]
    faults = [fired("restart:node1@step=4", 104.5, 4), fired("restart:node1@step=+29", 149.5, 29)]
    first, second = strikes(faults, attempts, [WrittenFile("ckpt.pt", 101.5)])
    assert first.describe_next() == "restarted from the beginning: 4 step(s) redone"
    assert second.describe_next() == "restarted from the beginning: 29 step(s) redone"
    trial = ChaosVerdict(0, result(make_job, tmp_path, run_id="ref"),
                         result(make_job, tmp_path, faults=faults, job_s=55.1, run_id="dis"), [f.spec for f in faults],
                         [FileComparison("final.pt", "tensors", True, 0.0)], facts=Reference(40, 18.7, "ckpt.pt", 1.0, 2),
                         strikes=[first, second], steps_redone=steps_redone(attempts, 40), steps_done=73)
    assert trial.status == "INCONCLUSIVE" and trial.exit_code == 1
    assert trial.inconclusive == [
        "the job never resumed from what it saved: after each of restart:node1@step=4, restart:node1@step=+29 it"
        " restarted from the beginning although it had written ckpt.pt: 33 step(s) redone in all (73 done against"
        " 40 undisturbed); the records show ckpt.pt written, not whether it was read: if it is the save the job"
        " should resume from, its resume never ran (a load skipped, or a path that differs); --max-steps-redone N"
        " (the steps a resume from it may redo: those between two saves) makes a run that starts over not hold"]
    text = trial.format()
    assert "VERDICT INCONCLUSIVE: the job never resumed from what it saved:" in text.splitlines()
    assert "could not have caught" not in text and "?" not in text
    assert replace(trial, max_steps_redone=1).status == "DOES NOT HOLD"
    # an attempt between two that is not followed by one that started over stays not known
    resumed_last = steps(0, "a", range(1, 5), 101.0) + steps(0, "b", range(1, 30), 120.0) + steps(
        0, "c", range(1, 8), 160.0)
    assert [a.offset for a in attempts_of(resumed_last, 40, completed=True)] == [0, None, 33]


def test_a_job_that_saves_with_torch_save_and_loads_nothing_after_the_fault_does_not_hold(make_job, tmp_path):
    """A resume that looks for another file name: the job torch.saves ckpt.pt, and after the
    fault no rank loads anything it wrote (only pretrained weights elsewhere): its resume never
    ran, and the trial names it, DOES NOT HOLD, where until 2026-12-07 it was inconclusive."""
    records = (steps(0, "a", range(1, 7), 101.0, counted=False) + steps(0, "b", range(1, 11), 111.0, counted=False)
               + [ProgressRecord(0, 102.5, wrote="ckpt.pt", torch_save=True),
                  ProgressRecord(0, 103.0, loaded="ckpt.pt", attempt="a"),  # the first attempt's: before the fault
                  ProgressRecord(0, 110.2, loaded="/root/.cache/resnet.pth", attempt="b")])
    attempts = attempts_of(records, 10, completed=True)
    assert [(a.offset, a.first_time) for a in attempts] == [(0, 101.0), (0, 111.0)]  # a load is its start-up's
    faults = [fired("kill:node1@step=6", 106.5, 6)]
    [skipped] = strikes(faults, attempts, [WrittenFile("ckpt.pt", 102.5)], records)
    assert (skipped.torch_save, skipped.resume_skipped, skipped.loaded_and_started_over) == ("ckpt.pt", True, False)
    assert skipped.describe_next() == "restarted from the beginning, loading no file it had written: 6 step(s) redone"
    trial = ChaosVerdict(0, result(make_job, tmp_path, run_id="ref"),
                         result(make_job, tmp_path, faults=faults, run_id="dis"), [f.spec for f in faults],
                         facts=Reference(10, 18.7, "ckpt.pt", 1.0, 2), strikes=[skipped],
                         steps_redone=steps_redone(attempts, 10), steps_done=16)
    assert trial.status == "DOES NOT HOLD" and trial.inconclusive == []
    assert trial.failures == [
        "its resume never ran: after kill:node1@step=6 the job restarted from the beginning (6 step(s) redone) although"
        " it had written ckpt.pt with torch.save, and no rank loaded ckpt.pt, or any file it had written, with"
        " torch.load after the fault; it loaded only /root/.cache/resnet.pth, loaded by rank 0 (a resume that looks"
        " for another path, a flag it was not given, or a check for a file it never writes)"]
    assert replace(trial, max_steps_redone=10).status == "DOES NOT HOLD"  # whatever the steps redone allow
    # loads not followed (records not given), or a save not by torch.save: inconclusive, as before
    [unfollowed] = strikes(faults, attempts, [WrittenFile("ckpt.pt", 102.5)])
    assert unfollowed.loaded is None and not unfollowed.resume_skipped
    plain = [r for r in records if not r.wrote] + [ProgressRecord(0, 102.5, wrote="ckpt.pt")]
    [written] = strikes(faults, attempts, [WrittenFile("ckpt.pt", 102.5)], plain)
    assert written.torch_save == "" and not written.resume_skipped
    trial = replace(trial, strikes=[written])
    assert trial.status == "INCONCLUSIVE"
    assert ("although it had written ckpt.pt: 6 step(s) redone in all (16 done against 10 undisturbed); ckpt.pt was not"
            " written by torch.save or dcp.save, and no rank loaded it with torch.load or dcp.load after it; it loaded"
            " only /root/.cache/resnet.pth, loaded by rank 0 with torch.load, so whether the job reads it back some"
            " other way is not known: if it is the save") in trial.inconclusive[0]
    # a load from a stream (a file not known): the job may have read its save so
    stream = records + [ProgressRecord(1, 110.4, loaded="")]
    [unknown] = strikes(faults, attempts, [WrittenFile("ckpt.pt", 102.5)], stream)
    assert not unknown.resume_skipped and replace(trial, strikes=[unknown]).status == "INCONCLUSIVE"
    assert "rank(s) 1 loaded a stream with torch.load after it, whose file is not known" in replace(
        trial, strikes=[unknown]).inconclusive[0]
    # a save through a temporary file renamed onto it is named by the save it made
    renamed = [r for r in records if not r.wrote] + [ProgressRecord(0, 102.5, wrote="ckpt.pt.tmp", torch_save=True)]
    [tmp] = strikes(faults, attempts, [WrittenFile("ckpt.pt.tmp", 102.4, kept=False), WrittenFile("ckpt.pt", 102.5)],
                    renamed)
    assert (tmp.torch_save, tmp.resume_skipped) == ("ckpt.pt", True)
    # a save under /shared (not in the work directory's files) beside a log there: the save is named, not
    # the log (a review: "it had written train.log with torch.save"), and a load of it is a load of the save
    shared = [r for r in records if not r.wrote] + [ProgressRecord(0, 102.5, wrote="/shared/ckpt.pt", torch_save=True)]
    log = [WrittenFile("train.log", 101.2)]
    [named] = strikes(faults, attempts, log, shared)
    assert (named.torch_save, named.resume_skipped) == ("/shared/ckpt.pt", True)
    [read] = strikes(faults, attempts, log, shared + [ProgressRecord(1, 110.4, loaded="/shared/ckpt.pt")])
    assert (read.resume_skipped, read.loaded_and_started_over) == (False, True)
    # a kept file first seen before the torch.save of one no longer there is not its rename
    [early_log] = strikes(faults, attempts, log + [WrittenFile("ckpt.pt.tmp", 102.4, kept=False)],
                          [r for r in records if not r.wrote] + [ProgressRecord(0, 102.5, wrote="ckpt.pt.tmp",
                                                                                 torch_save=True)])
    assert early_log.torch_save == "ckpt.pt.tmp"


def test_a_job_that_loaded_its_save_after_the_fault_and_started_over_does_not_hold_and_one_that_resumed_says_so(
        make_job, tmp_path):
    """Loaded ckpt.pt and still numbered its steps from 1 (the step it was saved at not taken
    up, or a stale file): the trial names the file and the rank, DOES NOT HOLD; a resume from it
    says in its row which file was loaded, by which rank."""
    saves = [ProgressRecord(0, 102.5, wrote="ckpt.pt", torch_save=True)]
    loads = [ProgressRecord(0, 110.3, loaded="ckpt.pt"), ProgressRecord(1, 110.4, loaded="ckpt.pt")]
    over = steps(0, "a", range(1, 7), 101.0, counted=False) + steps(0, "b", range(1, 11), 111.0, counted=False)
    faults = [fired("kill:node1@step=6", 106.5, 6)]
    [started_over] = strikes(faults, attempts_of(over + saves + loads, 10, completed=True),
                             [WrittenFile("ckpt.pt", 102.5)], over + saves + loads)
    assert (started_over.loaded_and_started_over, started_over.resume_skipped) == (True, False)
    assert started_over.describe_next() == ("restarted from the beginning though it loaded ckpt.pt, loaded by ranks 0,"
                                            " 1: 6 step(s) redone")
    trial = ChaosVerdict(0, result(make_job, tmp_path, run_id="ref"),
                         result(make_job, tmp_path, faults=faults, run_id="dis"), [f.spec for f in faults],
                         facts=Reference(10, 18.7, "ckpt.pt", 1.0, 2), strikes=[started_over], steps_redone=6,
                         steps_done=16)
    assert trial.failures == [
        "after kill:node1@step=6 the job loaded ckpt.pt, loaded by ranks 0, 1, a file it had written before the fault,"
        " and still restarted from the beginning (6 step(s) redone): it loaded its save but did not take up the step"
        " it was saved at (its step counter, its data position), or the file it loaded is a stale one, not its latest"
        " save"]
    # the same load, and a resume from step 3
    resumed = steps(0, "a", range(1, 7), 101.0, counted=False) + steps(0, "b", range(4, 11), 111.0, counted=False)
    [resume] = strikes(faults, attempts_of(resumed + saves + loads[:1], 10, completed=True),
                       [WrittenFile("ckpt.pt", 102.5)], resumed + saves + loads[:1])
    assert resume.describe_next() == "resumed from step 3 (ckpt.pt, loaded by rank 0): 3 step(s) redone"
    assert not (resume.loaded_and_started_over or resume.resume_skipped)
    trial = replace(trial, strikes=[resume], steps_redone=3, steps_done=13,
                    comparisons=[FileComparison("final.pt", "tensors", True, 0.0)])
    assert trial.status == "HOLDS"
    # a load after the next fault is the next attempt's, not this one's
    two = [fired("kill:node1@step=6", 106.5, 6), fired("kill:node0@t=9", 109.0)]
    first, _ = strikes(two, attempts_of(over + saves + loads, 10, completed=True), [WrittenFile("ckpt.pt", 102.5)],
                       over + saves + loads)
    assert first.loaded == ()


def test_a_dcp_save_and_load_are_judged_as_torch_save_and_torch_load_are(make_job, tmp_path):
    """A job that saves with torch.distributed.checkpoint (dcp.save into ckpt/, each rank its file,
    rank 0 the .metadata) and after the fault loads nothing it wrote: its resume never ran, DOES
    NOT HOLD in words that name dcp, where it was inconclusive ("a save not by torch.save"); one
    that loaded the directory and still started over does not hold; a resume's row names the
    directory and the ranks that loaded it."""
    over = steps(0, "a", range(1, 7), 101.0, counted=False) + steps(0, "b", range(1, 11), 111.0, counted=False)
    saves = [ProgressRecord(0, 102.5, dcp_saved="ckpt", attempt="a"), ProgressRecord(1, 102.6, dcp_saved="ckpt")]
    written = [WrittenFile("ckpt/__0_0.distcp", 102.4), WrittenFile("ckpt/__1_0.distcp", 102.4),
               WrittenFile("ckpt/.metadata", 102.5)]
    faults = [fired("kill:node1@step=6", 106.5, 6)]
    at_its_start = ProgressRecord(0, 110.5, dcp_saved="ckpt", attempt="b")  # a save before its first step
    attempts = attempts_of(over + saves + [at_its_start], 10, completed=True)
    assert [(a.offset, a.first_time) for a in attempts] == [(0, 101.0), (0, 111.0)]  # a save dates no attempt
    [skipped] = strikes(faults, attempts, written, over + saves)
    assert (skipped.torch_save, skipped.saved_by, skipped.resume_skipped) == ("ckpt", "dcp.save", True)
    trial = ChaosVerdict(0, result(make_job, tmp_path, run_id="ref"),
                         result(make_job, tmp_path, faults=faults, run_id="dis"), [f.spec for f in faults],
                         facts=Reference(10, 18.7, "ckpt/.metadata", 1.0, 2), strikes=[skipped], steps_redone=6,
                         steps_done=16)
    assert trial.status == "DOES NOT HOLD" and trial.inconclusive == []
    assert trial.failures == [
        "its resume never ran: after kill:node1@step=6 the job restarted from the beginning (6 step(s) redone) although"
        " it had written ckpt with dcp.save, and no rank loaded ckpt, or any file it had written, with dcp.load after"
        " the fault (a resume that looks for another path, a flag it was not given, or a check for a file it never"
        " writes)"]
    # a dcp.load of a directory the job wrote nothing in (pretrained weights) is no load of its save
    other = [ProgressRecord(0, 110.3, loaded="pretrained", loaded_by_dcp=True)]
    [elsewhere] = strikes(faults, attempts, written, over + saves + other)
    assert elsewhere.resume_skipped and "; it loaded only pretrained, loaded by rank 0 (" in resume_never_ran(elsewhere)
    # the directory loaded by both ranks, and the job still numbered its steps from 1
    loads = [ProgressRecord(0, 110.3, loaded="ckpt", loaded_by_dcp=True),
             ProgressRecord(1, 110.4, loaded="ckpt", loaded_by_dcp=True)]
    [started_over] = strikes(faults, attempts_of(over + saves + loads, 10, completed=True), written,
                             over + saves + loads)
    assert (started_over.loaded_and_started_over, started_over.resume_skipped) == (True, False)
    assert replace(trial, strikes=[started_over]).failures == [
        "after kill:node1@step=6 the job loaded ckpt, loaded by ranks 0, 1, a checkpoint it had written before the"
        " fault, and still restarted from the beginning (6 step(s) redone): it loaded its save but did not take up the"
        " step it was saved at (its step counter, its data position), or the checkpoint it loaded is a stale one, not"
        " its latest save"]
    # an older step's directory, loaded: a load of files the job wrote (a stale save), not of nothing
    steps_dirs = [ProgressRecord(0, 102.5, dcp_saved="ckpt/step_2"), ProgressRecord(0, 104.5, dcp_saved="ckpt/step_4")]
    stale = [ProgressRecord(0, 110.3, loaded="ckpt/step_2", loaded_by_dcp=True)]
    [old] = strikes(faults, attempts, [WrittenFile("ckpt/step_2/__0_0.distcp", 102.4),
                                       WrittenFile("ckpt/step_4/__0_0.distcp", 104.4)], over + steps_dirs + stale)
    assert (old.torch_save, old.loaded_and_started_over, old.resume_skipped) == ("ckpt/step_4", True, False)
    # the kind said last is the checkpoint: a torch.save after the dcp.save, or before it
    torch_later = over + saves + [ProgressRecord(0, 103.5, wrote="final.pt", torch_save=True)]
    [by_torch] = strikes(faults, attempts, written + [WrittenFile("final.pt", 103.5)], torch_later)
    assert (by_torch.torch_save, by_torch.saved_by, by_torch.loader) == ("final.pt", "torch.save", "torch.load")
    torch_before = over + saves + [ProgressRecord(0, 101.5, wrote="init.pt", torch_save=True)]
    [by_dcp] = strikes(faults, attempts, written + [WrittenFile("init.pt", 101.5)], torch_before)
    assert (by_dcp.torch_save, by_dcp.saved_by, by_dcp.loader) == ("ckpt", "dcp.save", "dcp.load")
    # a resume from step 3 after the load: its row names the directory and the ranks
    resumed = steps(0, "a", range(1, 7), 101.0, counted=False) + steps(0, "b", range(4, 11), 111.0, counted=False)
    [resume] = strikes(faults, attempts_of(resumed + saves + loads, 10, completed=True), written,
                       resumed + saves + loads)
    assert resume.describe_next() == "resumed from step 3 (ckpt, loaded by ranks 0, 1): 3 step(s) redone"
    assert replace(trial, strikes=[resume], steps_redone=3, steps_done=13,
                   comparisons=[FileComparison("final.pt", "tensors", True, 0.0)]).status == "HOLDS"


def test_a_fault_in_the_start_up_of_the_attempt_after_another_struck_no_step():
    records = steps(0, "a", [1, 2, 3, 4, 5, 6], 101.0, counted=False) + steps(0, "b", [4, 5, 6, 7, 8, 9, 10], 130.0,
                                                                              counted=False)
    attempts = attempts_of(records, 10, completed=True)
    first, second = strikes([fired("kill:node1@step=6", 106.5, 6), fired("kill:node0@t=20", 120.0)], attempts, [])
    assert (first.steps_done, first.resumed_from, first.redone) == (6, 3, 3)  # the script's own numbers
    assert (second.steps_done, second.training_s, second.describe_struck()) == (0, None, "in its start-up (no step yet)")
    assert second.resumed_from == 3


def test_a_fault_the_job_went_on_through_ends_no_attempt_and_the_next_fault_strikes_the_same_one():
    # pause at 105.5 (the job waits it out), pause at 112.5, kill at 118.5, then attempt b resumes
    records = steps(0, "a", range(1, 19), 101.0, counted=False) + steps(0, "b", range(16, 21), 125.0, counted=False)
    attempts = attempts_of(records, 20, completed=True)
    faults = [fired("pause:node1@t=4..6", 105.5, 5), fired("pause:node0@t=11..13", 112.5, 12),
              fired("kill:node1@t=17", 118.5, 18)]
    first, second, kill = strikes(faults, attempts, [WrittenFile("ckpt.pt", 103.2)])
    assert (first.steps_done, first.restarted, first.describe_next()) == (5, False, "no new attempt")
    assert (second.steps_done, second.describe_struck(), second.restarted) == (12, "12 step(s), 11.5 s training", False)
    assert (kill.steps_done, kill.restarted, kill.resumed_from, kill.redone) == (18, True, 15, 3)
    # a fault that lasts and did end its attempt (a new one began before the next fault fired): that one is its
    # next attempt, and the one the next fault strikes
    split = [fired("partition:node0|node1@t=4..8", 105.5, 5), fired("kill:node1@t=23", 124.0)]
    cut, later = strikes(split, attempts_of(steps(0, "a", range(1, 6), 101.0, counted=False)
                                                + steps(0, "b", range(3, 9), 110.0, counted=False)
                                                + steps(0, "c", range(7, 10), 130.0, counted=False), 9,
                                                completed=True), [WrittenFile("ckpt.pt", 103.2)])
    assert (cut.restarted, cut.resumed_from) == (True, 2)
    assert (later.steps_done, later.describe_struck(), later.resumed_from) == (6, "6 step(s), 14.0 s training", 6)


def test_a_torn_write_strikes_at_the_write_it_cut_not_at_the_step_it_was_armed(make_job, tmp_path):
    # armed at step 7 (107.5), it cut the save of step 9 (109.6): the node died there, and the next
    # attempt resumed from step 6, the last whole save: 3 steps redone, not 1
    records = steps(0, "a", range(1, 10), 101.0, counted=False) + steps(0, "b", range(7, 31), 120.0, counted=False)
    attempts = attempts_of(records, 30, completed=True)
    torn = FaultRecord("torn-write:node0@step=7", "node0", elapsed_s=7.5, step=7, fired_time=107.5,
                       detail="rank 0's write of ckpt/step_9/__0_0.distcp was cut at byte 10 of 100", struck_time=109.6)
    cut = WrittenFile("ckpt/step_9/__0_0.distcp", 109.5)  # the torn file: no save
    torn = replace(torn, struck_file=cut.path)
    [strike] = strikes([torn], attempts, [WrittenFile("ckpt/step_6/__0_0.distcp", 106.2), cut])
    assert strike.saved == ("ckpt/step_6/__0_0.distcp",)
    assert (strike.steps_done, strike.resumed_from, strike.redone, strike.struck_step) == (9, 6, 3, 9)
    assert strike.describe_struck() == "9 step(s), 8.6 s training"
    assert strike.cut_save == ""  # the file it cut was first written after it was armed: no save it cut
    assert torn.struck_s == pytest.approx(9.6) and KILL.struck_s is None
    # a save straight onto the file it resumes from, whole since step 1, cut at step 9; the restarts that followed
    # failed reading it, reporting no step: its only save was the file it cut, and no new attempt reported a step
    in_place = replace(torn, struck_file="ckpt.pt")
    [cut_whole] = strikes([in_place], attempts_of(steps(0, "a", range(1, 10), 101.0, counted=False), 30,
                                                   completed=False), [WrittenFile("ckpt.pt", 101.2)])
    assert (cut_whole.saved, cut_whole.cut_save, cut_whole.describe_saved()) == ((), "ckpt.pt",
                                                                                 "only ckpt.pt, the file it cut")
    assert cut_whole.describe_next() == "no new attempt reported a step"
    verdict = ChaosVerdict(7, result(make_job, tmp_path, run_id="ref"),
                           result(make_job, tmp_path, faults=[torn], run_id="dis"), [torn.spec], [],
                           facts=Reference(30, 30.0, "ckpt/step_6/__0_0.distcp", 3.0, 4), strikes=[strike])
    assert verdict.fault_rows()[0][:3] == (torn.spec, "7.5 s, step 7; struck at 9.6 s, step 9",
                                         "9 step(s), 8.6 s training")


def test_a_lasting_fault_that_ended_its_attempt_is_told_by_the_steps_that_stopped_not_by_the_next_start():
    # a split at 104.5 ended attempt a (no step after it); the kill at 110 fell in the start-up of b (115)
    records = steps(0, "a", range(1, 5), 101.0, counted=False) + steps(0, "b", range(3, 9), 115.0, counted=False)
    attempts = attempts_of(records, 8, completed=True)
    split, kill = strikes([fired("partition:node0|node1@t=3..6", 104.5, 4), fired("kill:node1@t=9", 110.0)],
                          attempts, [WrittenFile("ckpt.pt", 102.5)])
    assert (split.restarted, split.resumed_from, split.redone) == (True, 2, 2)
    assert (kill.steps_done, kill.describe_struck()) == (0, "in its start-up (no step yet)")
    # a pause in the start-up after a kill ends nothing: the kill's restart is the kill's alone
    kill_first, pause = strikes([fired("kill:node1@t=3", 104.5, 4), fired("pause:node0@t=9..10", 110.0)],
                                attempts, [WrittenFile("ckpt.pt", 102.5)])
    assert (kill_first.restarted, pause.restarted, pause.describe_next()) == (True, False, "no new attempt")


def test_the_per_step_metrics_name_the_first_step_that_differs_and_its_attempt():
    reference = steps(0, "r", [1, 2, 3, 4], 1.0, counted=False, loss=1.0)
    same = steps(0, "a", [1, 2, 3], 10.0, counted=False, loss=1.0) + steps(0, "b", [3, 4], 20.0, counted=False, loss=1.0)
    assert compare_step_metrics(reference, same, 0.0) == StepsComparison(5)
    drifted = same[:3] + [ProgressRecord(0, 20.0, step=3, attempt="b", metrics={"loss": 1.25})]
    comparison = compare_step_metrics(reference, drifted, 0.0)
    # (its first step reported: a script that reports every N steps resumed where it does not say)
    assert comparison.first_difference == "loss first differs at step 3 (rank 0, attempt 2): 1.25 against 1 undisturbed"
    assert compare_step_metrics(reference, drifted, 0.5).equal
    said_resumed = [ProgressRecord(0, 19.5, resumed=2, attempt="b")]
    beyond = compare_step_metrics(reference, drifted + said_resumed, 0.2)  # 25% off: past a 20% tolerance
    assert beyond.first_difference.endswith("1.25 against 1 undisturbed (beyond --rtol 0.2): the first step after"
                                            " the resume from step 2, so what the resume restored (the optimizer's"
                                            " state, the random state, the data order) is not what the undisturbed"
                                            " run had there")
    # a trial's forget_sched: the optimizer's restored learning rate served step 5; the scheduler, not restored, set
    # step 6's (Adam's carried count: resumed from 4)
    undisturbed = steps(1, "r", range(1, 9), 1.0, params=1.0)
    resumed = (steps(1, "a", range(1, 5), 10.0, params=1.0) + [ProgressRecord(1, 19.5, resumed=4, attempt="b")]
               + steps(1, "b", [5], 20.0, params=1.0) + steps(1, "b", [6, 7, 8], 21.0, params=2.0))
    assert compare_step_metrics(undisturbed, resumed, 0.0, 8, True).first_difference == (
        "params first differs at step 6 (rank 1, attempt 2): 2 against 1 undisturbed: the 2nd step after the resume"
        " from step 4, so what the resume restored served 1 step and something it did not restore shows only from"
        " then: a learning-rate scheduler's state, for one (the optimizer's restored learning rate serves the first"
        " step after a resume; a scheduler counting from 0 again sets the next ones), or an epoch's data order")
    later = same[:4] + [ProgressRecord(0, 21.0, step=4, attempt="b", metrics={"loss": 0.5})]  # not its first step
    assert compare_step_metrics(reference, later, 0.0).first_difference == (
        "loss first differs at step 4 (rank 0, attempt 2): 0.5 against 1 undisturbed")
    nothing = compare_step_metrics(reference, steps(0, "a", [1, 2], 1.0), 0.0)  # no metrics: nothing
    assert nothing.compared == 0
    assert nothing.describe() == "per-step metrics: none compared (no metric at a step both runs reached)"


def digests(rank: int, attempt: str, numbers, start: float, values) -> list[ProgressRecord]:
    """Steps the start-up hook counted, each with its parameters' digest."""
    return [ProgressRecord(rank, start + i, step=n, attempt=attempt, counted=True, metrics={"params": v})
            for i, (n, v) in enumerate(zip(numbers, values))]


def test_the_digests_of_a_script_that_reports_no_steps_are_compared_at_the_jobs_steps_across_its_attempts():
    # undisturbed: 10 steps; with a fault at step 7, a second attempt the hook counted from 1 again,
    # 6 steps: it resumed from step 4 (10 - 6), its steps 1-6 being the job's 5-10
    digest = [0.1 * n + 1e-9 for n in range(1, 11)]
    reference = digests(0, "r", range(1, 11), 1.0, digest) + digests(1, "q", range(1, 11), 1.0, digest)
    first = digests(0, "a", range(1, 8), 100.0, digest[:7])
    resumed = digests(0, "b", range(1, 7), 120.0, digest[4:])
    assert compare_step_metrics(reference, first + resumed, 0.0, 10, True) == StepsComparison(13)
    # the same job whose resume did not restore the optimizer's state: off from its first step, in the 10th digit
    off = digests(0, "b", range(1, 7), 120.0, [v + 1e-10 for v in digest[4:]])
    assert compare_step_metrics(reference, first + off, 0.0, 10, True).first_difference == (
        "params first differs at step 5 (rank 0, attempt 2): 0.5000000011 against 0.500000001 undisturbed: the first"
        " step after the resume from step 4, so what the resume restored (the optimizer's state, the random state,"
        " the data order) is not what the undisturbed run had there")
    # an attempt counted from 1 whose start is not known (the job did not end where the undisturbed one
    # did) is not compared at steps it may not have been at
    assert compare_step_metrics(reference, first + off, 0.0, 10, False) == StepsComparison(7)
    # rank 1's attempts are its own (its worker's tokens): placed the same way
    rank1 = digests(1, "c", range(1, 8), 100.0, digest[:7]) + digests(1, "d", range(1, 7), 120.0, digest[4:])
    assert compare_step_metrics(reference, rank1, 0.0, 10, True) == StepsComparison(13)
    # a rank the job went on without: its last attempt (begun before rank 0's first had ended) is not
    # the job's last, so its start is not guessed from it
    left = digests(1, "e", range(1, 5), 100.0, digest[:4]) + digests(1, "f", range(1, 3), 104.0, [9.0, 9.0])
    assert compare_step_metrics(reference, first + resumed + left, 0.0, 10, True) == StepsComparison(13 + 4)


# --- the verdict ----------------------------------------------------------------------------

def result(make_job, tmp_path: Path, *, ok: bool = True, faults=(), job_s: float = 30.0, run_id: str = "r") -> RunResult:
    plan = make_job(nodes=2)
    state, code = (NodePhase.SUCCEEDED, 0) if ok else (NodePhase.FAILED, 1)
    results = [NodeResult(node, state, code, ended_at=1.0) for node in plan.nodes]
    return RunResult(run_id, tmp_path / run_id, results, Timings(1.0, 1.0, job_s), faults=list(faults))


def strike(spec: str = "kill:node1@step=12", saved=("ckpt.pt",), resumed_from=9, redone=3) -> Strike:
    return Strike(spec, 8.5, 12, 12, 6.0, saved, True, resumed_from, redone)


KILL = FaultRecord("kill:node1@step=12", "node1", elapsed_s=8.5, step=12, fired_time=108.5)


def verdict_of(make_job, tmp_path, strikes=(), **options) -> ChaosVerdict:
    return ChaosVerdict(7, result(make_job, tmp_path, run_id="ref"),
                        result(make_job, tmp_path, faults=[KILL], job_s=41.5, run_id="dis"), [KILL.spec],
                        [FileComparison("final.pt", "tensors", True, 0.0, "w")],
                        facts=Reference(30, 30.0, "ckpt.pt", 3.0, 4), strikes=list(strikes), steps_redone=3, **options)


def test_files_that_differ_without_compare_steps_say_once_what_compare_steps_would_tell(make_job, tmp_path):
    # a trial's forgotten optimizer with --compare final.pt alone said only "final.pt: differs (...)", where
    # --compare-steps names the first step after the resume as where the runs part
    differs = [FileComparison("final.pt", "tensors", False, 0.173, "0.weight"),
               FileComparison("log.txt", "bytes", False)]
    verdict = replace(verdict_of(make_job, tmp_path, [strike()]), comparisons=differs)
    hints = [line for line in verdict.format().splitlines() if line.startswith("hint: ")]
    assert hints == ["hint: --compare-steps (ddp_cluster.chaos: compare_steps=True) compares the parameters, or the"
                     " metrics the ranks report, with the undisturbed run's at every step and names the first step"
                     " they differ at: where that is the first step after a resume, what the resume restored (the"
                     " optimizer's state, the data order, the random state) is not what the undisturbed run had there"]
    lines = verdict.format().splitlines()
    assert lines.index(hints[0]) == lines.index("compared log.txt: differs (bytes)") + 1  # under the comparisons
    # not where steps were compared (they say it), where the files match, or where one was not there to compare
    assert "hint: " not in replace(verdict, steps=StepsComparison(0)).format()
    assert "hint: " not in verdict_of(make_job, tmp_path, [strike()]).format()
    missing = FileComparison("final.pt", "bytes", False, problem="the run with faults did not write it")
    assert "hint: " not in replace(verdict, comparisons=[missing]).format()


def test_a_run_with_faults_faster_than_the_undisturbed_one_lost_no_time_and_says_so_not_a_negative_loss(
        make_job, tmp_path):
    """A trial's store2: 56.6 s with faults against 62.7 s undisturbed said "time lost -6.1 s"."""
    faster = verdict_of(make_job, tmp_path, [strike()])
    faster.disturbed.timings.job_s = 23.9  # against the undisturbed run's 30.0 s
    line = next(l for l in faster.format().splitlines() if l.startswith("recoveries"))
    assert line.endswith("| time lost none (6.1 s faster: job 23.9 s against 30.0 s undisturbed; a run's time varies"
                         " with the machine's load by more than these faults cost)")
    faster.disturbed.timings.job_s = 29.98  # a tenth of a second's rounding is no gain: no "-0.0"
    assert "| time lost +0.0 s (job 30.0 s against 30.0 s undisturbed)" in faster.format()


def test_a_temporary_file_seen_before_it_was_renamed_onto_the_save_is_never_named_as_the_save(make_job, tmp_path):
    # a walk caught checkpoint.pt.tmp at step 6, between its write and its rename onto checkpoint.pt
    records = steps(0, "a", range(1, 7), 101.0, counted=False) + steps(0, "b", range(7, 11), 111.0, counted=False)
    attempts = attempts_of(records, 10, completed=True)
    writes = [WrittenFile("checkpoint.pt", 102.1), WrittenFile("checkpoint.pt.tmp", 106.1, kept=False)]
    [kill] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts, writes)
    assert kill.saved == ("checkpoint.pt", "checkpoint.pt.tmp") and kill.after_a_save
    assert (kill.named_save, kill.describe_saved()) == ("checkpoint.pt", "yes: checkpoint.pt (+1 more)")
    fresh = replace(kill, resumed_from=0, redone=6)
    assert verdict_of(make_job, tmp_path, [fresh]).inconclusive[0].startswith(
        "the job never resumed from what it saved: after kill:node1@step=6 it restarted from the beginning although"
        " it had written checkpoint.pt:")
    # where every file written before the fault was gone by the end, the newest is named
    gone = [WrittenFile("a.tmp", 102.1, kept=False), WrittenFile("b.tmp", 104.0, kept=False)]
    [only_gone] = strikes([fired("kill:node1@step=6", 106.5, 6)], attempts, gone)
    assert (only_gone.named_save, only_gone.describe_saved()) == ("b.tmp", "yes: b.tmp (+1 more)")
    assert Strike("kill:node1@step=6", 6.5, 6, 6, 5.5, (), True, 0, 6).named_save is None
    # the undisturbed run's first save is the first file still there at its end, and its time that file's
    reference = result(make_job, tmp_path, run_id="ref")
    reference.started_time, reference.writes = 100.0, [WrittenFile("checkpoint.pt.tmp", 101.5, kept=False),
                                                       WrittenFile("checkpoint.pt", 103.5), WrittenFile("final.pt", 110.5)]
    facts = reference_facts(reference, records[:6])
    assert (facts.last_step, facts.first_write, facts.first_write_s, facts.first_step_after_write) == (
        6, "checkpoint.pt", 3.5, 4)
    reference.writes = [WrittenFile("checkpoint.pt.tmp", 101.5, kept=False)]  # none kept: the first write
    assert (reference_facts(reference, records[:6]).first_write, reference_facts(reference, records[:6]).first_write_s) \
        == ("checkpoint.pt.tmp", 1.5)
    reference.writes = []
    assert (reference_facts(reference, records[:6]).first_write, reference_facts(reference, records[:6]).last_step) \
        == (None, 6)
    # a save just after step 1's report may carry a modification time a tick before it (the kernel's
    # coarse clock): step 1 is not taken to come after it
    reference.writes = [WrittenFile("checkpoint.pt", 101.0 - 0.004)]
    assert reference_facts(reference, records[:6]).first_step_after_write == 2



@pytest.mark.parametrize("path, save, is_its_temporary", [
    ("ckpt.pt.tmp", "ckpt.pt", True), ("ckpt/model.tmp", "ckpt/model.pt", True),  # Path.with_suffix(".tmp")
    ("ckpt/.model.pt.tmp", "ckpt/model.pt", True), ("ckpt/tmpa1b2c3", "ckpt/model.pt", True),  # tempfile's
    ("scratch.bin", "ckpt.pt", False), ("out/model_old", "out/model", False),  # other files beside it
    ("logs/ckpt.pt.tmp", "ckpt.pt", False),  # elsewhere
])
def test_a_saves_temporary_file_is_told_from_other_files(path, save, is_its_temporary):
    from orchestrate.chaos.check import temporary_of

    assert temporary_of(path, save) is is_its_temporary


def test_a_trials_steps_redone_are_counted_against_the_steps_a_reference_that_began_later_did(make_job, tmp_path):
    """The check's own judgement of a trial, whose job (as the undisturbed one) began from a save
    of step 6 the work directory held: killed after step 16, resumed from step 14, 2 steps redone."""
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    check = ChaosCheck(RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs"), faults=1,
                       seed=1, kinds=DEFAULT_KINDS, compare=(), rtol=0.0, out=io.StringIO())
    reference = result(make_job, tmp_path, run_id="ref")
    held = [ProgressRecord(0, 100.0, resumed=6, attempt="a")] + steps(0, "a", range(7, 31), 101.0, counted=False)
    disturbed = result(make_job, tmp_path, ok=False, run_id="dis")
    (disturbed.run_dir / PROGRESS_SUBDIR).mkdir(parents=True)
    lines = ([{"rank": 0, "time": 100.0, "resumed": 6, "attempt": "a"}]
             + [{"rank": 0, "time": 101.0 + i, "step": n, "attempt": "a"} for i, n in enumerate(range(7, 17))]
             + [{"rank": 0, "time": 120.0, "resumed": 14, "attempt": "b"}]
             + [{"rank": 0, "time": 121.0 + i, "step": n, "attempt": "b"} for i, n in enumerate(range(15, 31))])
    (disturbed.run_dir / PROGRESS_SUBDIR / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    verdict = check.judge(1, reference, held, reference_facts(reference, held), disturbed, ["kill:node1@step=16"],
                          tmp_path / "undisturbed", work)
    assert verdict.steps_redone == 2


def test_a_save_made_again_before_the_directorys_next_walk_is_dated_by_the_ranks_report_of_its_first(
        make_job, tmp_path):
    """The walk (every 2 s) first saw ckpt.pt as step 12's save had left it; rank 0 reported opening
    ckpt.pt.tmp (renamed onto it) after step 9: the first save came before step 10, not 13."""
    reference = result(make_job, tmp_path, run_id="ref")
    reference.started_time = 100.0
    reference.writes = [WrittenFile("ckpt.pt", 112.6), WrittenFile("final.pt", 130.0)]
    records = (steps(0, "a", range(1, 31), 101.0, counted=False)
               + [ProgressRecord(0, 100.1, attempt="a", wrote="scratch.bin"),  # gone, beside it: not its own
                  ProgressRecord(0, 109.5, attempt="a", wrote="ckpt.pt.tmp"),
                  ProgressRecord(0, 100.5, attempt="a", wrote="final.pt"),  # another file kept: not this save
                  ProgressRecord(0, 100.2, attempt="a", wrote="logs/metrics.csv")])  # gone, elsewhere: not it
    facts = reference_facts(reference, records)
    assert (facts.first_write, facts.first_write_s, facts.first_step_after_write) == ("ckpt.pt", 9.5, 10)
    # the file's own report counts too, and the walk's time where it is the earlier
    records[-3] = ProgressRecord(0, 109.5, attempt="a", wrote="ckpt.pt")
    assert reference_facts(reference, records).first_step_after_write == 10
    reference.writes = [WrittenFile("ckpt.pt", 105.6), WrittenFile("final.pt", 130.0)]
    assert reference_facts(reference, records).first_step_after_write == 6
    # a report is exact: 5 ms before step 10's is before step 10 (the 20 ms a modification time may
    # lag is the file clock's, not the report's)
    reference.writes = [WrittenFile("ckpt.pt", 112.6), WrittenFile("final.pt", 130.0)]
    records[-3] = ProgressRecord(0, 109.995, attempt="a", wrote="ckpt.pt.tmp")
    assert reference_facts(reference, records).first_step_after_write == 10


def test_a_reference_that_began_from_a_save_already_there_counts_the_steps_it_did_not_its_last_number(
        make_job, tmp_path):
    """A job that resumes from a checkpoint the work directory held (an earlier run's) does steps
    7 to 30 undisturbed: 24 steps. Where its steps are the job's own numbers (reported, or a
    saved optimizer's count), its last number is not how many it did: counted against 30, the
    trial's 26 steps were 0 redone, and --max-steps-redone could not fail."""
    reference = result(make_job, tmp_path, run_id="ref")
    held = [ProgressRecord(0, 100.0, resumed=6, attempt="a")] + steps(0, "a", range(7, 31), 101.0, counted=False)
    facts = reference_facts(reference, held)
    assert (facts.first_step, facts.last_step, facts.steps_done, facts.step_count) == (7, 30, 24, 24)
    assert describe_reference(facts) == ("the undisturbed job: 24 steps (7 to 30: it began from a save the work"
                                         " directory held) in 30.0 s; it wrote no file in its work directory")
    # the trial: killed after step 16, resumed from the save of step 14: 2 steps redone
    trial = (held[:11] + [ProgressRecord(0, 120.0, resumed=14, attempt="b")]
             + steps(0, "b", range(15, 31), 121.0, counted=False))
    assert steps_redone(attempts_of(trial, facts.last_step, completed=True), facts.step_count) == 2
    verdict = ChaosVerdict(7, reference, result(make_job, tmp_path, faults=[KILL], job_s=41.5, run_id="dis"),
                           [KILL.spec], [], facts=facts, steps_redone=2)
    assert "steps redone 2 (26 done against 24 undisturbed)" in verdict.format()
    # faults fall from its second step, not from step 2, which it never had
    assert facts.step_range(1) == (8, 27)
    # a job from step 1 counts as before
    fresh = reference_facts(reference, steps(0, "a", range(1, 25), 101.0))
    assert (fresh.first_step, fresh.steps_done, fresh.step_count) == (1, 24, 24)
    assert describe_reference(fresh).startswith("the undisturbed job: 24 steps in 30.0 s;")
    assert Reference(30, 30.0).step_count == 30  # (made without its count: the last step is it)
    # a job that said where it resumed and reported no step did no step known: none counted
    silent = reference_facts(reference, [ProgressRecord(0, 100.0, resumed=6, attempt="a")])
    assert (silent.last_step, silent.steps_done, silent.step_count) == (None, None, None)


def test_the_verdict_holds_when_a_fault_after_a_save_was_followed_by_a_resume_and_the_files_match(make_job, tmp_path):
    verdict = verdict_of(make_job, tmp_path, [strike()])
    assert verdict.status == "HOLDS" and verdict.holds and verdict.exit_code == 0
    text = verdict.format()
    assert "VERDICT HOLDS: the job survived 1 fault(s), resumed after a save" in text
    assert "recoveries 0 | steps redone 3 (33 done against 30 undisturbed) | time lost +11.5 s" in text
    verdict.disturbed.results[0].restarts_in_place = 1  # a kill-rank fault's: torchrun restarted the workers
    assert "recoveries 0 | restarts in place 1 | steps redone 3" in verdict.format()
    verdict.disturbed.results[0].restarts_in_place = 0
    assert verdict.fault_rows() == [("kill:node1@step=12", "8.5 s, step 12", "12 step(s), 6.0 s training",
                                     "yes: ckpt.pt", "resumed from step 9: 3 step(s) redone")]
    assert verdict.record()["status"] == "HOLDS" and verdict.record()["reference_run"] == "ref"


def test_a_verdict_that_holds_with_nothing_compared_does_not_say_the_job_ended_where_the_undisturbed_run_ended(
        make_job, tmp_path):
    """No --compare, no --compare-steps: the job survived and resumed, but where it ended was never
    compared. The verdict holds (as the help says), and says what it did not test, on the page too."""
    from orchestrate.report.page import chaos_section

    bare = replace(verdict_of(make_job, tmp_path, [strike()]), comparisons=[])
    assert bare.status == "HOLDS" and bare.unchecked
    assert bare.format().splitlines()[-1] == (
        "VERDICT HOLDS: the job survived 1 fault(s) and resumed after a save; where it ended was not compared with the"
        " undisturbed run (--compare FILE, --compare-steps compare what it saved or reported)")
    assert bare.record()["unchecked"] == bare.unchecked
    assert f'<p id="chaos-unchecked">Not tested: {bare.unchecked}</p>' in chaos_section(bare.record())
    for compared in (verdict_of(make_job, tmp_path, [strike()]),
                     replace(bare, steps=StepsComparison(compared=3, first_difference=""))):
        assert compared.unchecked == "" and compared.format().endswith("and ended where the undisturbed run ended")
        assert not any("chaos-unchecked" in part for part in chaos_section(compared.record()))
    assert replace(bare, strikes=[strike(saved=())]).unchecked == ""  # inconclusive: its reasons say it
    # a job that ended past the undisturbed run's last step (a step done twice, by its counted steps): not a
    # failure, as a second optimizer's carried count may number a right resume so too, but with nothing compared
    # never a hold (until 2026-12-07 it held, with a note)
    overran = replace(bare, steps_done=32, ended_at_step=31)
    assert overran.status == "INCONCLUSIVE" and overran.steps_overran == 1 and overran.exit_code == 1
    assert overran.inconclusive == [
        "the job ended at step 31, the undisturbed run at step 30, by the steps its attempts reported or counted:"
        " a resume that did a step twice ends past it (a second optimizer's carried count may number them so too);"
        " --compare what it saved to know"]
    assert replace(overran, comparisons=[FileComparison("final.pt", "tensors", True, 0.0, "w")]).status == "HOLDS"
    assert replace(bare, steps_done=33, ended_at_step=30).steps_overran == 0
    assert not any(ln.startswith("note: the job ended") for ln in replace(bare, ended_at_step=30).format().splitlines())


def test_a_torn_write_that_cut_the_only_file_the_job_had_written_is_inconclusive_saying_so(make_job, tmp_path):
    """A save straight onto ckpt.pt, whole since step 3, cut at step 18: the job caught the failed
    load and started over. Not "no fault struck after the job had written a file": it did, and
    cut it. Whether the file is the job's save or a metrics file it rewrites only the job knows,
    so the trial is inconclusive (exit 1), not a hold, with what a save cut short costs."""
    torn = "torn-write:node0@step=17"
    started_over = verdict_of(make_job, tmp_path, [replace(strike(torn, saved=(), resumed_from=0, redone=18),
                                                           cut_save="ckpt.pt")])
    assert started_over.status == "INCONCLUSIVE" and started_over.exit_code == 1
    assert started_over.inconclusive == [
        "torn-write:node0@step=17 cut ckpt.pt, the only file the job had written before it, and the next attempt"
        " restarted from the beginning (18 step(s) redone), so the resume path was never exercised; if ckpt.pt is its"
        " save, a crash in the middle of a save loses every step saved: write each save to a temporary file beside"
        " it, then os.replace() it onto ckpt.pt (a rename is atomic), so that a cut leaves the last whole one"]
    unknown = verdict_of(make_job, tmp_path, [replace(strike(torn, saved=(), resumed_from=None, redone=None),
                                                      cut_save="ckpt.pt")])
    assert unknown.status == "INCONCLUSIVE" and "and where the next attempt started is not known, so" in (
        unknown.inconclusive[0])
    # a cut of a file the job had not written whole before (its first write): no file lost, as before
    first_write = verdict_of(make_job, tmp_path, [strike(torn, saved=(), resumed_from=0, redone=18)])
    assert first_write.status == "INCONCLUSIVE" and first_write.inconclusive[0].startswith("no fault struck after")


def test_a_verdict_says_by_name_whether_it_does_not_hold_and_is_neither_true_nor_false(make_job, tmp_path):
    """A user trial's "my broken resume is caught": ``assert not verdict.holds`` passed on an INCONCLUSIVE
    verdict, which tested nothing; ``assert verdict`` passed on any verdict, and ``assert not verdict`` on none."""
    inconclusive = verdict_of(make_job, tmp_path, [strike(saved=(), resumed_from=0, redone=18)])
    caught = replace(inconclusive, max_steps_redone=1)
    held = verdict_of(make_job, tmp_path, [strike()], steps_done=33, ended_at_step=30)
    assert [v.status for v in (inconclusive, caught, held)] == ["INCONCLUSIVE", "DOES NOT HOLD", "HOLDS"]
    assert [v.does_not_hold for v in (inconclusive, caught, held)] == [False, True, False]
    assert [v.holds for v in (inconclusive, caught, held)] == [False, False, True]
    for verdict in (inconclusive, caught, held, ChaosResult(held.reference, [inconclusive]), ChaosResult(
            held.reference, [caught, held])):
        with pytest.raises(TypeError) as refused:
            assert not verdict
        assert str(refused.value) == (
            f"a chaos verdict ({verdict.status}) is neither true nor false: assert verdict.holds, or"
            " verdict.does_not_hold (not 'not verdict.holds', which an INCONCLUSIVE verdict passes)")
    assert ChaosResult(held.reference, [inconclusive, held]).does_not_hold is False
    assert ChaosResult(held.reference, [caught, held]).does_not_hold is True


def test_no_fault_after_a_save_or_no_attempt_that_resumed_is_inconclusive_never_a_hold(make_job, tmp_path):
    before_any_save = verdict_of(make_job, tmp_path, [strike(saved=())])
    assert before_any_save.status == "INCONCLUSIVE" and before_any_save.exit_code == 1
    assert before_any_save.inconclusive == [
        "no fault struck after the job had written a file in its work directory, so the resume path was never"
        " exercised (the undisturbed run wrote its first, ckpt.pt, before step 4)"]
    assert "VERDICT INCONCLUSIVE: the check could not have caught a broken resume:" in (
        before_any_save.format().splitlines())
    from_scratch = verdict_of(make_job, tmp_path, [strike(resumed_from=0, redone=12)])
    assert from_scratch.inconclusive[0].startswith("the job never resumed from what it saved: after kill:node1@step=12"
                                                   " it restarted from the beginning although it had written"
                                                   " ckpt.pt: 3 step(s) redone in all;")
    unknown = verdict_of(make_job, tmp_path, [strike(resumed_from=None, redone=None)])
    assert unknown.status == "HOLDS"  # not known not to have resumed: the files tell
    went_on = verdict_of(make_job, tmp_path, [Strike("pause:node1@t=4..6", 5.5, 5, 5, 4.0, ("ckpt.pt",), False, None,
                                                     None)])
    assert went_on.status == "INCONCLUSIVE"
    assert went_on.inconclusive == ["no fault ended an attempt of the job (pause:node1@t=4..6: it went on through each),"
                                    " so the resume path was never exercised; kill, restart, preempt, kill-rank and"
                                    " torn-write end one"]
    unseen = verdict_of(make_job, tmp_path, [Strike("kill:node1@t=4", 5.5, None, 0, None, ("ckpt.pt",), False, None,
                                                    None)])
    assert unseen.inconclusive == ["no new attempt of the job was seen after kill:node1@t=4 (no worker reported a"
                                   " step after it), so whether it resumed is not known"]
    not_followed = verdict_of(make_job, tmp_path, [strike(saved=None)])
    assert "the work directory was not followed" in not_followed.inconclusive[0]


def test_ranks_that_asked_for_another_world_than_torchruns_never_make_a_trial_hold(make_job, tmp_path):
    """A job whose ranks each made a world of one trains apart: its files may match the
    undisturbed run's and still tell nothing of the distributed job."""
    from orchestrate.hangs.snapshots import InitCall

    alone = {r: InitCall(r, 1, "node0:29500", "env", r, 0, 2, "node0:29500") for r in (0, 1)}
    apart = ("ranks 0, 1 called init_process_group with world_size=1, but torchrun started 2 workers"
             " (WORLD_SIZE=2)")
    verdict = verdict_of(make_job, tmp_path, [strike()])
    verdict.disturbed.init_calls = alone
    assert verdict.status == "DOES NOT HOLD" and verdict.failures == [
        f"in the run with faults, the ranks did not form the one job torchrun started ({apart})"]
    verdict = verdict_of(make_job, tmp_path, [strike()])
    verdict.reference.init_calls = alone
    assert verdict.status == "DOES NOT HOLD" and verdict.failures[0] == (
        f"in the undisturbed run, the ranks did not form the one job torchrun started ({apart}); under torchrun leave"
        " init_method, rank and world_size out: env:// reads what torchrun sets: nothing to compare with")


def test_a_bound_on_steps_redone_and_a_per_step_difference_fail_the_trial(make_job, tmp_path):
    assert verdict_of(make_job, tmp_path, [strike()], max_steps_redone=3).holds
    bounded = verdict_of(make_job, tmp_path, [strike()], max_steps_redone=2)
    assert bounded.failures == ["3 step(s) redone in all, more than --max-steps-redone 2"]
    differs = verdict_of(make_job, tmp_path, [strike()], steps=StepsComparison(4, "loss first differs at step 10"))
    assert differs.status == "DOES NOT HOLD" and differs.failures == ["per-step metrics: loss first differs at step 10"]
    nothing = verdict_of(make_job, tmp_path, [strike()], steps=StepsComparison(0))
    assert nothing.status == "INCONCLUSIVE" and "--compare-steps: no metric" in nothing.inconclusive[0]


@pytest.mark.parametrize("comparison, said", [
    (FileComparison("final.pt", "tensors", True, 0.0, ""), "final.pt: matches (tensors; every value equal)"),
    (FileComparison("final.pt", "tensors", True, 2e-7, "model.w"),
     "final.pt: matches (tensors; largest difference 2e-07 at model.w)"),
    (FileComparison("final.pt", "tensors", False, 0.5, "model.w"),
     "final.pt: differs (tensors; largest difference 0.5 at model.w)"),
    # no number tells them apart (before 2026-11-30 this raised a TypeError, ending the check)
    (FileComparison("final.pt", "tensors", False, None, "model.w (shape (2,) torch.float32 vs (3,) torch.float32)"),
     "final.pt: differs (tensors; at model.w (shape (2,) torch.float32 vs (3,) torch.float32))"),
    (FileComparison("final.pt", "tensors", False, None, ""), "final.pt: differs (tensors; at ?)"),
    (FileComparison("final.pt", "tensors", True, None, "step"), "final.pt: matches (tensors; at step)"),
    (FileComparison("final.pt", "tensors", False, 0.25, ""), "final.pt: differs (tensors; largest difference 0.25)"),
    (FileComparison("log.txt", "bytes", True), "log.txt: identical (bytes)"),
    (FileComparison("log.txt", "bytes", False), "log.txt: differs (bytes)"),
    (FileComparison("log.txt", "bytes", False, problem="the run with faults wrote no such file"),
     "log.txt: the run with faults wrote no such file"),
    # a match within a tolerance says the tolerance (it is no equality); a difference beyond it needs no word
    (FileComparison("final.pt", "tensors", True, 0.000115, "0.bias", rtol=0.1),
     "final.pt: matches (tensors; largest difference 0.000115 at 0.bias, within --rtol 0.1)"),
    (FileComparison("final.pt", "tensors", False, 0.5, "0.bias", rtol=0.1),
     "final.pt: differs (tensors; largest difference 0.5 at 0.bias)"),
])
def test_a_comparison_says_every_value_equal_or_the_largest_difference_and_where(comparison, said):
    assert comparison.describe() == said


def test_the_verdict_names_a_file_that_differs_and_a_fault_that_never_fired(make_job, tmp_path):
    unfired = FaultRecord("restart:node0@step=30", "node0", fired=False, reason="the workers never reached step 30")
    verdict = ChaosVerdict(3, result(make_job, tmp_path, run_id="ref"),
                           result(make_job, tmp_path, faults=[unfired], run_id="dis"), ["restart:node0@step=30"],
                           [FileComparison("final.pt", "tensors", False, 0.23, "optimizer.state.0.momentum_buffer")])
    assert not verdict.holds and verdict.exit_code == 1
    assert verdict.failures == [
        "fault restart:node0@step=30 did not fire: the workers never reached step 30",
        "final.pt: differs (tensors; largest difference 0.23 at optimizer.state.0.momentum_buffer)"]
    assert verdict.status == "DOES NOT HOLD" and "VERDICT DOES NOT HOLD:" in verdict.format()
    assert verdict.fault_rows()[0][1] == "did not fire: the workers never reached step 30"


def test_a_long_reason_a_fault_did_not_fire_is_whole_in_the_verdict_and_its_gist_in_the_table(make_job, tmp_path):
    from orchestrate.faults.scheduler import unmet_storage_fault

    spec = "disk-full:node0@step=3"
    armed = FaultRecord(spec, "node0", elapsed_s=4.2)
    unfired = FaultRecord(spec, "node0", fired=False, reason=unmet_storage_fault(armed))
    verdict = ChaosVerdict(3, result(make_job, tmp_path, run_id="ref"),
                           result(make_job, tmp_path, faults=[unfired], run_id="dis"), [spec])
    assert verdict.failures == [f"fault {unfired.describe()}"] and "os.write()" in verdict.failures[0]
    assert verdict.fault_rows()[0][1] == ("did not fire: it was armed 4.2 s into the job, but no worker of node0"
                                          " wrote a file it reaches after that")
    assert verdict.record()["schedule"][0]["fired_at"] == verdict.fault_rows()[0][1]


def test_a_job_that_failed_under_the_faults_or_a_reference_that_failed_is_the_reason(make_job, tmp_path):
    broken = ChaosVerdict(1, result(make_job, tmp_path, run_id="ref"), result(make_job, tmp_path, ok=False, run_id="d"),
                          ["kill:node1@t=5.0"])
    assert broken.failures[0].startswith("the job did not complete under the faults")
    no_reference = ChaosVerdict(1, result(make_job, tmp_path, ok=False, run_id="ref"), None, [])
    assert no_reference.failures == ["the undisturbed run failed (exit code 1): nothing to compare with"]
    assert no_reference.exit_code == 1
    # a reference that succeeded only after torchrun restarted its workers with no fault was not undisturbed
    flaky = result(make_job, tmp_path, run_id="ref")
    flaky.results[1].restarts_in_place = 1
    verdict = ChaosVerdict(1, flaky, result(make_job, tmp_path, run_id="d"), ["kill:node1@t=5.0"])
    assert verdict.failures == ["the undisturbed run was not: torchrun restarted its workers after a failure (node1"
                                " once), so the job fails without faults too (its summary says how)"]
    assert not verdict.holds


def test_a_compared_file_the_undisturbed_run_did_not_write_ends_the_check_before_any_trial(make_job, tmp_path):
    """`--compare finl.pt` (a typo): the reference wrote final.pt only, so no trial could be
    compared. The check says so after the reference and runs no trial."""
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    check = ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS, compare=("final.pt", "finl.pt"),
                       out=io.StringIO())
    runs = []

    def one_run(run_request):  # the reference: it writes final.pt in its copy of the work directory
        runs.append(run_request)
        (Path(run_request.workdir) / "final.pt").write_bytes(b"weights")
        reference = result(make_job, tmp_path, run_id="ref")
        reference.writes = [WrittenFile("final.pt", 1.0)]
        return reference

    check.one_run = one_run
    outcome = check.run()
    assert len(runs) == 1  # no trial
    [verdict] = outcome.trials
    assert verdict.status == "DOES NOT HOLD" and outcome.exit_code == 1
    assert verdict.failures == ["finl.pt: the undisturbed run wrote no such file (it wrote final.pt); no trial was run"]
    assert "VERDICT DOES NOT HOLD:\n  finl.pt: the undisturbed run wrote no such file" in verdict.format()
    assert "the next attempt" not in verdict.format()  # no trial: no table of its faults
    assert f"runs: undisturbed {tmp_path / 'ref'}\n" in verdict.format()  # and no run with faults
    assert verdict.record()["disturbed_run"] is None and verdict.record()["schedule"] == []
    assert ChaosResult(verdict.reference, [verdict, verdict]).rows()[0] == ("1", "-", "-", "-", "DOES NOT HOLD")


@pytest.mark.parametrize("which", ["the undisturbed run", "the run with faults", "the run with faults, removing it",
                                   "neither (not followed)"])
def test_a_compared_file_a_run_left_as_the_work_directory_held_it_never_matches(which, make_job, tmp_path,
                                                                                monkeypatch):
    """The work directory holds final.pt from an earlier run of the job (`run` before `chaos`), and
    the job now writes its model elsewhere: every copy holds the same old final.pt, which compared
    byte for byte matched, and the verdict held although nothing was compared. A run that did not
    write a compared file leaves it as the work directory held it: said so, never compared."""
    import orchestrate.chaos.check as check_module
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    (work / "final.pt").write_bytes(b"an earlier run's weights")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    check = ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS, compare=("final.pt",), out=io.StringIO())
    compared = []
    monkeypatch.setattr(check_module, "compare_files", lambda client, image, first, second, paths, *rest: (
        compared.extend(paths) or [FileComparison(p, "bytes", True) for p in paths]))
    # (a file not compared needs no engine: none is reached for it)
    check.engine = (lambda: None) if "removing" in which or "neither" in which else (
        lambda: pytest.fail("reached the engine with nothing to compare"))
    runs = []

    def one_run(run_request):
        runs.append(run_request)
        ran = result(make_job, tmp_path, run_id=f"run{len(runs)}", faults=[KILL] if run_request.faults else [])
        ran.run_dir.mkdir()
        this_run = "the run with faults" if run_request.faults else "the undisturbed run"
        if run_request.faults and which.endswith("removing it"):
            (Path(run_request.workdir) / "final.pt").unlink()
            this_run = which
        ran.writes = ([WrittenFile("ckpt.pt", 1.0)] + ([] if which == this_run else [WrittenFile("./final.pt", 2.0)])
                      if not which.startswith("neither") else None)
        return ran

    check.one_run = one_run
    [verdict] = check.run().trials
    if which == "the undisturbed run":
        assert len(runs) == 1 and compared == []  # no trial: nothing it could be compared on
        assert verdict.failures == ["final.pt: the undisturbed run did not write it: the file there is the work"
                                    " directory's own, from before the check, unchanged (it wrote ckpt.pt); no trial"
                                    " was run"]
    elif which == "the run with faults":
        assert len(runs) == 2 and compared == []
        assert verdict.comparisons == [FileComparison(
            "final.pt", "bytes", False, problem="the run with faults did not write it: the file there is the work"
                                                " directory's own, from before the check, unchanged")]
        assert verdict.failures == [verdict.comparisons[0].describe()]
    elif which == "the run with faults, removing it":  # not left as it was: compare_files says it is missing
        assert len(runs) == 2 and compared == ["final.pt"]
        return
    else:  # the writes are not known: compared, as they may have been written
        assert len(runs) == 2 and compared == ["final.pt"] and verdict.comparisons[0].equal
        assert not any("final.pt" in reason for reason in verdict.failures)
        return
    assert verdict.status == "DOES NOT HOLD"


def fake_job_run(make_job, tmp_path: Path, runs: list, t0: float = 1000.0, failing: str = "", counted: bool = False):
    """A stand-in for ChaosCheck.one_run: each run as a job of 10 steps, reported by rank 0 one a
    second from ``t0`` with a loss, that saves ckpt.pt after step 3 and final.pt at its end, in
    the work directory it was given. With faults (a kill at a step), the first attempt reaches that
    step, and the next resumes from step 3. ``failing``: which run fails ("undisturbed", "with
    faults"); ``counted``: the steps are the optimizer's, counted from 1 in each attempt, and no
    attempt says where it resumed."""

    def one_run(request):
        runs.append(request)
        faults = list(request.faults)
        ran = result(make_job, tmp_path, ok=failing != ("with faults" if faults else "undisturbed"),
                     run_id=f"run{len(runs)}",
                     faults=[FaultRecord(str(f), f.node or "node0", elapsed_s=f.at_step + 0.5, step=f.at_step,
                                         fired_time=t0 + f.at_step + 0.5) for f in faults])
        ran.started_time = t0
        ran.run_dir = Path(request.runs_dir) / ran.run_id
        (ran.run_dir / "progress").mkdir(parents=True)
        struck_at = faults[0].at_step if faults else None
        first = range(1, (struck_at or 10) + 1)
        lines = [{"rank": 0, "time": t0 + n, "step": n, "attempt": "a", "loss": 1.0 / n, "counted": counted}
                 for n in first]
        if struck_at:
            if not counted:
                lines.append({"rank": 0, "time": t0 + 20.0, "resumed": 3, "attempt": "b"})
            lines += [{"rank": 0, "time": t0 + 20 + n, "step": n - 3 if counted else n, "attempt": "b",
                       "loss": 1.0 / n, "counted": counted} for n in range(4, 11)]
        (ran.run_dir / "progress" / "rank0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        (Path(request.workdir) / "final.pt").write_bytes(b"weights")
        ran.writes = [WrittenFile("ckpt.pt", t0 + 3.5), WrittenFile("final.pt", t0 + 31.0)]
        return ran

    return one_run


def test_a_whole_check_runs_the_reference_then_each_trial_from_its_own_copy_and_judges_each(make_job, tmp_path,
                                                                                             monkeypatch):
    """Two trials (seeds 5 and 6) of one kill each: every run elastic, in its own copy of the work
    directory, with restarts for its faults; each trial with the schedule its seed draws from the
    reference's facts, its files compared with the reference's, its steps compared and counted
    redone, its verdict kept in its run's directory. Trial 6's final.pt differs: the check does
    not hold, and says so by seed."""
    import orchestrate.chaos.check as check_module
    from orchestrate.chaos.check import CHAOS_FILE, ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True,
                                      max_restarts=1)
    out = io.StringIO()
    kinds = (FaultAction.KILL,)
    check = ChaosCheck(request, faults=1, seed=5, kinds=kinds, compare=("final.pt",), rtol=0.01, trials=2,
                       compare_steps=True, max_steps_redone=10, out=out)
    compared = []

    def compare(client, image, first, second, paths, rtol, run_as):
        assert (client, image, run_as) == ("the engine", request.image, check.run_as())
        compared.append((first.name, second.name, paths, rtol))
        return [FileComparison(p, "tensors", second.name.endswith("seed5"), 0.0 if second.name.endswith("seed5")
                               else 0.5, "w") for p in paths]

    monkeypatch.setattr(check_module, "compare_files", compare)
    check.engine = lambda: "the engine"
    runs = []
    check.one_run = fake_job_run(make_job, tmp_path, runs)
    outcome = check.run()

    [base] = (tmp_path / "runs").iterdir()
    assert [Path(r.workdir) for r in runs] == [base / "undisturbed", base / "with-faults-seed5",
                                               base / "with-faults-seed6"]
    assert all(r.rdzv == "c10d" and Path(r.runs_dir) == base / "runs" and r.max_restarts == 3 for r in runs)
    facts = Reference(10, 30.0, "ckpt.pt", 3.5, 4, first_step=1, steps_done=10)
    schedules = [draw_schedule(seed, 1, kinds, ["node0", "node1"], facts, world_size=2) for seed in (5, 6)]
    assert [tuple(r.faults) for r in runs] == [(), *schedules]
    said = out.getvalue().splitlines()
    assert said[:5] == [
        "[chaos] --max-restarts 1 raised to 3: a restart for each of the 1 fault(s), and 2 to spare",
        f"[chaos] run 1 of 3: the job undisturbed, in a copy of the work directory ({base / 'undisturbed'})",
        "[chaos] the undisturbed job: 10 steps in 30.0 s; it first wrote ckpt.pt, before step 4",
        f"[chaos] run 2 of 3: the same job with 1 fault(s) drawn from seed 5: {schedules[0][0]}",
        ""]  # then trial 5's verdict
    assert f"[chaos] run 3 of 3: the same job with 1 fault(s) drawn from seed 6: {schedules[1][0]}" in said
    assert compared == [("undisturbed", "with-faults-seed5", ["final.pt"], 0.01),
                        ("undisturbed", "with-faults-seed6", ["final.pt"], 0.01)]
    assert outcome.reference.run_id == "run1" and [t.seed for t in outcome.trials] == [5, 6]
    held, differs = outcome.trials
    for trial, run_id, schedule in ((held, "run2", schedules[0]), (differs, "run3", schedules[1])):
        step = schedule[0].at_step
        assert trial.disturbed.run_id == run_id and trial.schedule == [str(schedule[0])]
        assert trial.reference is outcome.reference and trial.facts == facts and trial.rtol == 0.01
        assert trial.steps_redone == step - 3 and trial.max_steps_redone == 10
        assert trial.steps.equal and trial.steps.compared == step + 7  # each attempt's steps, with a loss
        [struck] = trial.strikes
        assert (struck.spec, struck.steps_done, struck.saved, struck.resumed_from) == (
            str(schedule[0]), step, ("ckpt.pt",), 3)
        text = (trial.disturbed.run_dir / CHAOS_FILE).read_text()
        assert text.startswith('{\n  "') and text.endswith("}\n")  # indented for a reader
        kept = json.loads(text)
        assert (kept["seed"], kept["status"], kept["disturbed_run"]) == (trial.seed, trial.status, run_id)
    assert held.status == "HOLDS" and differs.status == "DOES NOT HOLD"
    assert outcome.status == "DOES NOT HOLD" and outcome.exit_code == 1
    assert outcome.failures == ["seed 6: final.pt: differs (tensors; largest difference 0.5 at w)"]
    assert "VERDICT HOLDS" in out.getvalue() and "VERDICT DOES NOT HOLD" in out.getvalue()  # each trial's, as it ends


def test_saves_the_work_directory_held_before_the_check_and_the_job_wrote_again_are_named_as_its_start(
        make_job, tmp_path, monkeypatch):
    """An earlier run left ckpt.pt (and notes.txt, never written) in the work directory: the
    undisturbed run wrote ckpt.pt again, so a job that resumes began every run from it. Said when
    the reference ends, under the verdict, and in chaos.json; the file the job did not write is
    not named."""
    import orchestrate.chaos.check as check_module
    from orchestrate.chaos.check import CHAOS_FILE, ChaosCheck
    from orchestrate.config.request import RunRequest
    from orchestrate.report.page import chaos_section

    work = tmp_path / "work"
    work.mkdir()
    for name, text in (("train.py", "print('hi')\n"), ("ckpt.pt", "an earlier run's"), ("notes.txt", "mine")):
        (work / name).write_text(text)
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    out = io.StringIO()
    check = ChaosCheck(request, faults=1, seed=5, kinds=(FaultAction.KILL,), compare=("final.pt",), out=out)
    monkeypatch.setattr(check_module, "compare_files", lambda client, image, first, second, paths, rtol, run_as: [
        FileComparison(p, "bytes", True) for p in paths])
    check.engine = lambda: "the engine"
    check.one_run = fake_job_run(make_job, tmp_path, [])
    [trial] = check.run().trials
    note = ("note: the work directory held ckpt.pt before the check, and the undisturbed run wrote it again: a job that"
            " resumes from its saves began every run from there, not from its start (move it out of the work"
            " directory to check the job from its start)")
    said = out.getvalue().splitlines()
    assert said[1:3] == ["[chaos] the undisturbed job: 10 steps in 30.0 s; it first wrote ckpt.pt, before step 4",
                         f"[chaos] {note}"]
    assert trial.facts.held_before == ("ckpt.pt",) and trial.status == "HOLDS"
    assert trial.format().splitlines()[-2:] == [note, "VERDICT HOLDS: the job survived 1 fault(s), resumed after a"
                                                      " save, and ended where the undisturbed run ended"]
    kept = json.loads((trial.disturbed.run_dir / CHAOS_FILE).read_text())
    assert kept["held_before"] == ["ckpt.pt"]
    assert ('<p id="chaos-held-before">Begun from saves the work directory held before the check: ckpt.pt (written'
            ' again by the undisturbed run; a job that resumes from its saves began every run there, not from its'
            ' start)</p>') in chaos_section(kept)
    assert not any("chaos-held-before" in part for part in chaos_section({**kept, "held_before": []}))


def test_a_save_held_before_is_one_the_run_kept_not_a_temporary_file_it_renamed_away(make_job, tmp_path):
    """An earlier run that crashed mid-save left ckpt.tmp beside ckpt.pt; this run wrote both
    again, and renamed ckpt.tmp onto ckpt.pt: only ckpt.pt is what a job resumes from."""
    from orchestrate.chaos.check import written_again

    untouched = tmp_path / "copy"
    untouched.mkdir()
    for name in ("ckpt.pt", "ckpt.tmp", "train.py"):
        (untouched / name).write_text("x")
    ran = result(make_job, tmp_path)
    ran.writes = [WrittenFile("ckpt.tmp", 1.0, kept=False), WrittenFile("ckpt.pt", 1.1), WrittenFile("log.txt", 1.2),
                  WrittenFile("ckpt.pt", 2.0)]
    assert written_again(ran, untouched) == ("ckpt.pt",)


def test_a_note_of_saves_held_before_names_each_or_a_few_and_how_many_more():
    from orchestrate.chaos.verdict import held_before_note

    assert held_before_note(("a.pt", "b.pt")).startswith("the work directory held a.pt, b.pt before the check, and"
                                                          " the undisturbed run wrote them again:")
    assert held_before_note(("a.pt", "b.pt")).endswith("(move them out of the work directory to check the job from"
                                                       " its start)")
    assert held_before_note(tuple(f"{n}.pt" for n in "abcde")).startswith("the work directory held a.pt, b.pt, c.pt"
                                                                         " and 2 more before the check")


@pytest.mark.parametrize("counted", [False, True])
def test_one_trial_runs_in_a_copy_of_its_own_and_its_verdict_is_printed_by_the_command_not_the_check(
        counted, make_job, tmp_path, monkeypatch):
    """One trial of a rank fault on 2 nodes of 2 workers: its copy is `with-faults`, the ranks
    drawn from are the world's 4, and the check prints no verdict itself (`chaos` prints the
    result's). Counted steps (no attempt said where it resumed) still give where the last attempt
    resumed, from the undisturbed run's count."""
    import orchestrate.chaos.check as check_module
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2,
                                      nproc_per_node=2, cpu=True)
    facts = Reference(10, 30.0, "ckpt.pt", 3.5, 4)
    kinds = (FaultAction.KILL_RANK,)
    seed = next(seed for seed in range(100)  # one whose rank needs the world's size to be drawn
                if draw_schedule(seed, 1, kinds, ["node0", "node1"], facts, world_size=4)
                != draw_schedule(seed, 1, kinds, ["node0", "node1"], facts))
    out = io.StringIO()
    check = ChaosCheck(request, faults=1, seed=seed, kinds=kinds, compare=("final.pt",), out=out)
    monkeypatch.setattr(check_module, "compare_files", lambda *args: [FileComparison("final.pt", "tensors", True, 0.0)])
    check.engine = lambda: None
    runs = []
    check.one_run = fake_job_run(make_job, tmp_path, runs, counted=counted)
    outcome = check.run()
    [base] = (tmp_path / "runs").iterdir()
    assert [Path(r.workdir).name for r in runs] == ["undisturbed", "with-faults"]
    [schedule] = [tuple(r.faults) for r in runs[1:]]
    assert schedule == draw_schedule(seed, 1, kinds, ["node0", "node1"], facts, world_size=4)
    assert f"drawn from seed {seed}: {schedule[0]}\n" in out.getvalue()
    assert "VERDICT" not in out.getvalue() and "VERDICT HOLDS" in outcome.format()
    [trial] = outcome.trials
    assert trial.steps is None  # no --compare-steps
    [struck] = trial.strikes
    assert (struck.resumed_from, trial.steps_redone) == (3, schedule[0].at_step - 3)


def test_a_trial_whose_job_failed_under_its_faults_compares_no_file(make_job, tmp_path, monkeypatch):
    import orchestrate.chaos.check as check_module
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    out = io.StringIO()
    check = ChaosCheck(request, faults=2, seed=2, kinds=(FaultAction.KILL,), compare=("final.pt",), out=out)
    monkeypatch.setattr(check_module, "compare_files", lambda *args: pytest.fail("compared a failed job's files"))
    runs = []
    check.one_run = fake_job_run(make_job, tmp_path, runs, failing="with faults")
    [trial] = check.run().trials
    first, second = runs[1].faults
    assert f"drawn from seed 2: {first} {second}\n" in out.getvalue()
    assert trial.comparisons == [] and trial.status == "DOES NOT HOLD"
    assert trial.failures[0].startswith("the job did not complete under the faults")


def test_each_run_of_a_check_is_a_run_as_the_command_runs_one_and_a_stop_from_elsewhere_stops_the_check(
        make_job, tmp_path, monkeypatch):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest
    from orchestrate.interrupts import SignalInterrupt

    request = RunRequest.from_options(("train.py",), workdir=tmp_path, runs_dir=tmp_path / "runs")
    out = io.StringIO()
    check = ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS, out=out, client="given engine",
                       command_line="python -m orchestrate chaos ...", verbose=True)
    followed = []
    ended = result(make_job, tmp_path)

    def run_and_report(run, raise_interrupt):
        followed.append((run.request, run.out, run.client, run.command_line, run.verbose, run.notes, raise_interrupt))
        run.client = "the engine the run connected to"
        return ended

    monkeypatch.setattr("orchestrate.chaos.check.run_and_report", run_and_report)
    assert check.one_run(request) is ended
    assert followed == [(request, out, "given engine", "python -m orchestrate chaos ...", True, False, True)]
    assert check.client == "the engine the run connected to"  # the next run, and the comparison, use it
    ended.interrupted, ended.stopped_by, ended.signal_number = True, "stop RUN from another terminal", 15
    with pytest.raises(SignalInterrupt) as stopped:
        check.one_run(request)
    assert stopped.value.signum == 15
    plain = ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS)
    assert (plain.client, plain.command_line, plain.verbose, plain.compare_steps) == (None, "", False, False)


def test_the_check_connects_to_the_engine_once_where_it_was_given_none(tmp_path, monkeypatch):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    connected = []
    monkeypatch.setattr("orchestrate.engine.client.connect", lambda: connected.append(1) or f"engine {len(connected)}")
    check = ChaosCheck(RunRequest.from_options(("train.py",), workdir=tmp_path), faults=1, seed=1, kinds=DEFAULT_KINDS)
    assert (check.engine(), check.engine(), connected) == ("engine 1", "engine 1", [1])


def test_a_copy_keeps_links_as_links_and_copies_a_file_named_as_a_checks_directory(tmp_path):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "datasets").mkdir()
    (work / "data").symlink_to(tmp_path / "datasets")  # a dataset linked in: not copied whole
    (work / "chaos-20261204-101010-abcdef").write_text("a file, not a check's directory")
    check = ChaosCheck(RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs"), faults=1,
                       seed=1, kinds=DEFAULT_KINDS)
    [copy] = check.copies(tmp_path / "runs" / "chaos-x", ["undisturbed"])
    assert (copy / "data").is_symlink() and os.readlink(copy / "data") == str(tmp_path / "datasets")
    assert (copy / "chaos-20261204-101010-abcdef").read_text() == "a file, not a check's directory"


def test_what_the_undisturbed_run_did_not_write_names_what_it_wrote_six_at_most_and_ends_the_check(
        make_job, tmp_path):
    from orchestrate.chaos.check import ChaosCheck, describe_reference, unwritten_comparisons
    from orchestrate.config.request import RunRequest

    reference = result(make_job, tmp_path)
    reference.writes = [WrittenFile(f"ckpt/step_{n}.pt", float(n)) for n in range(8, 0, -1)]
    (tmp_path / "log.txt").write_text("an earlier run's")
    assert unwritten_comparisons(tmp_path, ("final.pt", "log.txt"), reference) == [
        FileComparison("final.pt", "bytes", False, problem="the undisturbed run wrote no such file (it wrote"
                       " ckpt/step_1.pt, ckpt/step_2.pt, ckpt/step_3.pt, ckpt/step_4.pt, ckpt/step_5.pt,"
                       " ckpt/step_6.pt and 2 more); no trial was run"),
        FileComparison("log.txt", "bytes", False, problem="the undisturbed run did not write it: the file there is"
                       " the work directory's own, from before the check, unchanged (it wrote ckpt/step_1.pt,"
                       " ckpt/step_2.pt, ckpt/step_3.pt, ckpt/step_4.pt, ckpt/step_5.pt, ckpt/step_6.pt and 2 more);"
                       " no trial was run")]
    reference.writes = reference.writes[1:]
    assert "ckpt/step_6.pt and 1 more); no trial" in unwritten_comparisons(tmp_path, ("final.pt",), reference)[0].problem
    reference.writes = reference.writes[1:]
    assert "ckpt/step_6.pt); no trial" in unwritten_comparisons(tmp_path, ("final.pt",), reference)[0].problem
    reference.writes = []
    assert unwritten_comparisons(tmp_path, ("final.pt",), reference)[0].problem == (
        "the undisturbed run wrote no such file (it wrote no file in its work directory); no trial was run")
    # a directory (a DCP checkpoint's): its files are what can be compared
    (tmp_path / "ckpt" / "final").mkdir(parents=True)
    reference.writes = [WrittenFile(f"ckpt/final/__{n}_0.distcp", 1.0) for n in range(4)] + [
        WrittenFile("ckpt/final/.metadata", 2.0), WrittenFile("ckpt/step_3/__0_0.distcp", 0.5)]
    assert [c.problem for c in unwritten_comparisons(tmp_path, ("ckpt/final/", "ckpt"), reference)] == [
        "a directory: --compare takes files; name those in it to compare (it wrote ckpt/final/.metadata,"
        " ckpt/final/__0_0.distcp, ckpt/final/__1_0.distcp and 2 more); no trial was run",
        "a directory: --compare takes files; name those in it to compare (it wrote ckpt/final/.metadata,"
        " ckpt/final/__0_0.distcp, ckpt/final/__1_0.distcp and 3 more); no trial was run"]
    reference.writes = []
    assert unwritten_comparisons(tmp_path, ("ckpt",), reference)[0].problem == (
        "a directory: --compare takes files; name those in it to compare (the undisturbed run wrote no file in it);"
        " no trial was run")
    assert describe_reference(Reference(None, 12.25)) == (
        "the undisturbed job: no steps reported or counted in 12.2 s; it wrote no file in its work directory")
    # the check ends with its verdict on the reference, kept whole
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    check = ChaosCheck(RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs"), faults=1,
                       seed=4, kinds=DEFAULT_KINDS, compare=("final.pt",), rtol=0.25, out=io.StringIO())
    check.one_run = lambda request: reference
    outcome = check.run()
    assert outcome.reference is reference and outcome.trials[0].reference is reference
    assert (outcome.trials[0].seed, outcome.trials[0].rtol, outcome.trials[0].disturbed) == (4, 0.25, None)


def test_a_check_whose_undisturbed_run_failed_runs_no_trial(make_job, tmp_path):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    check = ChaosCheck(request, faults=1, seed=5, kinds=DEFAULT_KINDS, trials=3, rtol=0.5, compare_steps=True,
                       out=io.StringIO())
    runs = []
    check.one_run = fake_job_run(make_job, tmp_path, runs, failing="undisturbed")
    outcome = check.run()
    assert len(runs) == 1 and outcome.reference.run_id == "run1"
    [verdict] = outcome.trials
    assert (verdict.seed, verdict.disturbed, verdict.schedule, verdict.rtol) == (5, None, [], 0.5)
    assert verdict.failures == ["the undisturbed run failed (exit code 1): nothing to compare with"]
    assert outcome.exit_code == 1


def test_a_verdict_with_no_run_with_faults_never_holds_whatever_made_it(make_job, tmp_path):
    """`chaos` makes one only with a reason (the undisturbed run failed, or did not write a compared
    file); one made without any still does not hold: it says nothing was tested."""
    nothing = ChaosVerdict(1, result(make_job, tmp_path, run_id="ref"), None, [])
    assert nothing.status == "DOES NOT HOLD" and nothing.failures == ["no run with faults was made: nothing was tested"]


def test_trials_hold_only_if_every_one_holds_and_the_worst_one_decides(make_job, tmp_path):
    held = verdict_of(make_job, tmp_path, [strike()])
    unsure = verdict_of(make_job, tmp_path, [strike(saved=())])
    failed = verdict_of(make_job, tmp_path, [strike()], max_steps_redone=0)
    reference = held.reference
    assert ChaosResult(reference, [held, held]).status == "HOLDS"
    assert ChaosResult(reference, [held, unsure]).status == "INCONCLUSIVE"
    assert ChaosResult(reference, []).status == "DOES NOT HOLD"  # no trial: nothing was tested
    mixed = ChaosResult(reference, [unsure, failed, held])
    assert mixed.status == "DOES NOT HOLD" and mixed.exit_code == 1
    assert mixed.failures[1] == "seed 7: 3 step(s) redone in all, more than --max-steps-redone 0"
    text = mixed.format()
    assert "=== chaos check: 3 trials against one undisturbed run" in text
    assert "VERDICT DOES NOT HOLD: 1 of 3 trials does not hold:" in text


def test_a_node_that_rejoined_before_the_job_failed_is_no_recovery_and_the_files_not_compared_are_said(
        make_job, tmp_path):
    """A trial's torn write: node0 rejoined, its workers failed reading the cut ckpt.pt. Its
    verdict said "recovery: node0 rejoined" and "recoveries 1", and the --compare final.pt line
    was gone; the check's own judgement now names the file not compared."""
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    torn = FaultRecord("torn-write:node0@step=29", "node0", elapsed_s=16.5, step=29, fired_time=116.5)
    disturbed = result(make_job, tmp_path, ok=False, faults=[torn], job_s=65.4, run_id="dis")
    disturbed.timings.recoveries.append(Recovery("node0", f"injected fault {torn.spec}", failed_at=17.0,
                                                 step_before=29))
    work = tmp_path / "work"
    work.mkdir()
    check = ChaosCheck(RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs"), faults=1,
                       seed=0, kinds=DEFAULT_KINDS, compare=("final.pt",), rtol=0.0, out=io.StringIO())
    reference = result(make_job, tmp_path, run_id="ref")
    (disturbed.run_dir / PROGRESS_SUBDIR).mkdir(parents=True)
    verdict = check.judge(0, reference, [], Reference(40, 19.0, "ckpt.pt", 1.0, 2), disturbed, [torn.spec],
                          tmp_path / "undisturbed", work)
    lines = verdict.format().splitlines()
    assert verdict.recovered == [] and verdict.status == "DOES NOT HOLD"
    assert ("no recovery: node0 rejoined after injected fault torn-write:node0@step=29, but the job failed before its"
            " next step: last step before it 29") in lines
    assert any(line.startswith("recoveries 0 (1 rejoin(s) with no step after: the job failed) | steps redone")
               for line in lines)
    assert ("not compared: final.pt: the job did not complete under the faults, so it did not end where the"
            " undisturbed run ended (what it left is not compared)") in lines
    assert verdict.record()["not_compared"] == ["final.pt"]
    # a job that completed recovered from each rejoin, with or without steps reported after it
    assert len(replace(verdict, disturbed=result(make_job, tmp_path, faults=[torn], run_id="ok")).recovered) == 0
    done = result(make_job, tmp_path, faults=[torn], run_id="done")
    done.timings.recoveries.append(disturbed.recoveries[0])
    assert replace(verdict, disturbed=done).recovered == done.recoveries


def test_a_trials_whole_verdict_says_each_fault_what_it_struck_the_recoveries_and_what_was_compared(
        make_job, tmp_path):
    """What ``chaos`` prints of one trial, and ``chaos.json`` keeps, whole: a fault that struck
    later than it fired (a torn write) says both; one the job went on through struck nothing."""
    torn = FaultRecord("torn-write:node0@step=20", "node0", elapsed_s=15.0, step=20, fired_time=115.0,
                       struck_time=117.5)
    pause = FaultRecord("pause:node1@t=25..27", "node1", elapsed_s=25.0, fired_time=125.0)
    disturbed = result(make_job, tmp_path, faults=[KILL, torn, pause], job_s=44.0, run_id="dis")
    disturbed.results[0].restarts_in_place = 2
    disturbed.timings.recoveries.append(Recovery("node1", "injected fault kill:node1@step=12", failed_at=10.0,
                                                 step_before=12, resumed_from=9, resumed_at=14.0))
    verdict = ChaosVerdict(
        11, result(make_job, tmp_path, run_id="ref"), disturbed, [KILL.spec, torn.spec, pause.spec],
        [FileComparison("final.pt", "tensors", True, 0.0, "w"), FileComparison("log.txt", "bytes", True)],
        facts=Reference(30, 30.0, "ckpt.pt", 3.0, 4), steps_redone=5, steps=StepsComparison(12),
        strikes=[strike(), Strike(torn.spec, 15.0, 20, 8, 5.0, ("ckpt.pt",), True, 18, 2, struck_step=22)])
    assert verdict.format().splitlines() == [
        "",
        "=== chaos check (seed 11) ===",
        "fault                     fired at                                    the attempt it struck had done"
        "  saved before it  the next attempt",
        "------------------------  ------------------------------------------  ------------------------------"
        "  ---------------  --------------------------------------",
        "kill:node1@step=12        8.5 s, step 12                              12 step(s), 6.0 s training    "
        "  yes: ckpt.pt     resumed from step 9: 3 step(s) redone",
        "torn-write:node0@step=20  15.0 s, step 20; struck at 17.5 s, step 22  8 step(s), 5.0 s training     "
        "  yes: ckpt.pt     resumed from step 18: 2 step(s) redone",
        "pause:node1@t=25..27      25.0 s                                      -                             "
        "  -                -",
        "recovery: node1 rejoined after injected fault kill:node1@step=12: recovery (failure detected to first step"
        " after resume) 4.0 s; steps lost 3 (last step 12, resumed from 9)",
        "recoveries 1 | restarts in place 2 | steps redone 5 (35 done against 30 undisturbed) | time lost +14.0 s"
        " (job 44.0 s against 30.0 s undisturbed)",
        "compared final.pt: matches (tensors; every value equal)",
        "compared log.txt: identical (bytes)",
        "compared per-step metrics: 12 value(s) match the undisturbed run's",
        f"runs: undisturbed {tmp_path / 'ref'}, with faults {tmp_path / 'dis'}",
        "VERDICT HOLDS: the job survived 3 fault(s), resumed after a save, and ended where the undisturbed run ended"]
    assert json.loads(json.dumps(verdict.record())) == {
        "seed": 11, "status": "HOLDS", "holds": True, "failures": [], "inconclusive": [], "rtol": 0.0,
        "schedule": [
            {"fault": "kill:node1@step=12", "fired_at": "8.5 s, step 12", "struck": "12 step(s), 6.0 s training",
             "saved_before": "yes: ckpt.pt", "next_attempt": "resumed from step 9: 3 step(s) redone"},
            {"fault": "torn-write:node0@step=20", "fired_at": "15.0 s, step 20; struck at 17.5 s, step 22",
             "struck": "8 step(s), 5.0 s training", "saved_before": "yes: ckpt.pt",
             "next_attempt": "resumed from step 18: 2 step(s) redone"},
            {"fault": "pause:node1@t=25..27", "fired_at": "25.0 s", "struck": "-", "saved_before": "-",
             "next_attempt": "-"}],
        "comparisons": [
            {"path": "final.pt", "kind": "tensors", "equal": True, "max_difference": 0.0, "where": "w", "problem": ""},
            {"path": "log.txt", "kind": "bytes", "equal": True, "max_difference": None, "where": "", "problem": ""}],
        "steps_compared": "per-step metrics: 12 value(s) match the undisturbed run's", "unchecked": "",
        "not_compared": [],
        "held_before": [], "steps_redone": 5, "steps_done": None, "ended_at_step": None, "steps_skipped": 0,
        "time_lost_s": 14.0, "reference_run": "ref", "disturbed_run": "dis"}
    # a torn write whose step at the cut is not known, or whose strike was not found: its times alone
    unknown_step = replace(verdict, strikes=[verdict.strikes[0], replace(verdict.strikes[1], struck_step=None)])
    assert unknown_step.fault_rows()[1][1] == "15.0 s, step 20; struck at 17.5 s"
    assert replace(verdict, strikes=verdict.strikes[:1]).fault_rows()[1][1:] == (
        "15.0 s, step 20; struck at 17.5 s", "-", "-", "-")


def test_trials_that_did_not_hold_are_each_said_with_their_seed_under_the_checks_verdict(make_job, tmp_path):
    """A fault that never fired says why, one the run never got to says so; every trial's line,
    then the reasons of each that did not hold or was inconclusive, named by its seed."""
    reference = result(make_job, tmp_path, run_id="ref")
    unfired = FaultRecord("restart:node0@step=40", "node0", fired=False, reason="the workers never reached step 40")
    failed = ChaosVerdict(12, reference, result(make_job, tmp_path, faults=[unfired], job_s=31.0, run_id="dis2"),
                          [unfired.spec, "kill:node1@step=45"],
                          [FileComparison("final.pt", "tensors", False, 0.25, "")])
    assert failed.format().splitlines()[2:] == [
        "fault                  fired at                                         the attempt it struck had done"
        "  saved before it  the next attempt",
        "---------------------  -----------------------------------------------  ------------------------------"
        "  ---------------  ----------------",
        "restart:node0@step=40  did not fire: the workers never reached step 40  -                             "
        "  -                -",
        "kill:node1@step=45     did not fire: the run did not get there          -                             "
        "  -                -",
        "recoveries 0 | steps redone - | time lost +1.0 s (job 31.0 s against 30.0 s undisturbed)",
        "compared final.pt: differs (tensors; largest difference 0.25)",
        f"hint: {COMPARE_STEPS_HINT}",
        f"runs: undisturbed {tmp_path / 'ref'}, with faults {tmp_path / 'dis2'}",
        "VERDICT DOES NOT HOLD:",
        "  fault restart:node0@step=40 did not fire: the workers never reached step 40",
        "  final.pt: differs (tensors; largest difference 0.25)"]
    disturbed = result(make_job, tmp_path, faults=[KILL], job_s=41.5, run_id="dis")
    disturbed.timings.recoveries.append(Recovery("node1", "its death", failed_at=10.0))
    facts = Reference(30, 30.0, "ckpt.pt", 3.0, 4)
    held = ChaosVerdict(7, reference, disturbed, [KILL.spec], facts=facts, strikes=[strike()])
    unsure = ChaosVerdict(8, reference, disturbed, [KILL.spec], facts=facts, strikes=[strike(saved=())],
                          steps_redone=0)
    assert ChaosResult(reference, [held, failed, unsure]).format().splitlines() == [
        "",
        f"=== chaos check: 3 trials against one undisturbed run ({tmp_path / 'ref'}) ===",
        "seed  schedule                                  recoveries  steps redone  verdict",
        "----  ----------------------------------------  ----------  ------------  -------------",
        "7     kill:node1@step=12                        1           -             HOLDS",
        "12    restart:node0@step=40 kill:node1@step=45  0           -             DOES NOT HOLD",
        "8     kill:node1@step=12                        1           0             INCONCLUSIVE",
        "VERDICT DOES NOT HOLD: 1 of 3 trials does not hold:",
        "  seed 12: fault restart:node0@step=40 did not fire: the workers never reached step 40",
        "  seed 12: final.pt: differs (tensors; largest difference 0.25)",
        "  seed 8: no fault struck after the job had written a file in its work directory, so the resume path was"
        " never exercised (the undisturbed run wrote its first, ckpt.pt, before step 4)"]
    assert ChaosResult(reference, [held, unsure]).format().splitlines()[-2] == (
        "VERDICT INCONCLUSIVE: 1 of 2 trials inconclusive:")
    assert ChaosResult(reference, [held, held]).format().splitlines()[-1] == "VERDICT HOLDS: every one of 2 trials held"
    assert ChaosResult(reference, [held, unsure]).rows()[0] == ("7", "kill:node1@step=12", "1", "-", "HOLDS")
    assert ChaosResult(reference, [failed]).format() == failed.format()  # one trial: its own verdict


def test_a_verdicts_repr_says_its_seeds_its_status_and_its_first_reasons(make_job, tmp_path):
    """What a failed `assert verdict.holds` shows: the dataclass's repr cut off every field it had
    before the why."""
    reference = result(make_job, tmp_path, run_id="ref")
    held = verdict_of(make_job, tmp_path, [strike()])
    assert repr(held) == "ChaosVerdict(seed 7: HOLDS, 1 fault: kill:node1@step=12)"
    assert repr(replace(held, comparisons=[])) == (
        "ChaosVerdict(seed 7: HOLDS, 1 fault: kill:node1@step=12; where it ended was not compared)")
    unsure = verdict_of(make_job, tmp_path, [strike(saved=())])
    assert repr(unsure) == ("ChaosVerdict(seed 7: INCONCLUSIVE: no fault struck after the job had written a file in"
                            " its work directory, so the resume path was never exercised (the undisturbed run wrote"
                            " its first, ckpt.pt, before step 4))")
    unfired = FaultRecord("restart:node0@step=40", "node0", fired=False, reason="the workers never reached step 40")
    failed = ChaosVerdict(12, reference, result(make_job, tmp_path, faults=[unfired], run_id="dis"), [unfired.spec],
                          [FileComparison("final.pt", "tensors", False, 0.25, ""),
                           FileComparison("log.txt", "bytes", False)])
    assert repr(failed) == ("ChaosVerdict(seed 12: DOES NOT HOLD: fault restart:node0@step=40 did not fire: the"
                            " workers never reached step 40; final.pt: differs (tensors; largest difference 0.25)"
                            " (+1 more))")
    assert repr(ChaosResult(reference, [failed])) == "ChaosResult" + repr(failed)[len("ChaosVerdict"):]  # one trial
    assert repr(ChaosResult(reference, [held, failed, unsure])) == (
        "ChaosResult(3 trials, seeds 7, 12, 7: DOES NOT HOLD: seed 12: fault restart:node0@step=40 did not fire: the"
        " workers never reached step 40; seed 12: final.pt: differs (tensors; largest difference 0.25) (+2 more))")
    assert repr(ChaosResult(reference, [held, held], trials_asked=3)) == "ChaosResult(2 of 3 trials, seeds 7, 7: HOLDS)"
    assert repr(ChaosResult(reference, [held], trials_asked=2)) == "ChaosResult(1 of 2 trials, seed 7: HOLDS)"
    assert repr(ChaosResult(reference, [])) == (
        "ChaosResult(0 of 1 trial: DOES NOT HOLD: no trial was made: nothing was tested)")


def test_a_failed_assert_on_a_chaos_verdict_shows_why(pytester):
    pytester.makepyfile(test_verdict="""
        from pathlib import Path
        from orchestrate.chaos.verdict import ChaosResult
        from orchestrate.outcome.model import RunResult, Timings

        def test_holds():
            verdict = ChaosResult(RunResult("ref", Path("ref"), [], Timings()), [])
            assert verdict.holds
    """)
    outcome = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    outcome.assert_outcomes(failed=1)
    outcome.stdout.fnmatch_lines(["E  *where False = ChaosResult(0 of 1 trial: DOES NOT HOLD: no trial was made:"
                                  " nothing was tested).holds"])


def test_a_long_reason_is_cut_at_a_clause_so_that_a_failed_assert_shows_the_repr_whole(pytester):
    """A trial's pytest test: pytest cut the repr in its middle, "per-step metric...he resume
    restored", as it does any repr over 240 characters; the repr fits, cut after a clause."""
    pytester.makepyfile(test_verdict="""
        from pathlib import Path
        from orchestrate.chaos.verdict import ChaosResult, ChaosVerdict
        from orchestrate.outcome.model import RunResult, Timings

        def test_holds():
            reference = RunResult("ref", Path("ref"), [], Timings())
            why = ("the test's time limit left 12 s, and the undisturbed run took 40 s: per-step metrics: params first"
                   " differs at step 11 (rank 1, attempt 2): -0.713828 against -0.692093 undisturbed: the first step"
                   " after the resume from step 10, so what the resume restored is not what the undisturbed run had")
            verdict = ChaosResult(reference, [ChaosVerdict(1, reference, None, [], not_made=why)])
            assert verdict.holds
    """)
    outcome = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    outcome.assert_outcomes(failed=1)
    outcome.stdout.fnmatch_lines(["E  *where False = ChaosResult(seed 1: INCONCLUSIVE: no run with faults was made: the"
                                  " test's time limit left 12 s, and the undisturbed run took 40 s: per-step metrics:"
                                  " params first differs at step 11 (rank 1, attempt 2) [[]...: .format() says all]).holds"])
    from orchestrate.chaos.verdict import within_repr
    assert within_repr("R", "a: b") == "R(a: b)"
    words = "one two three four five six seven eight"
    assert within_repr("R", words.replace(" ", ", ", 1), limit=34) == "R(one [...: .format() says all])"
    assert within_repr("R", words, limit=38) == "R(one two [...: .format() says all])"  # no clause: after a word


@pytest.mark.parametrize("asked, runs_with, said", [
    (1, 4, "[chaos] --max-restarts 1 raised to 4: a restart for each of the 2 fault(s), and 2 to spare\n"),
    (None, 4, ""),  # the default: nothing to say
    (9, 9, ""),  # more than enough: taken as it is
])
def test_too_few_restarts_for_the_faults_are_raised_and_said(asked, runs_with, said, make_job, tmp_path):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True,
                                      rdzv="c10d", max_restarts=asked)
    out = io.StringIO()
    check = ChaosCheck(request, faults=2, seed=1, kinds=DEFAULT_KINDS, out=out)
    runs = []

    def one_run(run_request):  # a reference that fails: the check ends after it
        runs.append(run_request)
        return result(make_job, tmp_path, ok=False, run_id="ref")

    check.one_run = one_run
    check.run()
    assert [r.max_restarts for r in runs] == [runs_with]
    assert [line + "\n" for line in out.getvalue().splitlines() if "--max-restarts" in line] == (
        [said] if said else [])


def test_what_the_request_asks_in_vain_is_said_once_by_the_check_not_by_each_run(make_job, tmp_path, monkeypatch):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True,
                                      copy_env=["WANDB_*"])
    out = io.StringIO()
    checked = []

    def run_and_report(run, raise_interrupt):  # the run checks its request, as Run.run does; it fails
        checked.append(run.check())
        return result(make_job, tmp_path, ok=False, run_id="ref")

    monkeypatch.setattr("orchestrate.chaos.check.run_and_report", run_and_report)
    ChaosCheck(request, faults=1, seed=1, kinds=DEFAULT_KINDS, out=out).run()
    assert len(checked) == 1  # the reference, after the check's own look at the request
    assert out.getvalue().count("--copy-env 'WANDB_*': no variable of this machine's environment matches it") == 1


# --- the command's input --------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--faults", "0"], "--faults"),
    (["--kinds", "kill,nope"], "no fault kind 'nope'"),
    (["--rtol", "-1"], "--rtol"),
    (["--compare", "/etc/passwd"], "give a path relative to the work directory"),
    (["--rtol", "0.1"], "--rtol 0.1 is the tolerance of --compare and --compare-steps: give one of them"),
    (["--trials", "0"], "--trials"),
    (["--max-steps-redone", "-2"], "--max-steps-redone"),
    (["--detach"], "unrecognized arguments: --detach"),
])
def test_bad_chaos_input_is_one_line_and_exit_2(argv, message, tmp_path):
    (tmp_path / "job.py").write_text("print('hi')\n")
    proc = orchestrate("chaos", "--workdir", str(tmp_path), "--runs-dir", str(tmp_path / "runs"), *argv, "--",
                       "job.py", env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing copied, nothing run


@pytest.mark.parametrize("asked, options, said", [
    ({"faults": ("kill:node1@step=3",)}, {}, "chaos draws its faults itself: drop --fault (or use run --fault)"),
    ({"scheduler": "slurm"}, {}, "chaos runs the job twice in the foreground: no --scheduler slurm, --detach or --keep"),
    ({"detach": True}, {}, "chaos runs the job twice in the foreground: no --scheduler slurm, --detach or --keep"),
    ({"keep": True}, {}, "chaos runs the job twice in the foreground: no --scheduler slurm, --detach or --keep"),
    ({}, {"faults": 0}, "--faults must be 1 or more, got 0"),
    ({}, {"trials": 0}, "--trials must be 1 or more, got 0"),
    ({}, {"compare": ("../final.pt",)}, "--compare ../final.pt: give a path relative to the work directory"),
    ({}, {"compare": ("/tmp/final.pt",)}, "--compare /tmp/final.pt: give a path relative to the work directory"),
    ({}, {"rtol": 0.1}, "--rtol 0.1 is the tolerance of --compare and --compare-steps: give one of them"),
    ({}, {"rtol": 0.1, "compare": ("final.pt",)}, None),
    ({}, {"rtol": 0.1, "compare_steps": True}, None),
])
def test_what_a_check_cannot_do_is_refused_word_for_word_before_anything_runs(asked, options, said, tmp_path):
    from dataclasses import replace as changed

    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    request = changed(RunRequest.from_options(("train.py",), workdir=tmp_path, runs_dir=tmp_path / "runs"), **asked)
    settings = {"faults": 1, "seed": 1, "kinds": DEFAULT_KINDS, **options}
    if said is None:
        check = ChaosCheck(request, **settings)
        assert (check.rtol, check.compare, check.compare_steps) == (
            0.1, options.get("compare", ()), options.get("compare_steps", False))
        return
    with pytest.raises(UsageError) as refused:
        ChaosCheck(request, **settings)
    assert str(refused.value) == said


def test_a_fault_fired_on_another_ranks_report_counts_the_step_the_launcher_saw():
    # rank 1 reported step 6 first and the launcher fired at 106.02; rank 0 reported step 6 at 106.05
    records = [ProgressRecord(0, t, step=n, attempt="a") for n, t in [(4, 104.0), (5, 105.0), (6, 106.05)]] \
        + [ProgressRecord(0, 110.0, resumed=6, attempt="b")] + steps(0, "b", range(7, 11), 111.0)
    attempts = attempts_of(records, 10, completed=True)
    writes = [WrittenFile("ckpt.pt", 106.0)]
    [strike] = strikes([fired("kill:node1@step=6", 106.02, 6)], attempts, writes)
    assert (strike.steps_done, strike.resumed_from, strike.redone) == (3, 6, 0)
    assert strike.describe_struck() == "3 step(s), 2.0 s training"
    # a step past the one it fired at, or a fault that fired at a step this rank had not got one short of, is
    # not counted: only the rank a step behind
    [early] = strikes([fired("kill:node1@step=6", 104.5, 6)], attempts, writes)
    [later] = strikes([fired("kill:node1@t=5", 105.5, 5)], attempts, writes)
    assert (early.steps_done, later.steps_done) == (1, 2)
    # a torn write struck later than it fired: the steps by its strike only
    torn = replace(fired("torn-write:node0@step=6", 106.02, 6), struck_time=106.02)
    assert strikes([torn], attempts, writes)[0].steps_done == 2


LIMITED = "the test's own time limit, pytest-timeout's 300 s, left it no longer"


def test_a_run_the_tests_own_time_limit_ended_makes_the_trial_inconclusive_never_a_failure_or_a_hold(
        make_job, tmp_path):
    """A job ended by a limit not its own was not let finish: its unfired faults and its failure
    are not the job's, and it resumed nothing anyone saw."""
    cut = verdict_of(make_job, tmp_path, [strike()])
    cut.disturbed.limited_by = LIMITED
    cut.disturbed.results[0].state = NodePhase.STOPPED  # by the limit, not of its own
    assert cut.failures == [] and cut.status == "INCONCLUSIVE" and cut.exit_code == 1
    assert cut.inconclusive == [f"the run with faults was ended before its job ended ({LIMITED}): nothing was"
                                " concluded"]
    # a job that failed on a node of its own, or was found hung, before the limit ended it: its own
    def stopped_by_the_limit(verdict):
        verdict.disturbed.limited_by = LIMITED
        for node in verdict.disturbed.results:
            node.state, node.exit_code = NodePhase.STOPPED, 143
        return verdict
    hung = stopped_by_the_limit(verdict_of(make_job, tmp_path, [strike()]))
    hung.disturbed.hang = HangDiagnosis(60.0, [], {}, None, hung=True)
    assert hung.status == "DOES NOT HOLD" and hung.failures[0].startswith("the job did not complete under the faults")
    failed = stopped_by_the_limit(verdict_of(make_job, tmp_path, [strike()]))
    failed.disturbed.results[1].state = NodePhase.FAILED
    assert failed.status == "DOES NOT HOLD"
    working = stopped_by_the_limit(verdict_of(make_job, tmp_path, [strike()]))  # quiet, working: not its own failure
    working.disturbed.hang = HangDiagnosis(60.0, [], {}, None, hung=False)
    assert working.status == "INCONCLUSIVE"
    no_reference = ChaosVerdict(1, result(make_job, tmp_path, ok=False, run_id="ref"), None, [])
    no_reference.reference.limited_by = LIMITED
    for node in no_reference.reference.results:
        node.state = NodePhase.STOPPED
    assert no_reference.status == "INCONCLUSIVE" and no_reference.inconclusive == [
        f"the undisturbed run was ended before its job ended ({LIMITED}): nothing was concluded"]


def test_a_check_whose_trial_the_tests_time_limit_ended_makes_no_more_trials_and_says_so(
        make_job, tmp_path, monkeypatch):
    import orchestrate.chaos.check as check_module
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    out = io.StringIO()
    ends_by = (12345.0, LIMITED)
    check = ChaosCheck(request, faults=1, seed=5, kinds=(FaultAction.KILL,), compare=("final.pt",), trials=3, out=out,
                       ends_by=ends_by)
    monkeypatch.setattr(check_module, "compare_files", lambda client, image, first, second, paths, rtol, run_as: [
        FileComparison(path, "tensors", True, 0.0, "w") for path in paths])
    check.engine = lambda: "the engine"
    check.clock = lambda: 0.0  # the limit far off: every trial has the time the undisturbed run took
    runs: list = []
    made = fake_job_run(make_job, tmp_path, runs)

    def one_run(run_request):
        ran = made(run_request)
        if len(runs) == 2:  # the first trial: the test's limit came
            ran.limited_by = LIMITED
        return ran
    check.one_run = one_run
    outcome = check.run()
    assert len(runs) == 2 and [t.seed for t in outcome.trials] == [5]
    assert f"[chaos] runs 3 to 4 are not made: {LIMITED}" in out.getvalue().splitlines()
    assert outcome.status == "INCONCLUSIVE"
    # the check's own lines, not the one trial's verdict again (printed as that trial ended)
    text = outcome.format().splitlines()
    assert text[1].startswith("=== chaos check: 1 of 3 trials against one undisturbed run")
    assert text[-2:] == ["VERDICT INCONCLUSIVE: 1 of 1 trials inconclusive:",
                         f"  the run with faults was ended before its job ended ({LIMITED}): nothing was concluded"]

    # the runs are made with the limit: Run's own ends_by
    made_runs = []
    monkeypatch.setattr(check_module, "run_and_report", lambda run, raise_interrupt: made_runs.append(run) or
                        result(make_job, tmp_path, run_id="ref"))
    ChaosCheck(request, faults=1, seed=5, kinds=(FaultAction.KILL,), out=out, ends_by=ends_by).one_run(request)
    assert made_runs[0].ends_by == ends_by


def test_a_check_whose_undisturbed_run_the_tests_time_limit_ended_makes_no_trial(make_job, tmp_path):
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    out = io.StringIO()
    check = ChaosCheck(request, faults=1, seed=5, kinds=(FaultAction.KILL,), out=out)
    runs: list = []

    def one_run(run_request):
        runs.append(run_request)
        ran = result(make_job, tmp_path, ok=False, run_id="ref")
        ran.limited_by = LIMITED
        for node in ran.results:  # the limit stopped them: no failure of their own
            node.state, node.exit_code = NodePhase.STOPPED, 143
        return ran
    check.one_run = one_run
    outcome = check.run()
    assert len(runs) == 1 and outcome.status == "INCONCLUSIVE"
    assert f"[chaos] run 2 is not made: {LIMITED}" in out.getvalue().splitlines()
    assert outcome.failures == [f"the undisturbed run was ended before its job ended ({LIMITED}): nothing was concluded"]


def test_no_trial_is_started_with_less_time_left_than_the_undisturbed_run_took(make_job, tmp_path, monkeypatch):
    """A trial begun with less time left before the test's limit than the undisturbed run needed
    would be cut short unjudged: it is not made, said, and with no trial made at all the check is
    INCONCLUSIVE, never a failure."""
    import orchestrate.chaos.check as check_module
    from orchestrate.chaos.check import ChaosCheck
    from orchestrate.config.request import RunRequest

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    request = RunRequest.from_options(("train.py",), workdir=work, runs_dir=tmp_path / "runs", nodes=2, cpu=True)
    monkeypatch.setattr(check_module, "compare_files", lambda client, image, first, second, paths, rtol, run_as: [
        FileComparison(path, "tensors", True, 0.0, "w") for path in paths])
    for times, made, said in (([80.0], 1, "runs 2 to 4 are not made"), ([0.0, 80.0], 2, "runs 3 to 4 are not made")):
        out = io.StringIO()
        check = ChaosCheck(request, faults=1, seed=5, kinds=(FaultAction.KILL,), compare=("final.pt",), trials=3,
                           out=out, ends_by=(100.0, LIMITED))
        check.engine = lambda: "the engine"
        ticks = iter(times)
        check.clock = lambda: next(ticks)
        runs: list = []
        check.one_run = fake_job_run(make_job, tmp_path / said.replace(" ", "-"), runs)
        outcome = check.run()
        assert len(runs) == made, said
        # the fake undisturbed run: 1 s of bring-up, a 30 s job
        assert f"[chaos] {said}: {LIMITED} (20 s left, and the undisturbed run took 31 s)" in out.getvalue().splitlines()
        if made == 1:
            [verdict] = outcome.trials
            assert outcome.status == "INCONCLUSIVE" and verdict.disturbed is None and verdict.inconclusive == [
                f"no run with faults was made: {LIMITED} (20 s left, and the undisturbed run took 31 s)"]
        else:
            assert [t.status for t in outcome.trials] == ["HOLDS"] and outcome.trials_asked == 3


def test_a_comparison_that_fails_in_its_container_says_its_own_last_words_not_its_command_line(tmp_path):
    """The error quoted the whole comparison script (its command line), cut off before the reason."""
    import types

    import docker
    from orchestrate.chaos.compare import COMPARE_SCRIPT, load_and_compare
    from orchestrate.errors import EngineError

    def run(image, command, **options):
        raise docker.errors.ContainerError("c1", 1, command, image,
                                           b"Traceback (most recent call last):\n  ...\nValueError: the truth value\n\n")

    client = types.SimpleNamespace(containers=types.SimpleNamespace(run=run))
    with pytest.raises(EngineError) as error:
        load_and_compare(client, "img", tmp_path, tmp_path, ["final.pt"], 0.0, None)
    assert str(error.value) == ("cannot compare the runs' files in a container of img: the comparison exited 1:"
                                " ValueError: the truth value")
    assert COMPARE_SCRIPT[:40] not in str(error.value)


def test_a_job_that_did_not_complete_under_the_faults_gives_its_runs_hint_in_the_verdict_too(make_job, tmp_path):
    """The run's summary said what to change (a file only one node could see, a save cut short);
    the verdict below it said only that a node failed."""
    from orchestrate.outcome.root_cause import RootCause

    failed = result(make_job, tmp_path, ok=False, faults=[KILL], run_id="dis")
    failed.results[0].root_cause = RootCause(0, 0, 1, "RuntimeError: ProcessGroupNCCL is only supported with GPUs,"
                                                      " no GPUs found!")
    verdict = ChaosVerdict(7, result(make_job, tmp_path, run_id="ref"), failed, [KILL.spec], [],
                           facts=Reference(30, 30.0, "ckpt.pt", 3.0, 4), strikes=[strike()])
    assert verdict.status == "DOES NOT HOLD"
    assert verdict.failures[0].startswith("the job did not complete under the faults: node0 rank 0 failed")
    assert verdict.failures[1].startswith("hint: these nodes have no GPU, and the script asks for NCCL")
    assert "  hint: these nodes have no GPU" in verdict.format()
    plain = ChaosVerdict(7, result(make_job, tmp_path, run_id="ref"), result(make_job, tmp_path, ok=False, run_id="x"),
                         [KILL.spec], [], facts=Reference(30, 30.0, "ckpt.pt", 3.0, 4), strikes=[strike()])
    assert not any(r.startswith("hint:") for r in plain.failures)  # none where the run's summary gave none


def loop_for_store_outages(reference: Reference, count: int) -> float:
    """The search the computation replaced (session 114's code): a tenth of a second at a time."""
    from orchestrate.chaos.schedule import STORE_FELT_S, store_outage_s

    longer = reference.job_s
    while store_outage_s(replace(reference, job_s=longer), count) < STORE_FELT_S:
        longer = round(longer + 0.1, 1)
    return longer


def test_the_job_long_enough_for_store_outages_is_computed_with_the_search_s_results_at_its_boundaries():
    """Session 115 (h2): too_short_for_store_outages searched a tenth of a second at a time; the
    length is computed now, the same at the edges: an outage of exactly 5 s fits, one a tenth
    shorter does not, and a longer job that moves the faults after the first write needs more."""
    from orchestrate.chaos.schedule import job_s_for_store_outages

    # the middle 80%: 2 outages of 5 s need 20 s of it, a job of 25 s exactly (24.9 s gives 4.98 s each)
    assert job_s_for_store_outages(Reference(None, 20.0), 2) == 25.0
    assert job_s_for_store_outages(Reference(None, 24.9), 2) == 25.0
    assert job_s_for_store_outages(Reference(None, 25.0), 2) == 25.0  # it fits already: as it is
    # the first tenth past it (the search stepped from 24.96 s to round(25.06, 1) and said 25.1 s)
    assert job_s_for_store_outages(Reference(None, 24.96), 2) == 25.0
    assert job_s_for_store_outages(Reference(None, 24.94), 3) == 37.5
    # after the first write (25.1 s): from 26.1 s to 90%, (20 + 26.1) / 0.9 = 51.22 s
    after_save = Reference(80, 48.1, first_write="ckpt.pt", first_write_s=25.1, first_step_after_write=2)
    assert job_s_for_store_outages(after_save, 2) == 51.3
    # a late first write: at 25 s the faults still fall over the middle (no room after it), and fit there
    late = Reference(80, 20.0, first_write="ckpt.pt", first_write_s=20.0)
    assert job_s_for_store_outages(late, 2) == 25.0
    # ... one that leaves room after it by 25 s moves them there, where the first fit is later
    moved = Reference(80, 20.0, first_write="ckpt.pt", first_write_s=19.0)
    assert job_s_for_store_outages(moved, 2) == 44.5 == loop_for_store_outages(moved, 2)
    # a job already past the length that fit over the middle: never a shorter one, (20 + 21) / 0.9 = 45.56 s
    assert job_s_for_store_outages(Reference(80, 30.0, first_write="ckpt.pt", first_write_s=20.0), 2) == 45.6
    assert job_s_for_store_outages(Reference(80, 25.58, first_write="ckpt.pt", first_write_s=20.0), 2) == 45.6
    writes = (None, 0.0, 0.5, 3.0, 9.9, 19.0, 25.1, 60.0)
    cases = [(Reference(80, job_s / 10, first_write="ckpt.pt" if write is not None else None, first_write_s=write), n)
             for job_s in range(5, 400, 13) for write in writes for n in (1, 2, 3, 5)]
    assert [job_s_for_store_outages(r, n) for r, n in cases] == [loop_for_store_outages(r, n) for r, n in cases]


def test_a_dcp_save_before_a_fault_is_named_by_its_directory_in_the_row():
    """A user trial's row said ``yes: ckpt/step_6/.metadata (+5 more)`` for a dcp.save: the newest file of the
    directory, where the next attempt's column names the directory loaded."""
    attempts = attempts_of(steps(0, "a", range(1, 8), 101.0, counted=False)
                           + steps(0, "b", range(7, 11), 111.0, counted=False), 10, completed=True)
    saves = [ProgressRecord(0, 103.5, dcp_saved="ckpt/step_3"), ProgressRecord(0, 106.5, dcp_saved="ckpt/step_6")]
    written = [WrittenFile(f"ckpt/step_{n}/{name}", 100.0 + n + 0.4 + order / 100)
               for n in (3, 6) for order, name in enumerate(("__0_0.distcp", "__1_0.distcp", ".metadata"))]
    [strike] = strikes([fired("kill:node1@step=7", 107.5, 7)], attempts, [WrittenFile("log.txt", 101.0)] + written,
                       steps(0, "a", range(1, 8), 101.0, counted=False) + saves)
    assert (strike.named_save, strike.torch_save, strike.saved_by) == ("ckpt/step_6/.metadata", "ckpt/step_6",
                                                                      "dcp.save")
    assert strike.describe_saved() == "yes: ckpt/step_6/ (+4 more)"  # step_3's three files and log.txt
    # a torch.save's file is named as it was
    by_torch = replace(strike, saved_by="torch.save", torch_save="")
    assert by_torch.describe_saved() == "yes: ckpt/step_6/.metadata (+6 more)"

"""How a preempted node's ranks met its SIGTERM: the words the failure says (outcome/preemption.py),
what the launcher reads of the workers' records after the signal (ProgressWatch.after_sigterm),
the judge's line and outcome.json, and the supervisor's preempt on the fake engine."""
from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.hangs.diagnosis import HangDiagnosis
from orchestrate.outcome.judge import find_failure
from orchestrate.outcome.model import RunResult, Timings
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.preemption import FILES_NAMED, Preemption, RankAfterSigterm, how_ranks_met_sigterm
from orchestrate.outcome.record import outcome_record
from orchestrate.outcome.root_cause import RootCause
from orchestrate.outcome.states import NodePhase
from orchestrate.outcome.summary import format_summary
from orchestrate.supervise.progress import ProgressWatch
from tests.fakes import FakeDockerClient, Script
from tests.unit.test_launcher import once_followed, progress_writer, run

ADVICE = " (to save on preemption, a script catches SIGTERM, saves, and exits 0 within the 10 s grace)"
FAULT = "preempt:node1@t=6"


def met(*ranks: RankAfterSigterm, grace_s: float = 10.0, grace_ran_out: bool = False) -> str:
    return how_ranks_met_sigterm(Preemption(FAULT, grace_s, ranks), grace_ran_out)


# -- the words


def test_a_rank_that_saved_and_finished_is_said_with_how_soon_and_what_it_opened_to_write():
    assert met(RankAfterSigterm(1, 0.234, ("ckpt.pt",))) == (
        "rank 1 finished its script (exit 0) 0.2 s after the SIGTERM (opened to write after it: ckpt.pt)")
    assert met(RankAfterSigterm(1, 1.26)) == "rank 1 finished its script (exit 0) 1.3 s after the SIGTERM"


def test_ranks_alike_are_said_together_with_the_slowest_time_and_every_file():
    said = met(RankAfterSigterm(3, 0.4, ("b.pt",)), RankAfterSigterm(2, 1.5, ("a.pt",)))
    assert said == ("ranks 2, 3 finished their scripts (exit 0) within 1.5 s of the SIGTERM (opened to write after it:"
                    " a.pt, b.pt)")


def test_a_rank_that_did_not_finish_and_saved_nothing_gets_the_advice_with_the_runs_grace():
    assert met(RankAfterSigterm(1)) == "rank 1 did not finish its script after the SIGTERM" + ADVICE
    assert met(RankAfterSigterm(1), grace_s=2.5) == (
        "rank 1 did not finish its script after the SIGTERM (to save on preemption, a script catches SIGTERM, saves,"
        " and exits 0 within the 2.5 s grace)")


def test_no_advice_where_a_rank_saved_or_another_finished():
    assert met(RankAfterSigterm(1, None, ("ckpt.pt",))) == (
        "rank 1 did not finish its script after the SIGTERM (opened to write after it: ckpt.pt)")
    assert met(RankAfterSigterm(2, 0.1), RankAfterSigterm(3)) == (
        "rank 2 finished its script (exit 0) 0.1 s after the SIGTERM; rank 3 did not finish its script after the SIGTERM")


def test_a_grace_that_ran_out_is_said_instead_of_the_advice():
    assert met(RankAfterSigterm(1, None, ("ckpt.pt",)), grace_ran_out=True) == (
        "rank 1 had not finished its script when the 10 s grace ran out (opened to write after it: ckpt.pt)")
    assert met(RankAfterSigterm(0, 0.5), RankAfterSigterm(1), grace_ran_out=True) == (
        "rank 0 finished its script (exit 0) 0.5 s after the SIGTERM; rank 1 had not finished its script when the"
        " 10 s grace ran out")


def test_under_no_grace_the_ranks_are_said_killed_with_the_sigterm_not_out_of_a_0_s_grace():
    """`--stop-grace 0`: a preempt's SIGKILL follows its SIGTERM at once. The ranks were said to
    have "not finished ... when the 0 s grace ran out" (or advised to save "within the 0 s grace")
    until 2026-12-07: there was no grace to run out or to save in."""
    said = met(RankAfterSigterm(1, None, ("ckpt.pt",)), grace_s=0.0, grace_ran_out=True)
    assert said == ("rank 1 got SIGKILL with the SIGTERM, with no grace to finish its script in (--stop-grace 0)"
                    " (opened to write after it: ckpt.pt)")
    assert met(RankAfterSigterm(0), RankAfterSigterm(1), grace_s=0.0) == (
        "ranks 0, 1 got SIGKILL with the SIGTERM, with no grace to finish their scripts in (--stop-grace 0)")
    assert met(RankAfterSigterm(0, finished_before=True), RankAfterSigterm(1), grace_s=0.0, grace_ran_out=True) == (
        "rank 0 had finished its script before the SIGTERM; rank 1 got SIGKILL with the SIGTERM, with no grace to"
        " finish its script in (--stop-grace 0)")


def test_a_rank_that_had_finished_before_the_signal_is_said_so_and_gets_no_advice():
    assert met(RankAfterSigterm(0, finished_before=True), RankAfterSigterm(1, 0.2)) == (
        "rank 0 had finished its script before the SIGTERM; rank 1 finished its script (exit 0) 0.2 s after the SIGTERM")
    assert met(RankAfterSigterm(0, finished_before=True), RankAfterSigterm(1, finished_before=True)) == (
        "ranks 0, 1 had finished their scripts before the SIGTERM")


def test_a_file_on_the_nodes_own_disk_is_said_lost_with_it_and_many_files_are_counted():
    assert met(RankAfterSigterm(1, 0.1, (), ("/tmp/ckpt.pt",))) == (
        "rank 1 finished its script (exit 0) 0.1 s after the SIGTERM (opened to write after it: /tmp/ckpt.pt on its"
        " node's own disk, gone with a preempted node)")
    files = tuple(f"f{i}.pt" for i in range(FILES_NAMED + 2))
    assert met(RankAfterSigterm(1, 0.1, files)) == (
        f"rank 1 finished its script (exit 0) 0.1 s after the SIGTERM (opened to write after it:"
        f" {', '.join(files[:FILES_NAMED])} and 2 more)")


def test_nothing_is_said_where_no_rank_reported():
    assert met() == ""


# -- what the launcher reads after the signal


def watch_with(tmp_path, *records: dict) -> ProgressWatch:
    for record in records:
        with open(tmp_path / f"rank{record['rank']}.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    return watch


def test_the_signalled_process_is_read_after_the_signal_alone(tmp_path):
    node1 = {"node": "node1", "began": 99.0}
    watch = watch_with(
        tmp_path,
        {"rank": 2, "step": 1, "time": 100.0, "attempt": "a", **node1},
        {"rank": 2, "wrote": "early.pt", "time": 101.0, "attempt": "a", **node1},  # before the signal
        {"rank": 2, "wrote_locally": "/tmp/before", "time": 101.0, "attempt": "a", **node1},
        {"rank": 2, "wrote": "ckpt.pt", "time": 110.5, "attempt": "a", **node1},
        {"rank": 2, "wrote": "early.pt", "time": 110.6, "attempt": "a", **node1},  # said again after its SIGTERM
        {"rank": 2, "wrote_locally": "/tmp/after", "time": 110.6, "attempt": "a", **node1},
        {"rank": 2, "finished": True, "after_step": 1, "time": 111.0, "attempt": "a", **node1},
        {"rank": 3, "step": 1, "time": 100.0, "attempt": "b", **node1},  # it never finished
        {"rank": 0, "step": 1, "time": 100.0, "attempt": "c", "node": "node0", "began": 99.0},  # another node's
        {"rank": 0, "finished": True, "time": 111.0, "attempt": "c", "node": "node0", "began": 99.0},
    )
    assert watch.after_sigterm("node1", (2, 3), 110.0) == (
        RankAfterSigterm(2, 1.0, ("ckpt.pt", "early.pt"), ("/tmp/after",)), RankAfterSigterm(3))


def test_a_rank_that_had_finished_before_the_signal_is_told_from_one_that_finished_after_it(tmp_path):
    watch = watch_with(
        tmp_path,
        {"rank": 0, "step": 1, "time": 100.0, "attempt": "a", "node": "node0", "began": 99.0},
        {"rank": 0, "finished": True, "time": 105.0, "attempt": "a", "node": "node0", "began": 99.0},
    )
    assert watch.after_sigterm("node0", (0,), 110.0) == (RankAfterSigterm(0, finished_before=True),)
    assert watch.after_sigterm("node0", (0,), 104.0) == (RankAfterSigterm(0, 1.0),)


def test_the_process_the_signal_met_is_the_latest_begun_before_it_on_the_node(tmp_path):
    watch = watch_with(
        tmp_path,
        {"rank": 1, "step": 1, "time": 100.0, "attempt": "first", "node": "node1", "began": 99.0},
        # a restart's process (torchrun's --max-restarts) that began before the signal and said nothing until after
        {"rank": 1, "finished": True, "time": 112.0, "attempt": "second", "node": "node1", "began": 105.0},
        # an elastic restart's, on another node, and one begun after the signal
        {"rank": 1, "wrote": "x.pt", "time": 111.0, "attempt": "moved", "node": "node0", "began": 106.0},
        {"rank": 4, "step": 1, "time": 121.0, "attempt": "late", "node": "node1", "began": 120.0},
    )
    assert watch.after_sigterm("node1", (), 110.0) == (RankAfterSigterm(1, 2.0),)  # elastic: no ranks planned
    assert watch.after_sigterm("node0", (1,), 110.0) == (RankAfterSigterm(1, None, ("x.pt",)),)


def test_records_that_name_no_node_or_start_are_placed_by_the_plans_ranks_and_their_first_record(tmp_path):
    watch = watch_with(
        tmp_path,
        {"rank": 1, "step": 1, "time": 100.0, "attempt": "old"},
        {"rank": 1, "step": 1, "time": 105.0, "attempt": "new"},
        {"rank": 1, "finished": True, "time": 112.0, "attempt": "new"},
        {"rank": 2, "step": 1, "time": 100.0, "attempt": "other"},
    )
    assert watch.after_sigterm("node1", (1,), 110.0) == (RankAfterSigterm(1, 2.0),)


# -- the judge's line and the record


@pytest.fixture
def node_plans(make_job):
    return make_job(nodes=2, nproc_per_node=1).nodes


def preempted(node, ranks: tuple[RankAfterSigterm, ...], grace_s: float = 10.0, fault: str = FAULT,
              **fields) -> NodeResult:
    result = NodeResult(node, NodePhase.FAILED, 143, wall_s=2.0, ended_at=2.0, fault=fault,
                        last_lines=["torchrun's last line"], preemption=Preemption(fault, grace_s, ranks))
    for name, value in fields.items():
        setattr(result, name, value)
    return result


def test_the_failure_of_a_preempted_node_says_how_its_ranks_met_the_sigterm(node_plans):
    node0, node1 = node_plans
    lost = NodeResult(node0, NodePhase.FAILED, 1, ended_at=3.0, root_cause=RootCause(0, 0, 1, "RuntimeError: lost peer"))
    clean = preempted(node1, (RankAfterSigterm(1, 0.2, ("ckpt.pt",)),))
    assert find_failure([lost, clean]).describe() == (
        "node1 failed (injected fault preempt:node1@t=6): rank 1 finished its script (exit 0) 0.2 s after the SIGTERM"
        " (opened to write after it: ckpt.pt)")
    killed = preempted(node1, (RankAfterSigterm(1),), grace_s=5.0, exit_code=137, grace_ran_out=True)
    assert find_failure([lost, killed]).describe() == (
        "node1 failed (injected fault preempt:node1@t=6): rank 1 had not finished its script when the 5 s grace ran out")
    # nothing known of its ranks, a rank that raised, or a later fault the node's result names: said as before
    assert find_failure([lost, preempted(node1, ())]).describe() == "node1 failed (injected fault preempt:node1@t=6)"
    raised = preempted(node1, (RankAfterSigterm(1),),
                       root_cause=RootCause(1, 0, 1, "OSError: [Errno 28] No space left on device"))
    assert find_failure([lost, raised]).describe() == (
        "node1 rank 1 failed (injected fault preempt:node1@t=6): OSError: [Errno 28] No space left on device")
    handler = preempted(node1, (RankAfterSigterm(1, 0.2),))
    handler.preemption = replace(handler.preemption, last_lines=("saved at step 7",), lines_rank=1)
    failure = find_failure([lost, handler])
    assert (failure.rank, failure.last_lines, failure.lines_of) == (None, ("saved at step 7",), "node1/rank1")
    handled = RunResult("r1", Path("r1"), [lost, handler], Timings())
    assert "last lines of node1/rank1: saved at step 7" in repr(handled)
    assert outcome_record(handled)["failure"]["last_lines_of"] == "node1/rank1"
    hung = RunResult("r1", Path("r1"), [lost, handler], Timings(),
                     hang=HangDiagnosis(quiet_s=60.0, groups=[], collectives={}, divergence=None, cause="hang-timeout"))
    assert hung.failure.describe().startswith("HUNG: ") and hung.failure.lines_of == "node1/rank1"
    later = preempted(node1, (RankAfterSigterm(1, 0.2),), fault=FAULT)
    later.fault = "kill:node1@t=9"
    assert find_failure([lost, later]).describe() == "node1 failed (injected fault kill:node1@t=9)"


def test_outcome_json_keeps_each_preempted_ranks_end_and_writes(node_plans, tmp_path):
    node0, node1 = node_plans
    results = [NodeResult(node0, NodePhase.FAILED, 1),
               preempted(node1, (RankAfterSigterm(1, 0.25, ("ckpt.pt",), ("/tmp/x",)), RankAfterSigterm(
                   2, finished_before=True)))]
    nodes = {n["name"]: n for n in outcome_record(RunResult("r1", tmp_path, results, Timings()))["nodes"]}
    assert nodes["node0"]["after_sigterm"] is None
    assert nodes["node1"]["after_sigterm"] == [
        {"rank": 1, "finished_before": False, "finished_after_s": 0.25, "wrote": ["ckpt.pt"], "wrote_locally": ["/tmp/x"]},
        {"rank": 2, "finished_before": True, "finished_after_s": None, "wrote": [], "wrote_locally": []}]


# -- the supervisor's preempt, on the fake engine


def test_a_preempt_marks_the_sigterm_and_reads_how_its_nodes_rank_met_it_with_the_runs_grace(make_run):
    fault = "preempt:node1@step=2"
    job = make_run(nodes=2, faults=(parse_fault(fault),), stop_grace=1)
    client = FakeDockerClient()
    sigterm = ("kill", "ddp-test-run-node1-1", "SIGTERM")
    progress = job.run_dir / "progress"
    marked_before_the_signal = []

    def saves_at_sigterm() -> bool:
        if sigterm not in client.calls:
            return False
        marked_before_the_signal.append((progress / "sigterm-node1").exists())
        with open(progress / "rank1.jsonl", "a") as handle:  # what rank 1's start-up hook says as it saves and exits
            for record in ({"wrote": "ckpt.pt"}, {"finished": True, "after_step": 1}):
                handle.write(json.dumps({"rank": 1, "time": time.time(), "node": "node1", **record}) + "\n")
        return True

    outcome, _, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(progress_writer(job, 0, range(1, 4))),
                      after_when=lambda: ("kill", "ddp-test-run-node1-1") in client.calls, after=["[0|0]:peer lost"],
                      exit_code=1)],
        node1=[Script(["[1|0]:training"], then=progress_writer(job, 1, range(1, 2)), hang=True, ignore_sigterm=True,
                      after_when=saves_at_sigterm, after=["[1|0]:saved"])])
    assert marked_before_the_signal == [True]
    assert not (progress / "sigterm-node0").exists()
    preemption = {r.node.name: r.preemption for r in outcome.results}
    assert preemption["node0"] is None
    assert (preemption["node1"].fault, preemption["node1"].grace_s) == (fault, 1)
    [rank1] = preemption["node1"].ranks
    assert (rank1.rank, rank1.wrote, rank1.finished_before) == (1, ("ckpt.pt",), False)
    assert 0 <= rank1.finished_after_s < 10
    assert re.search(r"FAILED: node1 failed \(injected fault preempt:node1@step=2\): rank 1 finished its script \(exit"
                     r" 0\) \d+\.\d s after the SIGTERM \(opened to write after it: ckpt\.pt\)",
                     format_summary(outcome)), format_summary(outcome)
    # under it, the lines of the rank's handler, not torchrun's own end
    assert (preemption["node1"].lines_rank, preemption["node1"].last_lines[-1:]) == (1, ("saved",))
    summary = format_summary(outcome).splitlines()
    assert summary[summary.index("last lines of node1/rank1:") + 1:][:2] == ["  | training", "  | saved"]


def test_every_node_a_preempt_hit_is_said_with_how_its_ranks_met_it(make_job, tmp_path):
    node0, node1, node2 = make_job(nodes=3, nproc_per_node=1).nodes
    first = preempted(node0, (RankAfterSigterm(0, 0.1, ("ckpt0.pt",)),), fault="preempt:node0@t=6", ended_at=1.0)
    second = preempted(node1, (RankAfterSigterm(1, 0.3, ("ckpt1.pt",)),))
    raised = preempted(node2, (RankAfterSigterm(2),), fault="preempt:node2@t=6",
                       root_cause=RootCause(2, 0, 1, "OSError: disk full"))  # said by its error, once
    lines = format_summary(RunResult("r1", tmp_path, [first, second, raised], Timings())).splitlines()
    said = [line for line in lines if line.startswith(("FAILED", "  then"))]
    assert said == [
        "FAILED: node0 failed (injected fault preempt:node0@t=6): rank 0 finished its script (exit 0) 0.1 s after the"
        " SIGTERM (opened to write after it: ckpt0.pt)",
        "  then node1 (injected fault preempt:node1@t=6): rank 1 finished its script (exit 0) 0.3 s after the SIGTERM"
        " (opened to write after it: ckpt1.pt)",
        "  then node2 rank 2: OSError: disk full"]
    # a node whose root cause has no error of its own (torchrun's SIGTERM to its worker) is said by its ranks
    quiet = preempted(node2, (RankAfterSigterm(2, 0.5),), fault="preempt:node2@t=6", root_cause=RootCause(2, 0, -15))
    lines = format_summary(RunResult("r1", tmp_path, [first, quiet], Timings())).splitlines()
    assert "  then node2 (injected fault preempt:node2@t=6): rank 2 finished its script (exit 0) 0.5 s after the SIGTERM" in lines


def test_a_node_preempted_twice_is_read_from_the_first_sigterm(make_run):
    faults = ("preempt:node1@step=2", "preempt:node1@step=3")
    job = make_run(nodes=2, faults=tuple(parse_fault(f) for f in faults), stop_grace=1)
    client = FakeDockerClient()
    outcome, _, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(progress_writer(job, 0, range(1, 4))),
                      after_when=lambda: ("kill", "ddp-test-run-node1-1") in client.calls, after=["[0|0]:peer lost"],
                      exit_code=1)],
        node1=[Script(["[1|0]:training"], then=progress_writer(job, 1, range(1, 2)), hang=True, ignore_sigterm=True)])
    sigterms = [c for c in client.calls if c[:3] == ("kill", "ddp-test-run-node1-1", "SIGTERM")]
    assert len(sigterms) >= 2, client.calls  # both preempts sent theirs
    preemption = {r.node.name: r.preemption for r in outcome.results}["node1"]
    assert preemption.fault == "preempt:node1@step=2"


def test_no_advice_where_a_rank_of_another_preempted_node_finished(make_job, tmp_path):
    # the whole job taken back: node0's rank saved and finished at once, and node1's rank, whose handler saves too,
    # lost its peer before it could (their signals come apart): it is no script without a handler
    node0, node1 = make_job(nodes=2, nproc_per_node=1).nodes
    first = preempted(node0, (RankAfterSigterm(0, 0.0, ("r0.pt",)),), fault="preempt:node0@t=6", ended_at=1.0)
    second = preempted(node1, (RankAfterSigterm(1),))
    lines = format_summary(RunResult("r1", tmp_path, [first, second], Timings())).splitlines()
    assert "  then node1 (injected fault preempt:node1@t=6): rank 1 did not finish its script after the SIGTERM" in lines
    assert find_failure([second]).describe() == (
        "node1 failed (injected fault preempt:node1@t=6): rank 1 did not finish its script after the SIGTERM" + ADVICE)
    alone = preempted(node0, (RankAfterSigterm(0),), fault="preempt:node0@t=6", ended_at=1.0)
    assert find_failure([alone, second]).describe() == (
        "node0 failed (injected fault preempt:node0@t=6): rank 0 did not finish its script after the SIGTERM" + ADVICE)


def test_a_node_an_elastic_job_got_back_after_a_preempt_is_said_under_its_recovery(make_job, tmp_path):
    from orchestrate.outcome.model import Recovery

    node0, node1 = make_job(nodes=2, nproc_per_node=1).nodes
    back = preempted(node1, (RankAfterSigterm(1, 0.2, ("ckpt.pt",)),), state=NodePhase.SUCCEEDED, exit_code=0)
    back.fault = ""  # (the node's result names no fault once it is back)
    timings = Timings(recoveries=[Recovery("node1", f"injected fault {FAULT}", 1.0),
                                  Recovery("node1", "injected fault preempt:node1@t=30", 2.0),  # a later one: not read
                                  Recovery("node0", "injected fault kill:node0@t=9", 3.0)])
    result = RunResult("r1", tmp_path, [NodeResult(node0, NodePhase.SUCCEEDED, 0), back], timings)
    lines = format_summary(result).splitlines()
    at = lines.index(f"recovery: node1 rejoined after injected fault {FAULT}")
    assert lines[at + 1:at + 3] == [
        "  rank 1 finished its script (exit 0) 0.2 s after the SIGTERM (opened to write after it: ckpt.pt)",
        "recovery: node1 rejoined after injected fault preempt:node1@t=30"]
    assert lines[at + 3] == "recovery: node0 rejoined after injected fault kill:node0@t=9"
    assert lines[at + 4].startswith("logs:")


def test_a_preempt_the_engine_refused_leaves_no_mark_for_a_later_one(make_run):
    from tests.fakes import conflict

    fault = "preempt:node1@step=2"
    job = make_run(nodes=2, faults=(parse_fault(fault),))
    client = FakeDockerClient()
    client.failures["kill"] = conflict("Cannot kill container: it is restarting")  # the engine says no
    sigterm = ("kill", "ddp-test-run-node1-1", "SIGTERM")
    outcome, _, _ = run(job, client,
                        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(progress_writer(job, 0, range(1, 4))),
                                      exit_code=0)],
                        node1=[Script(["[1|0]:training"], after_when=lambda: sigterm in client.calls,
                                      after=["[1|0]:done"], exit_code=0)])
    assert sigterm in client.calls  # it was tried
    [record] = outcome.faults
    assert not record.fired, record
    assert not (job.run_dir / "progress" / "sigterm-node1").exists()
    assert all(r.preemption is None for r in outcome.results)


def test_a_runs_result_gives_each_preempted_rank_by_its_node_and_global_rank(make_job, tmp_path):
    node0, node1 = make_job(nodes=2, nproc_per_node=2).nodes
    saved, lost = RankAfterSigterm(2, 0.2, ("ckpt.pt",)), RankAfterSigterm(3)
    result = RunResult("r1", tmp_path, [NodeResult(node0, NodePhase.FAILED, 1), preempted(node1, (saved, lost))],
                       Timings())
    assert result.after_sigterm == {"node1": {2: saved, 3: lost}}
    # an elastic job numbers its ranks anew: the same rank on two nodes a preempt hit stays apart
    again = preempted(node0, (RankAfterSigterm(2, 1.0),), fault="preempt:node0@t=30")
    both = RunResult("r3", tmp_path, [again, preempted(node1, (saved, lost))], Timings())
    assert both.after_sigterm == {"node0": {2: RankAfterSigterm(2, 1.0)}, "node1": {2: saved, 3: lost}}
    assert RunResult("r2", tmp_path, [NodeResult(node0, NodePhase.SUCCEEDED, 0)], Timings()).after_sigterm == {}


def test_a_rank_that_ran_in_more_than_one_process_shows_no_lines_that_could_be_an_earlier_ones(make_run):
    fault = "preempt:node1@step=2"
    job = make_run(nodes=2, faults=(parse_fault(fault),), stop_grace=1)
    client = FakeDockerClient()
    sigterm = ("kill", "ddp-test-run-node1-1", "SIGTERM")

    def two_processes() -> None:  # an in-place restart: rank 1's first process, then its second
        with open(job.run_dir / "progress" / "rank1.jsonl", "a") as handle:
            for attempt, began in (("first", 1.0), ("second", 2.0)):
                handle.write(json.dumps({"rank": 1, "step": 1, "time": began, "attempt": attempt, "node": "node1",
                                         "began": began}) + "\n")

    outcome, _, _ = run(
        job, client,
        node0=[Script(["[0|0]:training"], then=once_followed(job, "node0")(progress_writer(job, 0, range(1, 4))),
                      after_when=lambda: ("kill", "ddp-test-run-node1-1") in client.calls, after=["[0|0]:peer lost"],
                      exit_code=1)],
        node1=[Script(["[1|0]:Traceback of the first process", "[1|0]:training"], then=two_processes, hang=True,
                      ignore_sigterm=True, after_when=lambda: sigterm in client.calls, after=["[1|0]:still going"])])
    preemption = {r.node.name: r.preemption for r in outcome.results}["node1"]
    assert [m.rank for m in preemption.ranks] == [1]
    assert (preemption.lines_rank, preemption.last_lines) == (None, ())
    assert "last lines of node1:" in format_summary(outcome).splitlines()

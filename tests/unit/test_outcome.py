from __future__ import annotations

import json
from dataclasses import replace
import re
from pathlib import Path

import pytest

from orchestrate.outcome.judge import find_failure
from orchestrate.outcome.model import FaultRecord, Recovery, RunResult, SlurmJob, Timings
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.record import outcome_record
from orchestrate.outcome.root_cause import AttemptError, EarlierFailure, RootCause
from orchestrate.outcome.states import NodePhase
from orchestrate.outcome.summary import format_summary
from orchestrate.text import readable_node_line
from orchestrate.text import brief, counted


def results_for(plan, *specs):
    results = []
    for node, (state, code, ended_at, cause) in zip(plan.nodes, specs):
        results.append(NodeResult(node, state, code, wall_s=ended_at, ended_at=ended_at,
                                  root_cause=cause, last_lines=[f"last of {node.name}"]))
    return results


def outcome(results, **kw):
    return RunResult("run-1", Path("/tmp/runs/run-1"), results, Timings(1.0, 2.0, 3.0, 0.5), **kw)


def test_success_only_when_every_node_exits_zero(make_job):
    plan = make_job(nodes=2)
    ok = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.SUCCEEDED, 0, 1, None))
    assert outcome(ok).succeeded
    one_bad = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.FAILED, 1, 1, None))
    assert not outcome(one_bad).succeeded
    assert not outcome(ok, interrupted=True).succeeded
    assert not outcome([]).succeeded


def test_the_cause_wins_over_an_earlier_collateral_failure(make_job):
    plan = make_job(nodes=2, nproc_per_node=2)
    results = results_for(
        plan,
        (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "RuntimeError: Connection closed by peer")),
        (NodePhase.FAILED, 1, 5.2, RootCause(3, 1, 1, "RuntimeError: injected failure")),
    )
    failure = find_failure(results)
    assert (failure.node, failure.rank, failure.exception) == ("node1", 3, "RuntimeError: injected failure")


def test_earliest_real_failure_wins_and_stopped_nodes_never_count(make_job):
    plan = make_job(nodes=3)
    results = results_for(
        plan,
        (NodePhase.STOPPED, 137, 1.0, None),
        (NodePhase.FAILED, 1, 4.0, RootCause(1, 0, 1, "ValueError: late")),
        (NodePhase.FAILED, 1, 3.0, RootCause(2, 0, 1, "ValueError: early")),
    )
    assert find_failure(results).node == "node2"


def test_summary_has_a_row_per_node_timings_and_the_verdict(make_job):
    plan = make_job(nodes=2, nproc_per_node=2)
    results = results_for(plan, (NodePhase.STOPPED, None, 6.0, None),
                          (NodePhase.FAILED, 1, 5.0, RootCause(3, 1, 1, "RuntimeError: boom")))
    text = format_summary(outcome(results))
    rows = [ln.split() for ln in text.splitlines() if re.match(r"node\d ", ln)]
    assert rows[0][:4] == ["node0", "0,1", "stopped", "-"]
    assert rows[1][:4] == ["node1", "2,3", "failed", "1"]
    assert "bring-up 1.0 s | until first output 2.0 s | job 3.0 s" in text
    assert "FAILED: node1 rank 3 failed (exit code 1): RuntimeError: boom" in text
    assert "  | last of node1" in text
    # the whole of it, with the traceback of the rank's error file in place of its last lines
    results[1].root_cause.traceback = ('Traceback (most recent call last):\n  File "/workspace/train.py", line 9,'
                                       ' in <module>\n    step()\nRuntimeError: boom\n')
    assert format_summary(outcome(results)).splitlines() == [
        "",
        "=== run run-1 summary ===",
        "node   ranks  state    torchrun exit  wall time",
        "-----  -----  -------  -------------  ---------",
        "node0  0,1    stopped  -              6.0 s",
        "node1  2,3    failed   1              5.0 s",
        "bring-up 1.0 s | until first output 2.0 s | job 3.0 s | teardown 0.5 s",
        "logs: /tmp/runs/run-1",
        "FAILED: node1 rank 3 failed (exit code 1): RuntimeError: boom",
        "traceback from the error file of node1/rank3:",
        "  | Traceback (most recent call last):",
        '  |   File "/workspace/train.py", line 9, in <module>',
        "  |     step()",
        "  | RuntimeError: boom"]


def test_a_node_killed_when_its_stop_grace_ran_out_is_named_under_each_kind_of_ending(make_job):
    """A failure (a node stopped after it), a hang and an interrupt: the node a SIGKILL ended
    when its grace ran out is named under the headline's lines, with what still ran; the others
    are not."""
    from orchestrate.hangs.diagnosis import HangDiagnosis

    plan = make_job(nodes=3)
    line = ("  node2 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran:"
            " python a.py (sleeping)")

    def ended(node1: tuple) -> list[NodeResult]:
        results = results_for(plan, (NodePhase.STOPPED, 143, 6.0, None), node1, (NodePhase.STOPPED, 137, 9.0, None))
        results[2].grace_ran_out, results[2].still_running = True, ["python a.py (sleeping)"]
        return results

    failed = format_summary(outcome(ended((NodePhase.FAILED, 1, 5.0, RootCause(1, 0, 1, "RuntimeError: boom"))))).splitlines()
    at = failed.index("FAILED: node1 rank 1 failed (exit code 1): RuntimeError: boom")
    assert failed[at + 1] == line and failed.count(line) == 1, failed
    hang = HangDiagnosis(20.0, [], {}, None, cause="no progress for 20 s")
    hung = format_summary(outcome(ended((NodePhase.STOPPED, 137, 9.0, None)), hang=hang)).splitlines()
    assert hung[-1] == line and hung.count(line) == 1 and hung[-2].startswith("HUNG: "), hung
    stopped = format_summary(outcome(ended((NodePhase.STOPPED, 143, 6.0, None)), interrupted=True,
                                     signal_number=15, stopped_by="python -m orchestrate stop")).splitlines()
    at = stopped.index("STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped")
    assert stopped[at + 1] == line and stopped.count(line) == 1, stopped
    # the run's time limit, with no failure: the nodes stopped after it
    limit = format_summary(outcome(ended((NodePhase.STOPPED, 143, 6.0, None)),
                                   error="timed out after 60 s")).splitlines()
    assert limit[limit.index("FAILED: timed out after 60 s") + 1] == line and limit.count(line) == 1, limit
    # a Ctrl-C after a failure: said once, under the interrupt's line
    both = format_summary(outcome(ended((NodePhase.FAILED, 1, 5.0, RootCause(1, 0, 1, "RuntimeError: boom"))),
                                  interrupted=True, signal_number=2)).splitlines()
    assert both[both.index("INTERRUPTED by SIGINT: every node was stopped") + 1] == line and both.count(line) == 1
    assert not [ln for ln in failed + hung + stopped if "node0 did not" in ln or "node1 did not" in ln]


def test_summary_of_a_success_says_so(make_job):
    plan = make_job(nodes=2)
    text = format_summary(outcome(results_for(
        plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.SUCCEEDED, 0, 1, None))))
    assert text.splitlines() == ["", "=== run run-1 summary ===",
                                 "node   ranks  state      torchrun exit  wall time",
                                 "-----  -----  ---------  -------------  ---------",
                                 "node0  0      succeeded  0              1.0 s",
                                 "node1  1      succeeded  0              1.0 s",
                                 "bring-up 1.0 s | until first output 2.0 s | job 3.0 s | teardown 0.5 s",
                                 "logs: /tmp/runs/run-1",
                                 "SUCCEEDED: all 2 nodes exited 0"]
    one = make_job(nodes=1)
    alone = outcome(results_for(one, (NodePhase.SUCCEEDED, 0, 1, None)))
    assert format_summary(alone).rstrip().endswith("SUCCEEDED: its 1 node exited 0")
    assert "SUCCEEDED, 1 node," in repr(alone)


@pytest.mark.parametrize("count, noun, plural, said", [
    (1, "node", "", "1 node"), (2, "node", "", "2 nodes"), (0, "node", "", "0 nodes"),
    (1, "process", "processes", "1 process"), (4, "process", "processes", "4 processes"),
])
def test_a_count_and_its_noun_agree(count, noun, plural, said):
    assert counted(count, noun, plural) == said


def test_exit_codes_follow_one_rule(make_job):
    plan = make_job(nodes=2)
    ok = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.SUCCEEDED, 0, 1, None))
    bad = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.FAILED, 1, 1, None))
    assert outcome(ok).exit_code == 0
    assert outcome(bad).exit_code == 1
    assert outcome(ok, error="compose up failed", error_exit_code=2).exit_code == 2
    assert outcome(ok, teardown_error="could not remove project").exit_code == 2  # never 0
    assert outcome(bad, teardown_error="could not remove project").exit_code == 1
    assert outcome(ok, interrupted=True, signal_number=15).exit_code == 143
    assert "TEARDOWN FAILED: could not remove project" in format_summary(outcome(ok, teardown_error="could not remove project"))


def test_a_job_that_succeeded_with_a_failed_teardown_succeeded_and_its_repr_says_exit_code_2(make_job):
    """``succeeded`` is the job's verdict, ``exit_code`` the environment's too: a passing ``assert result.succeeded``
    once had a repr of a plain success, though the run's project was left behind and its exit code was 2."""
    plan = make_job(nodes=2)
    ok = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.SUCCEEDED, 0, 1, None))
    left = "could not remove project ddp-run-1; run: docker compose -p ddp-run-1 down -v"
    result = outcome(ok, teardown_error=left)
    assert result.succeeded and result.exit_code == 2
    assert repr(result) == (f"RunResult(run-1: SUCCEEDED, 2 nodes, run_dir=/tmp/runs/run-1; but exit code 2:"
                            f" TEARDOWN FAILED: {left})")
    assert repr(outcome(ok)) == "RunResult(run-1: SUCCEEDED, 2 nodes, run_dir=/tmp/runs/run-1)"


def test_an_oom_killed_node_is_the_cause_not_its_peers_closed_connections(make_job):
    plan = make_job(nodes=2, memory_per_node=1024**3)
    results = results_for(
        plan,
        (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "RuntimeError: Connection closed by peer", timestamp=1.0)),
        (NodePhase.FAILED, 1, 5.2, RootCause(1, 0, -9, "SIGKILL")),
    )
    results[1].oom_kills = 1
    failure = find_failure(results)
    assert failure.node == "node1"
    assert failure.describe().startswith("node1 OOM-killed: the kernel killed 1 process(es) at the node's memory"
                                         " limit (rank 1 killed)")
    assert "  then node0 rank 0: RuntimeError: Connection closed by peer" in format_summary(outcome(results)).splitlines()
    # both nodes past their limit: the other one's kill is its own, not an exit code to guess at
    results[0].root_cause, results[0].oom_kills = RootCause(0, 0, -9, "SIGKILL"), 2
    lines = format_summary(outcome(results)).splitlines()
    assert "FAILED: node0 OOM-killed: the kernel killed 2 process(es) at the node's memory limit (rank 0 killed);" \
           " raise --memory-per-node or use less memory" in lines  # the first to fail
    assert "  then node1 rank 1: OOM-killed too: the kernel killed 1 process at its memory limit" in lines
    results[1].root_cause = None  # its container went with no worker's error: said all the same
    assert "  then node1: OOM-killed too: the kernel killed 1 process at its memory limit" in (
        format_summary(outcome(results)).splitlines())


def test_a_worker_killed_by_a_signal_after_its_peers_finished_is_explained(make_job):
    plan = make_job(nodes=2, nproc_per_node=2)
    results = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None),
                          (NodePhase.FAILED, 1, 1.2, RootCause(3, 1, -6, "Signal 6 (SIGABRT) received by PID 42")))
    text = format_summary(outcome(results, image_torch="2.14.1"))
    assert "node1 rank 3 died by SIGABRT after its peers finished: the job's work was done" in text
    assert "seen with every torch tried, 2.9 to 2.15 (this image has torch 2.14.1)" in text
    assert "remedy: run on the default node image (torch 2.9.1" in text


def test_a_signal_death_while_peers_also_failed_is_not_called_an_exit_crash(make_job):
    plan = make_job(nodes=2)
    results = results_for(plan, (NodePhase.FAILED, 1, 1, RootCause(0, 0, 1, "RuntimeError: boom", timestamp=1.0)),
                          (NodePhase.FAILED, 1, 1.2, RootCause(1, 0, -6, "SIGABRT")))
    assert "after its peers finished" not in format_summary(outcome(results))


def test_a_rank_that_finished_while_the_others_still_needed_it_explains_their_lost_peer(make_job):
    plan = make_job(nodes=2, nproc_per_node=2)
    results = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "RuntimeError: Connection closed by peer")),
                          (NodePhase.FAILED, 1, 5.1, RootCause(2, 0, 1, "RuntimeError: Connection closed by peer")))
    results[1].finished_ranks = {3: 12}
    text = format_summary(outcome(results))
    assert ("FAILED: node0 rank 0 failed (exit code 1): RuntimeError: Connection closed by peer, as rank 3 (node1,"
            " after step 12) had finished its script while ranks 0-2 still ran, and ranks 0-2's collectives lost it"
            " as a peer (do all ranks run the same number of steps?)") in text
    assert "  then node1 rank 2: the same error\n" in text
    alone = results_for(make_job(nodes=2), (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "Connection reset by peer")),
                        (NodePhase.SUCCEEDED, 0, 4.0, None))
    alone[1].finished_ranks = {1: None}  # a script that reported no step
    assert find_failure(alone).describe().endswith(
        ", as rank 1 (node1) had finished its script while rank 0 still ran, and rank 0's collectives lost it as a"
        " peer (do all ranks run the same number of steps?)")


def test_finished_ranks_explain_nothing_beside_a_failure_of_its_own_or_one_that_finished_too(make_job):
    plan = make_job(nodes=2, nproc_per_node=2)
    own = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "ValueError: bad batch")),
                      (NodePhase.SUCCEEDED, 0, 4.0, None))
    own[1].finished_ranks = {2: 7, 3: 7}
    assert find_failure(own).describe() == "node0 rank 0 failed (exit code 1): ValueError: bad batch"
    # every rank's script returned, and rank 1 crashed on its way out: the exit crash, not a rank that left
    at_exit = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(1, 1, -6, "SIGABRT")),
                          (NodePhase.SUCCEEDED, 0, 4.0, None))
    at_exit[0].finished_ranks, at_exit[1].finished_ranks = {0: 9, 1: 9}, {2: 9, 3: 9}
    assert "had finished" not in find_failure(at_exit).describe()
    assert "died by SIGABRT after its peers finished" in format_summary(outcome(at_exit))
    none = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "Connection closed by peer")),
                       (NodePhase.FAILED, 1, 5.1, RootCause(2, 0, 1, "Connection closed by peer")))
    assert "had finished" not in find_failure(none).describe()
    # rank 2 crashed; torchrun stopped rank 3, whose SIGTERM handler saved and exited 0
    crashed = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "Connection closed by peer")),
                          (NodePhase.FAILED, 1, 5.1, RootCause(2, 0, -11, "Signal 11 (SIGSEGV) received by PID 9")))
    crashed[1].finished_ranks = {3: 4}
    assert "had finished" not in find_failure(crashed).describe()
    killed = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(1, 1, -15, "Signal 15 (SIGTERM) received")),
                         (NodePhase.SUCCEEDED, 0, 4.0, None))
    killed[1].finished_ranks = {2: 4, 3: 4}
    assert "had finished" not in find_failure(killed).describe()
    several = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "Connection closed by peer")),
                          (NodePhase.SUCCEEDED, 0, 4.0, None))
    several[0].finished_ranks, several[1].finished_ranks = {1: 3}, {2: 3, 3: None}
    assert find_failure(several).describe().endswith(
        ", as ranks 1 (node0, after step 3), 2 (node1, after step 3), 3 (node1) had finished their scripts while"
        " rank 0 still ran, and rank 0's collectives lost them as peers (do all ranks run the same number of steps?)")


def test_a_run_stopped_from_another_terminal_says_so_and_exits_as_a_sigterm_would(make_job):
    plan = make_job(nodes=2)
    stopped = results_for(plan, (NodePhase.STOPPED, 143, 5.0, None), (NodePhase.STOPPED, 143, 5.0, None))
    result = outcome(stopped, interrupted=True, signal_number=15, stopped_by="python -m orchestrate stop")
    text = format_summary(result)
    assert "STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped" in text
    assert "FAILED" not in text and "INTERRUPTED" not in text
    assert (result.exit_code, result.succeeded) == (143, False)
    assert "INTERRUPTED by SIGINT: every node was stopped" in format_summary(outcome(stopped, interrupted=True))
    # a Ctrl-C in the bring-up: no node to stop
    assert "INTERRUPTED by SIGINT during the bring-up, before its nodes were followed" in format_summary(
        outcome([], interrupted=True)).splitlines()


def test_a_node_a_fault_struck_that_the_stop_then_stopped_is_not_a_failure_of_the_stopped_run(make_job):
    # `fault RUN pause:node1`, then `stop RUN`: both nodes stopped. The summary said STOPPED, then
    # "FAILED: node1 failed (injected fault pause:node1)", two verdicts of one run.
    plan = make_job(nodes=2)
    stopped = results_for(plan, (NodePhase.STOPPED, 143, 5.0, None), (NodePhase.STOPPED, 143, 5.0, None))
    for result in stopped:
        result.stopped_by_request = True
    stopped[1].fault = "pause:node1"
    result = outcome(stopped, interrupted=True, signal_number=15, stopped_by="python -m orchestrate stop")
    assert result.failure is None
    assert "FAILED" not in format_summary(result)
    # a worker that raised under the fault (a full disk) before the stop came: its error is the failure
    stopped[1].root_cause = RootCause(1, 0, 1, "OSError: [Errno 28] No space left on device: 'ckpt.pt'")
    assert outcome(stopped, interrupted=True).failure.describe() == (
        "node1 rank 1 failed (injected fault pause:node1): OSError: [Errno 28] No space left on device: 'ckpt.pt'")
    stopped[1].root_cause = None
    # a node the launcher was already stopping (a hang's verdict), or the fault ended, failed, stop or not
    stopped[1].stopped_by_request = False
    assert outcome(stopped, interrupted=True).failure.describe() == "node1 failed (injected fault pause:node1)"
    stopped[1].stopped_by_request, stopped[1].state, stopped[1].exit_code = True, NodePhase.FAILED, 137
    assert outcome(stopped, interrupted=True).failure.describe() == "node1 failed (injected fault pause:node1)"


def test_a_stop_from_another_terminal_is_a_result_to_report_and_a_ctrl_c_an_interrupt_to_raise(make_job):
    import io

    import pytest

    from orchestrate.interrupts import SignalInterrupt
    from orchestrate.launch.run import run_and_report

    class Finished:  # a run that has ended as ``result`` says
        def __init__(self, result: RunResult) -> None:
            self.result, self.out = result, io.StringIO()

        def run(self) -> RunResult:
            return self.result

    stopped = results_for(make_job(nodes=1), (NodePhase.STOPPED, 143, 5.0, None))
    by_stop = Finished(outcome(stopped, interrupted=True, signal_number=15, stopped_by="python -m orchestrate stop"))
    try:  # the plugin's test fails alone: no interrupt that would end the session
        assert run_and_report(by_stop, raise_interrupt=True).exit_code == 143
    except SignalInterrupt:
        pytest.fail("a stop from another terminal was raised as an interrupt of this process")
    assert "STOPPED by python -m orchestrate stop (SIGTERM)" in by_stop.out.getvalue()
    with pytest.raises(SignalInterrupt):  # a Ctrl-C of this process ends the check or the session
        run_and_report(Finished(outcome(stopped, interrupted=True, signal_number=2)), raise_interrupt=True)


def test_a_worker_that_refused_its_input_is_said_in_one_line_with_its_last_line():
    from orchestrate.outcome.judge import Failure

    refused = Failure("node0", 0, 2, "", ("[Gloo] Rank 0 is connected", "--sync-bn needs GPUs: torch's SyncBatchNorm"
                                          " does not run on the CPU"))
    assert refused.describe() == ("node0 rank 0 failed (exit code 2): --sync-bn needs GPUs: torch's SyncBatchNorm does"
                                  " not run on the CPU")
    crashed = Failure("node0", 0, 1, "", ("some line",))
    assert crashed.describe() == "node0 rank 0 failed (exit code 1)"  # only a refusal's last line is its reason


def test_peers_that_refused_alike_are_said_once_and_a_required_local_rank_argument_gets_its_hint(make_job):
    """A script of torch.distributed.launch's time requires --local_rank: every rank's argparse
    refuses it (exit code 2, no traceback). A peer's refusal is its worker's exit code and last
    line, said as the same error; another peer's, or one with no line, says its own."""
    required = "train.py: error: the following arguments are required: --local_rank"
    usage = "usage: train.py [-h] --local_rank LOCAL_RANK"
    plan = make_job(nodes=4)
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 2, timestamp=1.0)),
                          (NodePhase.FAILED, 1, 1.1, RootCause(1, 0, 2, timestamp=1.1)),
                          (NodePhase.FAILED, 1, 1.2, RootCause(2, 0, 2, timestamp=1.2)),
                          (NodePhase.FAILED, 1, 1.3, RootCause(3, 0, 3, timestamp=1.3)))
    for result in results[:2]:
        result.last_lines = [usage, required]
    results[2].last_lines = [usage, "train.py: error: argument --epochs: invalid int value: 'x'"]
    lines = format_summary(outcome(results)).splitlines()
    failed = lines.index(f"FAILED: node0 rank 0 failed (exit code 2): {required}")
    assert lines[failed + 1:failed + 5] == [
        "  then node1 rank 1: the same error",
        "  then node2 rank 2: train.py: error: argument --epochs: invalid int value: 'x'",
        "  then node3 rank 3: exit code 3",  # its worker's, not its torchrun's 1
        "  hint: the script requires --local_rank, which torch.distributed.launch passed on the command line;"
        " torchrun, which starts every node's workers, passes it in the environment as LOCAL_RANK: read"
        " int(os.environ[\"LOCAL_RANK\"]), or drop required=True and give the argument"
        " default=int(os.environ.get(\"LOCAL_RANK\", 0))"]
    dashed = results_for(make_job(nodes=2), (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 2, timestamp=1.0)),
                         (NodePhase.SUCCEEDED, 0, 1.1, None))
    dashed[0].last_lines = [usage, "train.py: error: the following arguments are required: --local-rank, --data"]
    assert "\n  hint: the script requires --local-rank, which" in format_summary(outcome(dashed))
    other = results_for(make_job(nodes=2), (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 2, timestamp=1.0)),
                        (NodePhase.SUCCEEDED, 0, 1.1, None))
    other[0].last_lines = [usage, "train.py: error: the following arguments are required: --data"]
    assert "hint:" not in format_summary(outcome(other))
    crashed = results_for(make_job(nodes=2), (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, timestamp=1.0)),
                          (NodePhase.SUCCEEDED, 0, 1.1, None))
    crashed[0].last_lines = [required]  # not a refusal's exit code: printed, not what ended it
    assert "hint:" not in format_summary(outcome(crashed))


def test_a_ranks_output_finds_a_piece_of_text_as_the_whole_output_does(tmp_path):
    from orchestrate.outcome.model import RunResult, Timings

    (tmp_path / "node0.log").write_text("[node0/rank0] ACCEPT OK: 3 steps\n[node0/rank1] Traceback (most recent call)\n")
    result = RunResult("r", tmp_path, [], Timings())
    lines = result.rank_output(0)
    assert lines == ["ACCEPT OK: 3 steps"]  # still the lines
    assert "ACCEPT OK" in lines and "ACCEPT OK" in result.output
    assert "Traceback" not in lines and "Traceback" in result.rank_output(1)  # an assert on it can fail
    assert str(result.rank_output(1)) == "Traceback (most recent call)\n"
    assert "ACCEPT OK: 3 steps" in lines and 3 not in lines
    from orchestrate.outcome.model import Lines
    assert str(Lines(["ACCEPT OK: 3 steps", "Traceback"])) == "ACCEPT OK: 3 steps\nTraceback\n"


def test_a_rank_the_run_never_had_is_refused_not_read_as_one_that_printed_nothing(make_job, tmp_path):
    from orchestrate.outcome.model import RunResult, Timings

    plan = make_job(nodes=2, nproc_per_node=2)
    (tmp_path / "node0.log").write_text("[node0/rank0] hello\n")
    result = RunResult("r", tmp_path, results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None),
                                                  (NodePhase.SUCCEEDED, 0, 1, None)), Timings())
    assert result.rank_output(3) == [] and result.rank_output(0) == ["hello"]  # rank 3 was there, and quiet
    for missing in (4, 7, -1):
        with pytest.raises(IndexError, match=rf"^rank {missing}: this run's ranks are 0 to 3$"):
            result.rank_output(missing)
    # an elastic plan names no ranks: its rendezvous gives out at most its nodes' processes
    elastic = make_job("e", nodes=2, nproc_per_node=2, rdzv="c10d")
    result = RunResult("e", tmp_path, results_for(elastic, (NodePhase.SUCCEEDED, 0, 1, None),
                                                  (NodePhase.SUCCEEDED, 0, 1, None)), Timings())
    assert result.rank_output(3) == []
    with pytest.raises(IndexError, match=r"^rank 4: this run's ranks are 0 to 3$"):
        result.rank_output(4)


def test_any_rank_of_a_run_that_never_came_up_is_refused_not_read_as_one_that_printed_nothing(tmp_path):
    """A run whose bring-up failed has no node results and no lines: `"Traceback" not in
    result.rank_output(0)` once held of it. A run with no node results of its own whose ranks
    printed (a Slurm run) came up: a rank of it that printed nothing is quiet, as ever."""
    from orchestrate.outcome.model import RunResult, SlurmJob, Timings

    never = RunResult("r", tmp_path / "r", [], Timings(), error="bring-up failed: no such image")
    for rank in (0, 3):
        with pytest.raises(IndexError, match=rf"^rank {rank}: this run has no ranks: it never came up \(no node ran"
                                             r" the job, and no rank printed a line\)$"):
            never.rank_output(rank)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "slurm-job.log").write_text("[node0/rank0] hello\n")
    slurm = RunResult("s", tmp_path / "s", [], Timings(), slurm=SlurmJob("4"))
    assert slurm.rank_output(0) == ["hello"] and slurm.rank_output(1) == []
    # a Slurm job that ran and whose ranks printed nothing: submitted, so it came up; one sbatch refused did not
    (tmp_path / "q").mkdir()
    assert RunResult("q", tmp_path / "q", [], Timings(), slurm=SlurmJob("5")).rank_output(0) == []
    with pytest.raises(IndexError, match="it never came up"):
        RunResult("q", tmp_path / "q", [], Timings(), slurm=SlurmJob("")).rank_output(0)


def test_a_failed_assert_on_a_result_shows_how_the_run_ended_and_why_then_the_last_lines(make_job):
    """`assert result.succeeded` in a user's test shows the result's repr: read whole, for each
    part it can have."""
    from orchestrate.hangs.diagnosis import HangDiagnosis
    from orchestrate.outcome.judge import Failure

    plan = make_job(nodes=2)
    done = outcome(results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.SUCCEEDED, 0, 1, None)))
    assert repr(done) == "RunResult(run-1: SUCCEEDED, 2 nodes, run_dir=/tmp/runs/run-1)"
    # a Slurm run has no node results of its own: its job, and the nodes Slurm ran it on
    job = SlurmJob("4", job={"JobState": "COMPLETED", "ExitCode": "0:0"}, nodes={"node0": {}, "node1": {}})
    assert repr(RunResult("run-2", Path("/tmp/runs/run-2"), [], Timings(), slurm=job)) == (
        "RunResult(run-2: SUCCEEDED, Slurm job 4 on 2 nodes, run_dir=/tmp/runs/run-2)")
    failed = results_for(plan, (NodePhase.FAILED, 1, 1, None), (NodePhase.STOPPED, 143, 2, None))
    failure = Failure("node1", 3, 1, "ValueError: bad batch", ("l1", "l2", "l3", "l4"),
                      traceback="Traceback (most recent call last):\n  File x\n    load()\nValueError: bad batch\n\n",
                      description="node1 rank 3 failed (exit code 1): ValueError: bad batch",
                      users_frame="train.py:6 in load: raise ValueError", chain=("caused by: KeyError: 'x'",
                                                                                 "caused by: OSError"))
    unfired = FaultRecord("kill:node0@step=50", "node0", fired=False, reason="the workers never reached step 50")
    result = outcome(failed, reported_failure=failure, faults=[unfired])
    assert repr(result) == (
        "RunResult(run-1: FAILED (exit code 1): node1 rank 3 failed (exit code 1): ValueError: bad batch, in your code"
        " at train.py:6 in load: raise ValueError, caused by: KeyError: 'x'; fault kill:node0@step=50 did not fire:"
        " the workers never reached step 50; last lines of node1/rank3: File x | load() | ValueError: bad batch)")
    # no traceback: its last lines; a node's failure without a rank; whose lines they are, where said
    plain = Failure("node1", None, 137, "", ("l1", "l2", "l3", "l4"), description="node1 was OOM-killed")
    assert repr(outcome(failed, reported_failure=plain)) == (
        "RunResult(run-1: FAILED (exit code 1): node1 was OOM-killed; last lines of node1: l2 | l3 | l4)")
    # a node's own lines come as the node printed them: its workers' read without torchrun's prefix
    raw = replace(plain, last_lines=("[3|1]:step 7", "W1206 03:01:02.000000 8 api.py:725] Received 9 death signal",
                                     "[default0]:loss 0.5"))
    assert repr(outcome(failed, reported_failure=raw)) == (
        "RunResult(run-1: FAILED (exit code 1): node1 was OOM-killed; last lines of node1: [rank3] step 7 | W1206"
        " 03:01:02.000000 8 api.py:725] Received 9 death signal | [local0] loss 0.5)")
    assert format_summary(outcome(failed, reported_failure=raw)).splitlines()[-4:] == [
        "last lines of node1:", "  | [rank3] step 7", "  | W1206 03:01:02.000000 8 api.py:725] Received 9 death signal",
        "  | [local0] loss 0.5"]
    # torch's own "[rank1]:" before each line of a worker's error is the worker's text, never torchrun's prefix
    assert readable_node_line("[rank1]: Traceback (most recent call last):") == "[rank1]: Traceback (most recent call last):"
    assert readable_node_line("[1|1]:[rank1]: ValueError") == "[rank1] [rank1]: ValueError"
    assert repr(outcome(failed, reported_failure=replace(plain, lines_of="node1/rank2", last_lines=()))) == (
        "RunResult(run-1: FAILED (exit code 1): node1 was OOM-killed)")
    assert repr(outcome(failed, reported_failure=replace(plain, rank=2, lines_of="node0/rank0"))).endswith(
        "; last lines of node0/rank0: l2 | l3 | l4)")
    # an interrupt, an engine's error, a look at a quiet job it stopped
    stopped = outcome(failed, reported_failure=replace(plain, users_frame="", last_lines=()), interrupted=True,
                      signal_number=15, error="cannot reach the engine",
                      hang=HangDiagnosis(5.0, [], {}, None, hung=False))
    assert repr(stopped) == ("RunResult(run-1: FAILED (exit code 143): interrupted by signal 15; cannot reach the"
                             f" engine; node1 was OOM-killed; at the last look: {stopped.hang.headline})")
    quiet = outcome(failed, reported_failure=replace(plain, last_lines=()), hang=HangDiagnosis(5.0, [], {}, None))
    assert repr(quiet).endswith(f"; while hung: {quiet.hang.headline})")  # hung, but not what ended it
    ended_by_it = outcome(failed, reported_failure=replace(plain, last_lines=()),
                          hang=HangDiagnosis(5.0, [], {}, None, cause="no progress for 5 s"))
    assert "while hung" not in repr(ended_by_it)  # its failure's own line says it
    # the environment's failure alone: no failure of the job, no last lines
    assert repr(outcome([], error="cannot bring up the nodes: no such image")) == (
        "RunResult(run-1: FAILED (exit code 2): cannot bring up the nodes: no such image)")
    # a fault that fired says what it did where it knows
    assert FaultRecord("disk-full:node0", "node0", elapsed_s=1.0, detail="rank 0's write failed").describe() == (
        "disk-full:node0 (1.0 s into the job): rank 0's write failed")


def test_a_worker_that_crashed_is_the_cause_named_with_its_signal_and_where_it_was(make_job):
    plan = make_job(nodes=2)
    crashed = RootCause(1, 0, -11, "", timestamp=None,
                        crashed="Segmentation fault in read at train.py:9; every thread's stack: /r/debug/rank1.crash")
    # the peer's lost connection ended first, yet the crash explains it
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, "RuntimeError: Connection closed by peer")),
                          (NodePhase.FAILED, 1, 1.2, crashed))
    text = format_summary(outcome(results))
    assert "FAILED: node1 rank 1 failed (exit code -11, SIGSEGV)\n" in text
    assert "\n  where it crashed: Segmentation fault in read at train.py:9; every thread's stack:" in text
    # a signal named in the error already is not said twice; a code that is no signal has no name
    assert find_failure(results_for(plan, (NodePhase.FAILED, 1, 1, RootCause(0, 0, -6, "Signal 6 (SIGABRT)")),
                                    (NodePhase.SUCCEEDED, 0, 1, None))).describe() == \
        "node0 rank 0 failed (exit code -6): Signal 6 (SIGABRT)"
    assert find_failure(results_for(plan, (NodePhase.FAILED, 1, 1, RootCause(0, 0, 1, "ValueError: x")),
                                    (NodePhase.SUCCEEDED, 0, 1, None))).describe() == \
        "node0 rank 0 failed (exit code 1): ValueError: x"


def test_an_error_files_traceback_loses_the_hooks_frames_and_keeps_the_scripts():
    callstack = ('Traceback (most recent call last):\n'
                 '  File "/workspace/train.py", line 11, in main\n'
                 '    dist.all_reduce(x, group="oops")\n'
                 '  File "/opt/ddp-compose/orchestrate/node/collective_log.py", line 111, in call\n'
                 '    result = original(*args, **kwargs)\n'
                 '             ^^^^^^^^^^^^^^^^^^^^^^^^^\n'
                 '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1370, in'
                 ' get_backend\n'
                 '    raise ValueError(\n'
                 'ValueError: Process group oops is not initialized\n')
    cause = RootCause(1, 0, 1)
    cause.add_error_file(json.dumps({"message": {"message": "ValueError: Process group oops is not initialized",
                                                 "extraInfo": {"py_callstack": callstack, "timestamp": "7"}}}))
    assert cause.traceback == callstack.replace(
        '  File "/opt/ddp-compose/orchestrate/node/collective_log.py", line 111, in call\n'
        '    result = original(*args, **kwargs)\n'
        '             ^^^^^^^^^^^^^^^^^^^^^^^^^\n', "")


def test_an_abort_is_the_cause_unless_its_last_words_are_a_lost_peers(make_job):
    plan = make_job(nodes=2)
    culprit = RootCause(1, 0, 1, "ValueError: bad batch")
    for words in ("c10::DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread"
                  " terminated with exception: NCCL error: remote process exited or there was a network error",
                  "gloo::IoException: [pair.cc:538] Read error [10.0.0.2]:4242: Connection reset by peer"):
        # the peer's abort ended first, yet it only lost the culprit
        results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, -6, words)),
                              (NodePhase.FAILED, 1, 1.2, culprit))
        assert find_failure(results).describe() == "node1 rank 1 failed (exit code 1): ValueError: bad batch", words
    own = RootCause(0, 0, -6, "gloo::EnforceNotMet: [enforce fail at pair.cc:456] 8 vs 4. Received data size doesn't"
                              " match expected size. Is there a distributed collective mismatch in your code?")
    lost = RootCause(1, 0, 1, "RuntimeError: [pair.cc:538] Read error: Connection reset by peer")
    results = results_for(plan, (NodePhase.FAILED, 1, 1.2, own), (NodePhase.FAILED, 1, 1.0, lost))
    assert find_failure(results).describe().startswith("node0 rank 0 failed (exit code -6, SIGABRT): gloo::EnforceNotMet")


def test_a_script_that_needs_a_gpu_on_nodes_without_one_gets_a_hint(make_job):
    plan = make_job(nodes=2)
    nccl = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, "ValueError: ProcessGroupNCCL is only"
                                                                           " supported with GPUs, no GPUs found!")),
                       (NodePhase.FAILED, 1, 1.2, RootCause(1, 0, 1, "ValueError: ProcessGroupNCCL is only supported")))
    assert "\n  hint: these nodes have no GPU, and the script asks for NCCL: --nccl-as-gloo gives it gloo" in \
        format_summary(outcome(nccl))
    cuda = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, "RuntimeError: Found no NVIDIA driver on"
                                                                           " your system.")),
                       (NodePhase.SUCCEEDED, 0, 1.2, None))
    assert "\n  hint: these nodes have no GPU, and the script puts tensors on CUDA: on a GPU host, run without --cpu" in \
        format_summary(outcome(cuda))
    # nodes with GPUs: the error is the script's own business
    gpu_plan = make_job(nodes=2, gpus_per_node=1, backend="nccl")
    gpu = results_for(gpu_plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, "RuntimeError: No CUDA GPUs are"
                                                                              " available")),
                      (NodePhase.SUCCEEDED, 0, 1.2, None))
    assert "hint:" not in format_summary(outcome(gpu))
    # a GPU beyond the node's own: picked by RANK where LOCAL_RANK was meant
    ordinal = results_for(gpu_plan, (NodePhase.SUCCEEDED, 0, 1.2, None),
                          (NodePhase.FAILED, 1, 1.0, RootCause(1, 0, 1, "RuntimeError: CUDA error: invalid device"
                                                                        " ordinal")))
    assert "\n  hint: node1 has 1 GPU (cuda:0), and rank 1 (local rank 0) asked for another: pick the GPU by" in \
        format_summary(outcome(ordinal))


def test_a_script_that_imports_what_the_nodes_lack_gets_a_hint_under_its_failure(make_job):
    plan = make_job(nodes=2)
    missing = "ModuleNotFoundError: No module named 'wandb'"
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, missing)),
                          (NodePhase.FAILED, 1, 1.1, RootCause(1, 0, 1, missing)))
    lines = format_summary(outcome(results)).splitlines()
    failed = lines.index("FAILED: node0 rank 0 failed (exit code 1): " + missing)
    assert lines[failed + 1] == "  then node1 rank 1: the same error"
    assert lines[failed + 2].startswith("  hint: the nodes have no module 'wandb': a package (at the version your script"
                                        " needs) goes into the node image")


def test_a_long_error_is_cut_at_a_sentence_in_its_line_and_a_peers_same_error_is_said_once(make_job):
    """torch's DDP errors run to 400 characters and more in their first line: the failure's line
    keeps its sentences up to 300 characters, and a peer with the same error says so; an error of
    another kind is said, cut the same way."""
    unused = ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one."
              " This error indicates that your module has parameters that were not used in producing loss. You can"
              " enable unused parameter detection by passing the keyword argument `find_unused_parameters=True` to"
              " `torch.nn.parallel.DistributedDataParallel`, and by")  # torch's first line, whole
    plan = make_job(nodes=3)
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, unused, timestamp=1.0)),
                          (NodePhase.FAILED, 1, 1.1, RootCause(1, 0, 1, unused, timestamp=1.1)),
                          (NodePhase.FAILED, 1, 1.2, RootCause(2, 0, 1, "ValueError: " + "x" * 250 + " " + "y" * 80,
                                                               timestamp=1.2)))
    lines = format_summary(outcome(results)).splitlines()
    failed = lines.index("FAILED: node0 rank 0 failed (exit code 1): RuntimeError: Expected to have finished reduction"
                         " in the prior iteration before starting a new one. This error indicates that your module has"
                         " parameters that were not used in producing loss. …")
    assert lines[failed + 1] == "  then node1 rank 1: the same error"
    assert lines[failed + 2] == "  then node2 rank 2: ValueError: " + "x" * 250 + " …"
    gloo = ("gloo::EnforceNotMet: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456]"
            " op.preamble.length <= op.nbytes. 32 vs 16. Received data size doesn't match expected size")
    assert brief(gloo) == gloo and brief(gloo + " " + "z" * 100) == gloo + " " + "z" * 100  # under 300: whole
    assert brief("ValueError: " + "t" * 400) == "ValueError: " + "t" * 288 + " …"  # one token: cut in it
    early = "RuntimeError: e.g. " + "word " * 80  # a sentence's end too early to keep alone
    assert brief(early) == early[:300].rsplit(" ", 1)[0] + " …"
    assert outcome_record(outcome(results))["failure"]["exception"] == unused  # whole in outcome.json


def test_ddp_parameters_without_a_gradient_are_named_in_a_hint_with_the_way_out(make_job):
    unused = "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one."
    indices = "[rank0]: Parameter indices which did not receive grad for rank 0: 4 5"
    names = "[rank1]: Parameters which did not receive grad for rank 1: aux.bias, aux.weight"
    plan = make_job(nodes=2)

    def hint(cause, last_lines):
        results = results_for(plan, (NodePhase.FAILED, 1, 1.0, cause), (NodePhase.FAILED, 1, 1.1, None))
        results[0].last_lines = list(last_lines)
        return next((ln for ln in format_summary(outcome(results)).splitlines() if ln.startswith("  hint:")), "")

    by_index = hint(RootCause(0, 0, 1, unused), ["[rank0]: making sure all ...", indices, "[rank0]:  In addition"])
    assert by_index == ("  hint: DDP got no gradient for the parameters at 4, 5 of model.parameters() (rank 0) in a"
                        " step: a model whose loss leaves parameters out on some steps needs"
                        " DistributedDataParallel(model, find_unused_parameters=True), which searches the graph every"
                        " step, or a loss that uses every output of the forward; --env TORCH_DISTRIBUTED_DEBUG=INFO"
                        " makes torch name them")
    by_name = hint(RootCause(1, 0, 1, unused), [names, indices.replace("rank0", "rank1")])
    assert by_name.startswith("  hint: DDP got no gradient for aux.bias, aux.weight (rank 1) in a step: ")
    assert by_name.endswith("or a loss that uses every output of the forward")
    in_traceback = RootCause(0, 0, 1, unused, traceback="Traceback ...\n" + names.split(": ", 1)[1] + "\n")
    assert hint(in_traceback, []).startswith("  hint: DDP got no gradient for aux.bias, aux.weight (rank 1) in a")
    assert hint(RootCause(0, 0, 1, unused), []).startswith("  hint: DDP got no gradient for some parameters in a")
    assert hint(RootCause(0, 0, 1, "RuntimeError: Expected to mark a variable ready only once."), [indices]) == ""


def test_a_state_dict_whose_keys_differ_by_ddps_module_prefix_gets_the_side_that_has_it(make_job):
    error = "RuntimeError: Error(s) in loading state_dict for Linear:"
    plan = make_job(nodes=2)

    def hint(last_lines, traceback=""):
        results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, error, traceback=traceback)),
                              (NodePhase.SUCCEEDED, 0, 1.1, None))
        results[0].last_lines = list(last_lines)
        return next((ln for ln in format_summary(outcome(results)).splitlines() if ln.startswith("  hint:")), "")

    saved_wrapped = ['[rank0]: \tMissing key(s) in state_dict: "weight", "bias". ',
                     '[rank0]: \tUnexpected key(s) in state_dict: "module.weight", "module.bias". ']
    assert hint(saved_wrapped) == (
        "  hint: the checkpoint's keys begin with module.: it was saved from the DDP wrapper (model.state_dict() of a"
        " DistributedDataParallel), and is loaded into the model without it; save model.module.state_dict(), so that"
        " a checkpoint loads with or without DDP")
    loaded_wrapped = ['\tMissing key(s) in state_dict: "module.weight", "module.bias". ',
                      '\tUnexpected key(s) in state_dict: "weight", "bias". ']
    assert hint([], traceback="\n".join(["Traceback ...", error, *loaded_wrapped])).startswith(
        "  hint: the model's keys begin with module.: the state is loaded into the DDP wrapper, and the checkpoint was"
        " saved without it; load into model.module")
    assert hint(['\tMissing key(s) in state_dict: "fc.weight". ', '\tUnexpected key(s) in state_dict: "head.weight". ']) == ""
    # both sides wrapped, other layers: no prefix to blame; nor where taking it off matches nothing
    assert hint(['\tMissing key(s) in state_dict: "module.fc.weight". ',
                 '\tUnexpected key(s) in state_dict: "module.head.weight". ']) == ""
    assert hint(['\tMissing key(s) in state_dict: "fc.weight". ',
                 '\tUnexpected key(s) in state_dict: "module.head.weight". ']) == ""


def test_a_rank_that_cannot_find_a_file_another_node_wrote_on_its_own_disk_is_told_why(make_job):
    plan = make_job(nodes=3)
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/cache/vocab.json'"
    results = results_for(plan, (NodePhase.FAILED, 1, 1.1, RootCause(0, 0, 1, "RuntimeError: Connection closed by"
                                                                             " peer")),
                          (NodePhase.FAILED, 1, 1.0, RootCause(1, 0, 1, missing)),
                          (NodePhase.FAILED, 1, 1.2, RootCause(2, 0, 1, missing)))
    result = outcome(results)
    assert "hint:" not in format_summary(result)  # nothing known of its writers
    result.written_locally = {"/tmp/cache/vocab.json": (0,), "/tmp/other": (1,)}
    lines = format_summary(result).splitlines()
    failed = lines.index("FAILED: node1 rank 1 failed (exit code 1): " + missing)
    assert lines[failed + 3] == (
        "  hint: rank 0 (node0) wrote /tmp/cache/vocab.json on node0's own disk, and node1 has its own /tmp: as on a"
        " cluster, each node's disk is its own, and only /workspace (the work directory) and /shared are on every"
        " node; write it there, or make it on every node (where LOCAL_RANK is 0) before its ranks read it")
    # a directory that ranks of two other nodes filled
    result.written_locally = {"/tmp/cache/a.bin": (0,), "/tmp/cache/b.bin": (0, 2), "/tmp/cachex": (0,)}
    dir_missing = RootCause(1, 0, 1, "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/cache/'")
    result.results[1].root_cause = dir_missing
    hint = next(line for line in format_summary(result).splitlines() if line.startswith("  hint:"))
    assert hint.startswith("  hint: ranks 0 (node0), 2 (node2) wrote 2 files under /tmp/cache on their nodes' own"
                           " disks, and node1 has its own /tmp:")
    # a rank of the failing node wrote it too: it was there, and not for want of a shared disk
    result.written_locally = {"/tmp/cache/vocab.json": (0, 1)}
    result.results[1].root_cause = RootCause(1, 0, 1, missing)
    assert "hint:" not in format_summary(result)
    # raised from the error that names it
    result.written_locally = {"/tmp/cache/vocab.json": (0,)}
    result.results[1].root_cause = RootCause(1, 0, 1, "OSError: no vocabulary", chain=("caused by: " + missing,))
    assert any(line.startswith("  hint: rank 0 (node0) wrote /tmp/cache/vocab.json on node0's own disk")
               for line in format_summary(result).splitlines())
    # one the script caught (except FileNotFoundError: ...) and raised another error while handling is not it
    result.results[1].root_cause = RootCause(1, 0, 1, "OSError: no vocabulary", chain=(
        "raised while handling: " + missing,))
    assert "hint:" not in format_summary(result)
    # a path relative to the work directory is on every node
    result.written_locally = {"/tmp/cache/vocab.json": (0,)}
    result.results[1].root_cause = RootCause(1, 0, 1, "FileNotFoundError: [Errno 2] No such file or directory:"
                                                      " 'cache/vocab.json'")
    assert "hint:" not in format_summary(result)


def test_a_rank_that_looked_for_a_shared_file_before_another_rank_wrote_it_is_told_of_the_missing_barrier(make_job):
    """Rank 0 saves a checkpoint that every rank then loads, with no barrier between: rank 1 did
    not find it. By the script's relative path, its absolute one under /workspace, one under
    /shared, and a directory; not where rank 1 wrote it too, nor where no rank did."""
    plan = make_job(nodes=2)

    def hint_for(exception: str, written: dict, chain: tuple[str, ...] = ()) -> list[str]:
        results = results_for(plan, (NodePhase.STOPPED, 137, 2.0, None),
                              (NodePhase.FAILED, 1, 1.0, RootCause(1, 0, 1, exception, chain=chain)))
        result = outcome(results, written_shared=written)
        return [line for line in format_summary(result).splitlines() if line.startswith("  hint:")]

    missing = "FileNotFoundError: [Errno 2] No such file or directory: '{}'"
    said = ("  hint: rank 0 (node0) wrote {}, on the storage every node shares, and rank 1 looked for it before it was"
            " there: a file that one rank writes for the others to read needs a dist.barrier() after the write and"
            " before the reads, called by every rank")
    written = {"checkpoints/last.pt": (0,), "logs/rank1.txt": (1,)}
    assert hint_for(missing.format("checkpoints/last.pt"), written) == [said.format("checkpoints/last.pt")]
    assert hint_for(missing.format("./checkpoints/last.pt"), written) == [said.format("./checkpoints/last.pt")]
    absolute = "/workspace/checkpoints/last.pt"
    assert hint_for(missing.format(absolute), written) == [said.format(absolute)]
    for untidy in ("/workspace/./checkpoints/last.pt", "checkpoints//last.pt", "logs/../checkpoints/last.pt"):
        assert hint_for(missing.format(untidy), written) == [said.format(untidy)]
    assert hint_for(missing.format("/"), {"/shared/data/vocab.json": (0,)}) == []
    assert hint_for(missing.format("/shared/data/vocab.json"), {"/shared/data/vocab.json": (0,)}) == [
        said.format("/shared/data/vocab.json")]
    directory = hint_for(missing.format("checkpoints/"), {"checkpoints/a.pt": (0,), "checkpoints/b.pt": (0,),
                                                          "checkpointsx": (0,)})
    assert directory == [said.format("2 files under checkpoints")]
    assert hint_for(missing.format("checkpoints/last.pt"), {"checkpoints/last.pt": (0, 1)}) == []
    assert hint_for(missing.format("checkpoints/other.pt"), written) == []
    assert hint_for(missing.format("logs/rank1.txt"), written) == []
    assert hint_for("ValueError: checkpoints/last.pt", written) == []
    # the script's own error wraps the one that names the file (raise ... from): the same hint
    wrapped = ("caused by: " + missing.format("checkpoints/last.pt"),)
    assert hint_for("RuntimeError: could not resume", written, wrapped) == [said.format("checkpoints/last.pt")]
    assert hint_for("RuntimeError: could not resume", written, ("caused by: KeyError: 'model'",)) == []
    assert hint_for("ValueError: bad config", written, ("raised while handling: " + wrapped[0][11:],)) == []


def test_a_hung_rank_that_waits_outside_any_collective_is_told_of_the_files_other_nodes_wrote_on_their_own_disks(
        make_job):
    from orchestrate.hangs.diagnosis import HangDiagnosis, RankActivity
    from orchestrate.outcome.judge import LOCAL_FILES_SHOWN, local_files_while_hung

    plan = make_job(nodes=3)
    results = results_for(plan, *[(NodePhase.STOPPED, 143, 40.0, None)] * 3)
    hang = HangDiagnosis(30.0, [], {}, None, cause="no progress for 30 s",
                         activities=[RankActivity(0, "collective", "waits in all_reduce"), RankActivity(1, "idle"),
                                     RankActivity(2, "collective", "waits in all_reduce")])
    result = outcome(results, hang=hang)
    assert "hint:" not in format_summary(result)  # no file known
    # a cache every node wrote is no clue; one that only node0 wrote is
    result.written_locally = {"/tmp/torchinductor_root/x.py": (0, 1, 2), "/tmp/data_ready": (0,)}
    lines = format_summary(result).splitlines()
    assert lines[lines.index("HUNG: " + hang.headline) + 1:] == [
        "  hint: rank 1 (node1) waits outside any collective, and ranks of other nodes wrote files on their own disks"
        " that node1 cannot see: /tmp/data_ready (rank 0 on node0); if rank 1 waits for one, write it under /workspace or"
        " /shared, which every node has, or make it on every node (where LOCAL_RANK is 0)"]
    # the latest few, and how many more
    result.written_locally = {f"/tmp/f{i}": (0, 2) for i in range(LOCAL_FILES_SHOWN + 2)}
    hint = format_summary(result).splitlines()[-1]
    assert f"/tmp/f{LOCAL_FILES_SHOWN + 1} (ranks 0, 2 on node0, node2); and 2 more; if rank 1" in hint
    assert "/tmp/f0 " not in hint and "/tmp/f2 " in hint
    # every rank in a collective (none idle), or a job that still worked: nothing
    result.hang = HangDiagnosis(30.0, [], {}, None, cause="no progress for 30 s",
                                activities=[RankActivity(r, "collective") for r in range(3)])
    assert "hint:" not in format_summary(result)
    result.hang = HangDiagnosis(30.0, [], {}, None, cause="no progress for 30 s", hung=False,
                                activities=[RankActivity(1, "idle")])
    assert not any("cannot see" in line for line in format_summary(result).splitlines())
    assert local_files_while_hung(result.hang, results, {"/tmp/data_ready": (0,)}) == ""  # what the summary asks
    assert local_files_while_hung(None, results, {"/tmp/data_ready": (0,)}) == ""
    # a rank that spins polling (no sleep: "computing") while the others wait in a collective: a job that looked at
    # work to the watchdog, interrupted at last; the same files explain it
    spinning = HangDiagnosis(30.0, [], {}, None, cause="no output for 30 s", hung=False,
                             activities=[RankActivity(0, "collective", "waits in barrier"),
                                         RankActivity(1, "busy", "computing (97% of a core)"),
                                         RankActivity(2, "collective", "waits in barrier")])
    stopped = outcome(results, hang=spinning, interrupted=True, written_locally={"/tmp/data_ready": (0,)})
    assert format_summary(stopped).splitlines()[-1] == (
        "  hint: rank 1 (node1) waits outside any collective, and ranks of other nodes wrote files on their own disks"
        " that node1 cannot see: /tmp/data_ready (rank 0 on node0); if rank 1 waits for one, write it under /workspace or"
        " /shared, which every node has, or make it on every node (where LOCAL_RANK is 0)")
    # ... not a rank computing on its GPU, nor one computing while nobody waits for it
    spinning.activities[1] = RankActivity(1, "busy", "computing on the GPU, in all_reduce at train.py:9")
    assert not any("cannot see" in line for line in format_summary(stopped).splitlines())
    spinning.activities = [RankActivity(r, "busy", "computing (97% of a core)") for r in range(3)]
    assert not any("cannot see" in line for line in format_summary(stopped).splitlines())


def test_a_rank_whose_input_met_the_end_of_its_stdin_is_told_a_worker_has_no_terminal(make_job):
    plan = make_job(nodes=2)
    eof = "EOFError: EOF when reading a line"
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, eof)), (NodePhase.STOPPED, -15, 1.1, None))
    lines = format_summary(outcome(results)).splitlines()
    failed = lines.index("FAILED: node0 rank 0 failed (exit code 1): " + eof)
    assert lines[failed + 1].startswith("  hint: a torchrun worker has no terminal: its standard input is empty")


def test_a_compiled_model_without_a_compiler_and_a_forward_pass_made_alone_get_their_hints(make_job):
    plan = make_job(nodes=2)
    no_compiler = "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found"
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, no_compiler)),
                          (NodePhase.STOPPED, -15, 1.1, None))
    lines = format_summary(outcome(results)).splitlines()
    failed = lines.index("FAILED: node0 rank 0 failed (exit code 1): " + no_compiler)
    assert lines[failed + 1].startswith("  hint: torch.compile builds a compiled model's kernels with a C++ compiler")
    # rank 0 evaluated its DDP model alone, and rank 1 finished meanwhile
    lost = RootCause(0, 0, 1, "RuntimeError: Connection closed by peer [10.0.0.3]:1",
                     traceback="  File \"distributed.py\", line 2190, in _sync_buffers\n")
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, lost), (NodePhase.SUCCEEDED, 0, 0.9, None))
    results[1].finished_ranks = {1: 15}
    lines = format_summary(outcome(results)).splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("FAILED: node0 rank 0"))
    assert lines[failed].endswith("as rank 1 (node1, after step 15) had finished its script while rank 0 still ran,"
                                  " and rank 0's collectives lost it as a peer (do all ranks run the same number of"
                                  " steps?)")
    assert lines[failed + 1].startswith("  hint: a DDP model's forward pass broadcasts the model's buffers from rank 0")


def test_a_rank_gloo_aborted_on_mismatched_collectives_gets_a_hint_and_the_call_sites(make_job):
    plan = make_job(nodes=2)
    gloo = RootCause(0, 0, -6, "gloo::EnforceNotMet: [enforce fail at pair.cc:456] 12 vs 4. Received data size doesn't"
                               " match expected size. Is there a distributed collective mismatch in your code?")
    lost = RootCause(1, 0, 1, "RuntimeError: [pair.cc:538] Read error: Connection reset by peer")
    aborted = outcome(results_for(plan, (NodePhase.FAILED, 1, 1.0, gloo), (NodePhase.FAILED, 1, 1.2, lost)))
    aborted.divergence = "rank 0 aborted in all_reduce at train.py:23; rank 1 was in all_reduce(float32[8]) #5 at train.py:20"
    text = format_summary(aborted)
    assert ("\n  where, by the ranks' collective records: rank 0 aborted in all_reduce at train.py:23; rank 1 was in"
            " all_reduce(float32[8]) #5 at train.py:20\n") in text
    assert ("\n  hint: gloo received more data than expected: the ranks called different collectives, or one with"
            " different sizes, or a receive is smaller than its send; --debug-collectives makes torch stop at the first"
            " mismatched collective, naming both (it does not compare sends and receives)\n") in text
    # rank 1 in its DDP model's backward pass (one batch more), rank 0 in a metric's all_reduce after its
    # loop: the records say the ranks took different numbers of steps, and the summary says so too
    aborted.divergence = ("rank 0 aborted in all_reduce at train.py:23; rank 1 was in all_reduce(gradients of"
                          " DDP(Linear)) #13 at train.py:18")
    assert (" (it does not compare sends and receives); here rank 1 was in a DDP model's training step while the"
            " others made another collective: every rank must take as many training steps") in format_summary(aborted)
    # the peer's lost connection alone is no mismatch
    other = outcome(results_for(plan, (NodePhase.FAILED, 1, 1.0, lost), (NodePhase.SUCCEEDED, 0, 1.2, None)))
    assert "hint:" not in format_summary(other)


def test_ranks_gloo_let_through_a_collective_of_other_sizes_are_told_so_not_asked_about_steps(make_job):
    """gloo matched rank 1's 12 elements with rank 0's 10: rank 0 went on and finished, rank 1 lost
    it. The records say where the sizes differ, and the summary says gloo does not check them."""
    plan = make_job(nodes=2)
    lost = RootCause(1, 0, 1, "RuntimeError: [pair.cc:547] Connection closed by peer [10.0.0.2]:37000")
    results = results_for(plan, (NodePhase.SUCCEEDED, 0, 0.9, None), (NodePhase.FAILED, 1, 1.0, lost))
    results[0].finished_ranks = {0: None}
    uneven = outcome(results)
    assert format_summary(uneven).count("(do all ranks run the same number of steps?)") == 1  # no records: asked
    diverged = outcome(results)
    diverged.divergence = ("collective #1: rank 1 entered all_reduce(float32[12]) at s.py:6; rank 0 entered"
                           " all_reduce(float32[10]) at s.py:6")
    lines = format_summary(diverged).splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("FAILED: node1 rank 1"))
    assert lines[failed].endswith("as rank 0 (node0) had finished its script while rank 1 still ran, and rank 1's"
                                  " collectives lost it as a peer")
    assert lines[failed + 1] == f"  where, by the ranks' collective records: {diverged.divergence}"
    assert lines[failed + 2].startswith("  hint: the ranks made this collective with different tensors, or different"
                                        " collectives: gloo checks neither")


def test_the_records_number_of_a_mismatched_collective_is_said_beside_torchs_as_the_same_call(make_job):
    """torch's check names the collective by its sequence number (from 0), the records by theirs
    (from 1): the summary says they are one call, not two collectives, and says how they count
    where the two are further apart."""
    plan = make_job(nodes=2)
    mismatch = ("collectives differ (--debug-collectives): rank 1 ran ALLGATHER of Float[3] (torch's sequence number"
                " 3); rank 0 ran ALLGATHER of Float[4] (torch's sequence number 3) (tensor shapes: 3 vs 4)")
    results = results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, mismatch)),
                          (NodePhase.FAILED, 1, 0.9, RootCause(1, 0, 1, mismatch)))
    diverged = outcome(results)
    records = ("collective #4: rank 0 entered all_gather(2x float32[4], float32[4]) at h7.py:8; rank 1 entered"
               " all_gather(2x float32[3], float32[3]) at h7.py:8")
    diverged.divergence = records
    assert (f"  where, by the ranks' collective records: {records} (the same call as torch's sequence number 3:"
            " torch counts a group's collectives from 0, the records from 1)\n") in format_summary(diverged)
    diverged.divergence = records.replace("#4", "#2")  # torch counted operations the records did not see
    assert ("(#2 counts from 1 the calls the records saw in the group; torch's sequence number counts from 0 the"
            " operations torch ran in it, which can be more)") in format_summary(diverged)
    unnumbered = outcome(results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, "RuntimeError: boom")),
                                     (NodePhase.SUCCEEDED, 0, 0.9, None)))
    unnumbered.divergence = records
    assert f"collective records: {records}\n" in format_summary(unnumbered)  # no torch number: nothing to relate


def test_an_error_the_hooks_own_code_raised_keeps_its_frames():
    callstack = ('Traceback (most recent call last):\n'
                 '  File "/workspace/train.py", line 11, in main\n'
                 '    torch.save(state, "ckpt.pt")\n'
                 '  File "/opt/ddp-compose/orchestrate/node/storage_faults.py", line 80, in save\n'
                 '    fault = self.faults[key]\n'
                 "KeyError: 'disk-full'\n")  # (a full disk's own ENOSPC is the system's: test_output.py)
    cause = RootCause(1, 0, 1)
    cause.add_error_file(json.dumps({"message": {"message": "KeyError", "extraInfo": {"py_callstack": callstack}}}))
    assert cause.traceback == callstack
    # a user's own directory named like the hook's is the user's
    mine = callstack.replace("/opt/ddp-compose/orchestrate/node/storage_faults.py", "/workspace/orchestrate/node/x.py")
    cause.add_error_file(json.dumps({"message": {"message": "KeyError", "extraInfo": {"py_callstack": mine}}}))
    assert cause.traceback == mine



def test_an_error_a_wrapper_of_a_builtin_passed_on_is_the_scripts_without_the_wrappers_frames():
    # open raises from C inside the wrappers: their call of it is the innermost frame
    wrappers = ('  File "/opt/ddp-compose/orchestrate/node/shared_writes.py", line 55, in open_and_report\n'
                '    opened = original(file, mode, *args, **kwargs)\n'
                '             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n'
                '  File "/opt/ddp-compose/orchestrate/node/storage_faults.py", line 207, in faulty_open\n'
                '    opened = original(file, mode, *args, **kwargs)\n'
                '             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n')
    script = ('Traceback (most recent call last):\n'
              '  File "/workspace/train.py", line 13, in <module>\n'
              '    with open(CACHE) as f:\n'
              '         ^^^^^^^^^^^\n')
    error = "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/cache/vocab.json'\n"
    cause = RootCause(1, 0, 1)
    cause.add_error_file(json.dumps({"message": {"message": error, "extraInfo": {"py_callstack": script + wrappers
                                                                                                   + error}}}))
    assert cause.traceback == script + error


def test_a_rank_left_alone_in_its_training_steps_backward_pass_gets_the_uneven_hint_not_the_evaluations(make_job):
    """A rank that lost its finished peer in a training step's backward pass took more steps than
    it; one that lost it in a DDP forward pass its record cannot place gets the evaluation's hint."""
    from orchestrate.hangs.collectives import UNEVEN_HINT
    from orchestrate.hangs.diagnosis import DDP_FORWARD_HINT

    plan = make_job(nodes=2)
    forward = ["  File \"/opt/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py\", line 2190,"
               " in _sync_buffers"]
    for collective, kind, hint in (("all_reduce(gradients of DDP(Net))", "backward pass", UNEVEN_HINT),
                                   ("broadcast(buffers of DDP(Net))", "", DDP_FORWARD_HINT)):
        cause = RootCause(1, 0, 1, "RuntimeError: Connection closed by peer", collective=collective,
                          training_pass=kind)
        results = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.FAILED, 1, 2, cause))
        results[0].finished_ranks = {0: 30}
        results[1].last_lines = forward
        hints = [line for line in format_summary(outcome(results)).splitlines() if line.startswith("  hint:")]
        assert hints == [f"  hint: {hint}"]


def test_a_node_whose_ranks_had_finished_and_whose_torchrun_outlived_its_grace_is_said_to_wait_at_its_exit_barrier(
        make_job):
    """node1's rank finished its script, before or after node0's failed: node1's torchrun waits
    for node0's at its exit barrier, where SIGTERM does not reach it, and SIGKILL ends it. That is
    said, and not where a worker still ran or a rank had not finished."""
    from orchestrate.outcome.summary import EXIT_BARRIER_NOTE

    plan = make_job(nodes=2)
    killed = ("  node1 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran:"
              " torchrun ... train.py (sleeping)")
    cause = RootCause(0, 0, 1, "RuntimeError: Connection closed by peer")

    def summary(returned: tuple[int, ...], still: list[str]) -> list[str]:
        results = results_for(plan, (NodePhase.FAILED, 1, 5.0, cause), (NodePhase.STOPPED, 137, 9.0, None))
        results[1].grace_ran_out, results[1].still_running, results[1].returned_ranks = True, still, returned
        return format_summary(outcome(results)).splitlines()

    assert f"{killed}{EXIT_BARRIER_NOTE}" in summary((1,), ["torchrun ... train.py (sleeping)"])
    assert killed in summary((), ["torchrun ... train.py (sleeping)"])
    with_worker = summary((1,), ["torchrun ... train.py (sleeping)", "python train.py (sleeping)"])
    assert not any(EXIT_BARRIER_NOTE in line for line in with_worker)
    assert EXIT_BARRIER_NOTE.startswith("; its ranks had finished their scripts, and its torchrun waited")


def test_a_lost_peer_after_restarts_shows_the_earlier_error_and_a_torn_saves_hint(make_job):
    """Seen with --rdzv c10d and a torn write: every restart failed in torch.load of the cut file,
    and the last attempt failed connecting to a peer that was restarting."""
    plan = make_job(nodes=2)
    refused = ("RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: SO_ERROR:"
               " Connection refused, remote=[172.27.0.2]:44434")
    unreadable = ('[rank1]:   File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1491,'
                  ' in load',
                  "[rank1]: OSError: [Errno 22] Invalid argument")
    # (where the lost peer's own traceback was in the script is no line of its own: the earlier error explains it)
    results = results_for(plan, (NodePhase.STOPPED, 143, 1.1, None),
                          (NodePhase.FAILED, 1, 1.0, RootCause(1, 0, 1, refused, users_frame="t.py:3 in main: x()",
                                                               chain=("caused by: OSError: peer reset",))))
    results[1].earlier = EarlierFailure(3, 0, "OSError: [Errno 22] Invalid argument", unreadable,
                                        users_frame="resume.py:13 in main: state = torch.load(CKPT)")
    torn = FaultRecord("torn-write:node0@step=5", "node0", elapsed_s=8.5, step=5, struck_file="ckpt/model.pt",
                       detail="rank 0's write of ckpt/model.pt was cut at byte 16927 of 18725")
    lines = format_summary(outcome(results, faults=[torn])).splitlines()
    failed = lines.index(f"FAILED: node1 rank 1 failed (exit code 1): {refused}")
    assert lines[failed + 1:failed + 4] == [
        "  attempt 3 of node1's workers failed by an error of its own: local rank 0: OSError: [Errno 22]"
        " Invalid argument",
        "  in your code: resume.py:13 in main: state = torch.load(CKPT)",
        "  hint: torn-write:node0@step=5 cut ckpt/model.pt short, and a rank then failed reading a file: a save"
        " straight onto the file a job resumes from leaves no whole checkpoint when a crash cuts it; save to a"
        " temporary file beside it, then os.replace() it onto the name (a rename is atomic), so that the last whole"
        " one survives"]
    assert lines[failed + 4:] == ["last lines of node1's attempt 3, local rank 0:", *(f"  | {ln}" for ln in unreadable)]
    # no torn write: the earlier error alone, and no hint
    plain = format_summary(outcome(results))
    assert "  attempt 3 of node1's workers" in plain and "hint:" not in plain


LOAD_FRAME = '  File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1491, in load'


def test_outcome_json_keeps_the_hint_the_earlier_error_and_where_ranks_were_that_the_summary_says(make_job):
    """What the summary says under the failure (its hint, an earlier attempt's own error, where a
    rank a monitored barrier named was when ended) is in outcome.json as well, as the summary says it."""
    plan = make_job(nodes=2)
    refused = "RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting"
    results = results_for(plan, (NodePhase.STOPPED, 143, 1.1, None),
                          (NodePhase.FAILED, 1, 1.0, RootCause(1, 0, 1, refused)))
    results[1].earlier = EarlierFailure(3, 0, "OSError: [Errno 22] Invalid argument", (LOAD_FRAME, "OSError: [Errno 22]"),
                                        users_frame="resume.py:13 in main: state = torch.load(CKPT)")
    torn = FaultRecord("torn-write:node0@step=5", "node0", elapsed_s=8.5, step=5, struck_file="ckpt/model.pt")
    ended = outcome(results, faults=[torn], stopped_where={0: "save at t.py:3", 1: "load at t.py:7"})
    record = json.loads(json.dumps(outcome_record(ended)))
    hint_line = next(line for line in format_summary(ended).splitlines() if line.startswith("  hint: "))
    assert record["hint"] == hint_line.strip().removeprefix("hint: ")  # the key names it: no "hint: " in the text
    assert record["hint"].startswith("torn-write:node0@step=5 cut ckpt/model.pt short")
    assert record["stopped_where"] == {"0": "save at t.py:3", "1": "load at t.py:7"}
    assert record["failure"]["earlier"] == {
        "attempt": 3, "local_rank": 0, "exception": "OSError: [Errno 22] Invalid argument",
        "describe": "attempt 3 of node1's workers failed by an error of its own: local rank 0: OSError: [Errno 22]"
                    " Invalid argument", "last_lines": [LOAD_FRAME, "OSError: [Errno 22]"],
        "users_frame": "resume.py:13 in main: state = torch.load(CKPT)"}
    assert record["failure"]["not_at_barrier"] == []
    # a monitored barrier that named rank 1: where it was, as the summary's line says it
    named = "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 20000 ms"
    barrier = outcome(results_for(plan, (NodePhase.FAILED, 1, 1.0, RootCause(0, 0, 1, named)),
                                  (NodePhase.STOPPED, 143, 1.1, None)), stopped_where={1: "load at t.py:7"})
    record = outcome_record(barrier)
    assert record["failure"]["not_at_barrier"] == [
        "rank 1 did not pass the barrier in time: it was in load at t.py:7 when torchrun ended it"]
    assert f"  {record['failure']['not_at_barrier'][0]}" in format_summary(barrier).splitlines()
    assert record["hint"] is None and record["failure"]["earlier"] is None
    # a success has no hint, whatever its records hold
    ok = outcome(results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.SUCCEEDED, 0, 1, None)),
                 stopped_where={1: "load at t.py:7"})
    assert outcome_record(ok)["hint"] is None and outcome_record(ok)["failure"] is None


def test_the_same_error_in_several_attempts_follows_the_failure_in_the_summary_and_outcome_json(make_job):
    plan = make_job(nodes=2)
    bug = "KeyError: 'momentum'"
    results = results_for(plan, (NodePhase.STOPPED, 143, 1.1, None), (NodePhase.FAILED, 1, 1.0, RootCause(1, 0, 1, bug)))
    results[1].attempts = [AttemptError(1, 0, bug, True), AttemptError(2, 0, bug, True)]
    ended = outcome(results)
    lines = format_summary(ended).splitlines()
    failed = lines.index(f"FAILED: node1 rank 1 failed (exit code 1): {bug}")
    assert lines[failed + 1] == ("  the same error ended attempts 1 and 2 of node1's workers: KeyError: 'momentum'; a"
                                 " restart runs the same script on the same files again, and does not get past an"
                                 " error of its own")
    assert outcome_record(ended)["failure"]["repeated"] == lines[failed + 1].strip()
    results[1].attempts = results[1].attempts[:1]
    assert outcome_record(outcome(results))["failure"]["repeated"] is None


def test_outcome_json_keeps_only_what_the_summary_says_under_a_failure(make_job):
    """A run the watchdog ended as hung is said as HUNG, with nothing under a failure: an
    earlier attempt's error or a repeated one the nodes' results hold is not in outcome.json."""
    from orchestrate.hangs.diagnosis import diagnose
    from tests.unit.test_hangs import coll, probe, snap

    plan = make_job(nodes=2)
    bug = "KeyError: 'momentum'"
    results = results_for(plan, (NodePhase.STOPPED, 143, 1.1, None), (NodePhase.FAILED, 1, 1.0, RootCause(1, 0, 1, bug)))
    results[1].attempts = [AttemptError(1, 0, bug, True), AttemptError(2, 0, bug, True)]
    results[1].earlier = EarlierFailure(1, 0, bug, (bug,))
    waiting = (coll(1), coll(2, state="entered"))
    hang = diagnose(probe(0, r0=snap(0, waiting), r1=snap(1, waiting)), None, {0, 1}, {}, 60)
    hang.cause = "no progress for 60 s (--hang-timeout 60)"
    ended = outcome(results, hang=hang)
    summary = format_summary(ended)
    assert "HUNG: no progress for 60 s" in summary and "the same error ended" not in summary
    record = outcome_record(ended)["failure"]
    assert (record["earlier"], record["repeated"], record["not_at_barrier"]) == (None, None, [])
    assert outcome_record(outcome(results))["failure"]["earlier"]["attempt"] == 1  # said where the summary says it


def test_a_clusters_interface_name_gets_the_hint_of_the_nodes_own(make_job):
    plan = make_job(nodes=2)
    gloo = RootCause(0, 0, 1, "RuntimeError: [enforce fail at device.cc:84] ifa != nullptr. Unable to find address for:"
                              " ib0")
    lines = format_summary(outcome(results_for(plan, (NodePhase.FAILED, 1, 1.0, gloo),
                                               (NodePhase.STOPPED, 143, 1.1, None)))).splitlines()
    failed = lines.index(f"FAILED: node0 rank 0 failed (exit code 1): {gloo.exception}")
    assert lines[failed + 1].startswith("  hint: the nodes have no network interface by the name GLOO_SOCKET_IFNAME or"
                                        " NCCL_SOCKET_IFNAME gives (ib0): each node has eth0")


def test_a_job_that_succeeded_after_torchrun_restarted_its_workers_says_so_with_what_ended_each_attempt(make_job,
                                                                                                          tmp_path):
    from orchestrate.outcome.root_cause import restarts_in_place
    for torchrun, attempts in (("r_a", 3), ("r_b", 1)):  # the launcher's second torchrun restarted nothing
        for number in range(attempts):
            (tmp_path / "node1" / "torchrun" / torchrun / f"attempt_{number}" / "0").mkdir(parents=True)
    assert restarts_in_place(tmp_path, "node1") == 2 and restarts_in_place(tmp_path, "node0") == 0

    plan = make_job(nodes=2, rdzv="c10d")
    results = results_for(plan, (NodePhase.SUCCEEDED, 0, 1, None), (NodePhase.SUCCEEDED, 0, 1, None))
    assert "restarted in place" not in format_summary(outcome(results))  # none: a plain success
    results[0].restarts_in_place = results[1].restarts_in_place = 1
    results[1].attempts = [AttemptError(1, 1, "RuntimeError: Connection closed by peer", own=False),
                           AttemptError(1, 0, "RuntimeError: transient: lost the dataset server", own=True)]
    lines = format_summary(outcome(results)).splitlines()
    at = lines.index("restarted in place: torchrun restarted the workers after a failure, once on every node")
    assert lines[at + 1:at + 3] == ["  attempt 1 of node1's workers ended with local rank 0's error:"
                                    " RuntimeError: transient: lost the dataset server", "logs: /tmp/runs/run-1"]
    assert lines[-1] == "SUCCEEDED: all 2 nodes exited 0"
    assert outcome_record(outcome(results))["nodes"][1]["restarts_in_place"] == 1
    assert outcome(results).restarts_in_place == {"node0": 1, "node1": 1}

    # a killed worker leaves no error of its own: the fault that killed it is named
    results[0].restarts_in_place, results[1].restarts_in_place, results[1].attempts = 0, 2, []
    killed = FaultRecord("kill-rank:1@step=5", "node1", elapsed_s=4.0, step=5)
    slowed = FaultRecord("slow:node1@t=2", "node1", elapsed_s=2.0)  # strikes no worker: not the cause
    lines = format_summary(outcome(results, faults=[slowed, killed])).splitlines()
    at = lines.index("restarted in place: torchrun restarted the workers after a failure, 2 times on node1")
    assert lines[at + 1:at + 5] == ["  after injected fault kill-rank:1@step=5 on node1",
                                    "fault injected: slow:node1@t=2 (2.0 s into the job)",
                                    "fault injected: kill-rank:1@step=5 (4.0 s into the job, at step 5, on node1)",
                                    "logs: /tmp/runs/run-1"]
    # a hung worker on node1 times out its peer on node0, whose error is the one in the logs: the fault comes first
    results[0].restarts_in_place, results[1].restarts_in_place = 1, 0
    results[0].attempts = [AttemptError(1, 0, "RuntimeError: Timed out waiting 15000ms for recv operation", own=True)]
    hung = FaultRecord("hang-rank:1@step=8", "node1", elapsed_s=5.0, step=8)
    lines = format_summary(outcome(results, faults=[hung])).splitlines()
    at = lines.index("restarted in place: torchrun restarted the workers after a failure, once on node0")
    assert lines[at + 1:at + 3] == ["  after injected fault hang-rank:1@step=8 on node1",
                                    "  attempt 1 of node0's workers ended with local rank 0's error: RuntimeError:"
                                    " Timed out waiting 15000ms for recv operation"]


def test_a_succeeded_nodes_restarted_attempts_are_those_before_its_last(tmp_path):
    """A traceback the script caught and printed in the attempt that ended well ended nothing."""
    from orchestrate.outcome.root_cause import restarted_attempt_errors
    import os
    for number, text in enumerate(("Traceback (most recent call last):\n  File \"t.py\", line 1\nKeyError: 'a'\n",
                                   "Traceback (most recent call last):\n  File \"t.py\", line 2\nValueError: caught\n")):
        log = tmp_path / "node0" / "torchrun" / "r_a" / f"attempt_{number}" / "0" / "stderr.log"
        log.parent.mkdir(parents=True)
        log.write_text(text)
        os.utime(log.parents[1], (1000 + number, 1000 + number))  # the attempts' order
    assert [(e.attempt, e.exception) for e in restarted_attempt_errors(tmp_path, "node0")] == [(1, "KeyError: 'a'")]


def test_a_job_succeeds_without_its_lost_nodes_but_not_without_every_node(make_job):
    plan = make_job(nodes=2, rdzv="c10d", min_nodes=1)
    went_on = results_for(plan, (NodePhase.SUCCEEDED, 0, 9.0, None), (NodePhase.LOST, 137, 3.0, None))
    went_on[1].lost = "lose:node1@step=3"
    assert outcome(went_on).succeeded and outcome(went_on).lost == {"node1": "lose:node1@step=3"}
    assert outcome_record(outcome(went_on))["nodes"][1]["lost"] == "lose:node1@step=3"
    went_on_without = Recovery("node1", "injected fault lose:node1@step=3", 10.0, step_before=3, resumed_from=3,
                               resumed_at=12.5, lost=True)
    assert went_on_without.describe() == ("the job went on without node1 after injected fault lose:node1@step=3:"
                                          " recovery (failure detected to first step after resume) 2.5 s; steps"
                                          " lost 0 (last step 3, resumed from 3)")
    not_seen = Recovery("node1", "injected fault lose:node1@step=3", 10.0, step_before=3, lost=True)
    assert not_seen.describe() == ("node1 was lost for good after injected fault lose:node1@step=3: last step before"
                                   " it 3")
    none_left = results_for(plan, (NodePhase.LOST, 137, 3.0, None), (NodePhase.LOST, 137, 3.0, None))
    assert not outcome(none_left).job_succeeded
    assert "SUCCEEDED" not in format_summary(outcome(none_left))
    # two lost, the latest blamed for the lost peer of the one node left: the count is of every node lost
    plan3 = make_job(nodes=3, rdzv="c10d", min_nodes=1)
    two_lost = results_for(plan3, (NodePhase.FAILED, 1, 9.0, RootCause(0, 0, 1, "RuntimeError: Connection closed by"
                                                                        " peer")),
                           (NodePhase.LOST, 137, 2.0, None), (NodePhase.LOST, 137, 5.0, None))
    two_lost[1].lost, two_lost[2].lost = "lose:node1@t=2", "lose:node2@t=5"
    text = format_summary(outcome(two_lost))
    assert "FAILED: node2 was lost for good (injected fault lose:node2@t=5)" in text
    assert "  after node1 was lost for good (lose:node1@t=2): the job went on with 1 of 3 nodes" in text.splitlines()
    # a Ctrl-C after the loss stopped the nodes left, not the lost one
    stopped = results_for(plan, (NodePhase.STOPPED, 130, 9.0, None), (NodePhase.LOST, 137, 3.0, None))
    stopped[1].lost = "lose:node1@step=3"
    assert ("INTERRUPTED by SIGINT: every node left was stopped; node1 had been lost for good (lose:node1@step=3)"
            in format_summary(outcome(stopped, interrupted=True)).splitlines())


def test_a_hang_in_init_process_group_after_a_loss_says_the_loss_came_before_the_ranks_met(make_job):
    from orchestrate.hangs.diagnosis import HangDiagnosis
    from orchestrate.hangs.stacks import StackGroup

    plan = make_job(nodes=2, rdzv="c10d", min_nodes=1)
    results = results_for(plan, (NodePhase.STOPPED, 143, 12.0, None), (NodePhase.LOST, 137, 5.0, None))
    results[1].lost = "lose:node1@t=5"
    joining = StackGroup((0,), (), "init_process_group at train.py:9 in <module>")
    hang = HangDiagnosis(7.0, [joining], {}, None, cause="no progress for 7 s")
    said = ("  the ranks left wait for the ranks of node1 (lose:node1@t=5), lost for good before they met: a loss then"
            " fails no worker, so torchrun restarts none, and they wait until the process group's timeout (lose a node"
            " once the job trains, at a step: @step=N)")
    assert said in format_summary(outcome(results, hang=hang)).splitlines()
    training = StackGroup((0,), (), "all_reduce at train.py:20 in <module>")
    assert said not in format_summary(outcome(results, hang=HangDiagnosis(7.0, [training], {}, None,
                                                                            cause="no progress for 7 s")))
    results[1].state, results[1].lost = NodePhase.STOPPED, ""
    assert "lost for good before they met" not in format_summary(outcome(results, hang=hang))


def test_the_summary_names_every_node_lost_for_good_in_each_ending_line_for_line(make_job):
    # one lost node and several: the SUCCEEDED line, an interrupt's and a failure's, read whole
    from orchestrate.hangs.diagnosis import HangDiagnosis
    from orchestrate.hangs.stacks import StackGroup

    plan2, plan3 = make_job(nodes=2, rdzv="c10d", min_nodes=1), make_job(nodes=3, rdzv="c10d", min_nodes=1)
    one = results_for(plan2, (NodePhase.SUCCEEDED, 0, 9.0, None), (NodePhase.LOST, 137, 3.0, None))
    one[1].lost = "lose:node1@step=3"
    assert format_summary(outcome(one)).splitlines()[-1] == (
        "SUCCEEDED: 1 of 2 nodes exited 0; node1 was lost for good (lose:node1@step=3), and the job went on without it")
    two = results_for(plan3, (NodePhase.SUCCEEDED, 0, 9.0, None), (NodePhase.LOST, 137, 3.0, None),
                      (NodePhase.LOST, 137, 5.0, None))
    two[1].lost, two[2].lost = "lose:node1@step=3", "lose:node2@t=5"
    assert format_summary(outcome(two)).splitlines()[-1] == (
        "SUCCEEDED: 1 of 3 nodes exited 0; node1 and node2 were lost for good (lose:node1@step=3, lose:node2@t=5),"
        " and the job went on without them")
    two[0].state, two[0].exit_code = NodePhase.STOPPED, 130
    assert ("INTERRUPTED by SIGINT: every node left was stopped; node1 and node2 had been lost for good"
            " (lose:node1@step=3, lose:node2@t=5)") in format_summary(outcome(two, interrupted=True)).splitlines()
    # the ranks left wait in init_process_group for two lost nodes' ranks; a hang no rank answered says nothing of it
    two[0].state, two[0].exit_code = NodePhase.STOPPED, 143
    joining = HangDiagnosis(7.0, [StackGroup((0,), (), "init_process_group at train.py:9 in <module>")], {}, None,
                            cause="no progress for 7 s")
    assert ("  the ranks left wait for the ranks of node1 (lose:node1@step=3) and node2 (lose:node2@t=5), lost for"
            " good before they met: a loss then fails no worker, so torchrun restarts none, and they wait until the"
            " process group's timeout (lose a node once the job trains, at a step: @step=N)"
            ) in format_summary(outcome(two, hang=joining)).splitlines()
    unanswered = HangDiagnosis(7.0, [], {}, None, cause="no progress for 7 s")
    assert "lost for good before they met" not in format_summary(outcome(two, hang=unanswered))
    # a failure after two other nodes were lost: both named, and how many nodes were left
    plan4 = make_job(nodes=4, rdzv="c10d", min_nodes=1)
    three = results_for(plan4, (NodePhase.FAILED, 1, 9.0, RootCause(0, 0, 1, "RuntimeError: Connection closed by"
                                                                     " peer")),
                        (NodePhase.LOST, 137, 2.0, None), (NodePhase.LOST, 137, 3.0, None),
                        (NodePhase.LOST, 137, 5.0, None))
    three[1].lost, three[2].lost, three[3].lost = "lose:node1@t=2", "lose:node2@t=3", "lose:node3@t=5"
    lines = format_summary(outcome(three)).splitlines()
    assert ("FAILED: node3 was lost for good (injected fault lose:node3@t=5), and the nodes left could not go on"
            " without it: node0 failed") in lines
    assert ("  after node1 and node2 were lost for good (lose:node1@t=2, lose:node2@t=3): the job went on with 1 of 4"
            " nodes") in lines


def test_the_summary_reads_whole_where_the_hang_watchdog_looked(make_job):
    # every line of the watchdog's look follows the ending's: hung, interrupted while quiet, and a
    # collective's timeout while a rank still worked
    from orchestrate.hangs.diagnosis import HangDiagnosis, RankActivity
    from orchestrate.hangs.stacks import StackGroup

    plan = make_job(nodes=2)
    groups = [StackGroup((0,), (), "all_reduce at train.py:20 in <module>"),
              StackGroup((1,), (), "barrier at train.py:25 in <module>")]
    where = ["  rank 0: all_reduce at train.py:20 in <module>", "  rank 1: barrier at train.py:25 in <module>"]
    stopped = results_for(plan, (NodePhase.STOPPED, 143, 9.0, None), (NodePhase.STOPPED, 143, 9.0, None))
    hung = format_summary(outcome(stopped, hang=HangDiagnosis(7.0, groups, {}, None, cause="no progress for 7 s")))
    assert hung.splitlines()[-3:] == [
        "HUNG: no progress for 7 s: rank 0: all_reduce at train.py:20 in <module>; rank 1: barrier at train.py:25 in"
        " <module>", *where]
    working = HangDiagnosis(7.0, groups, {}, None, hung=False, activities=[RankActivity(1, "busy", "computing")])
    interrupted = format_summary(outcome(stopped, hang=working, interrupted=True)).splitlines()
    assert interrupted[-5:] == ["INTERRUPTED by SIGINT: every node was stopped",
                                "  at the last look: no output for 7 s, but the job is working: rank 1 computing",
                                *where, "  rank 1 is computing"]
    failed = results_for(plan, (NodePhase.FAILED, 1, 9.0, RootCause(0, 0, 1, "RuntimeError: timed out")),
                         (NodePhase.STOPPED, 143, 9.0, None))
    timed_out = HangDiagnosis(7.0, groups, {}, None, hung=False, timed_out=True, cause="a collective timed out",
                              activities=[RankActivity(1, "busy", "computing")])
    lines = format_summary(outcome(failed, hang=timed_out)).splitlines()
    at = lines.index("  a collective timed out as the job still worked: rank 1 computing")
    assert lines[at + 1:at + 4] == [*where, "  rank 1 is computing"]


def test_the_summary_reads_whole_in_its_rarer_branches(make_job, tmp_path):
    from orchestrate.outcome.model import SlurmJob
    from orchestrate.outcome.summary import format_slurm_summary

    slurm = RunResult("r1", tmp_path, [], Timings(), slurm=SlurmJob("4", job={"JobState": "COMPLETED", "ExitCode": "0:0"}))
    assert format_summary(slurm) == format_slurm_summary(slurm) and "Slurm" in format_summary(slurm)
    # an elastic node's ranks are the rendezvous', and a phase not timed is "-"
    elastic = make_job(nodes=2, rdzv="c10d", min_nodes=1)
    results = results_for(elastic, (NodePhase.SUCCEEDED, 0, 1.0, None), (NodePhase.SUCCEEDED, 0, 1.0, None))
    text = RunResult("run-1", Path("/tmp/runs/run-1"), results, Timings(None, None, 3.0, None))
    assert format_summary(text).splitlines()[4:7] == ["node0  elastic  succeeded  0              1.0 s",
                                                       "node1  elastic  succeeded  0              1.0 s",
                                                       "bring-up - | until first output - | job 3.0 s | teardown -"]
    # a fault that fired before the job's first step is said with no detail of its own
    plan = make_job(nodes=2)
    ok = results_for(plan, (NodePhase.SUCCEEDED, 0, 1.0, None), (NodePhase.SUCCEEDED, 0, 1.0, None))
    early = FaultRecord("kill:node1@t=1", "node1", elapsed_s=1.0, before_first_step=True)
    said = [ln for ln in format_summary(outcome(ok, faults=[early])).splitlines() if ln.startswith("fault injected:")]
    assert said == [f"fault injected: {early.describe()}"] and "before its first step" in said[0]
    # no failure found and nothing else said: that not every node exited 0; with the run's own error, that alone
    stopped = results_for(plan, (NodePhase.STOPPED, 143, 1.0, None), (NodePhase.STOPPED, 143, 1.0, None))
    assert format_summary(outcome(stopped)).splitlines()[-1] == "FAILED: not every node exited 0"
    # nodes that stopped themselves as their launcher died (`attach` of an orphaned run) say so, not that alone
    orphaned = results_for(plan, (NodePhase.ORPHANED, 75, 1.0, None), (NodePhase.ORPHANED, 75, 1.0, None))
    assert format_summary(outcome(orphaned)).splitlines()[-1] == (
        "ORPHANED: node0, node1 lost the run's launcher before the job ended, and stopped themselves (exit code 75):"
        " its heartbeat lapsed (it died, or was stopped)")
    orphaned[0].state, orphaned[0].exit_code = NodePhase.SUCCEEDED, 0
    assert format_summary(outcome(orphaned)).splitlines()[-1].startswith("ORPHANED: node1 lost the run's launcher"
                                                                          " before the job ended, and stopped itself")
    assert outcome(orphaned).exit_code == 1
    limited = format_summary(outcome(stopped, error="timed out after 60 s")).splitlines()
    assert limited[-1] == "FAILED: timed out after 60 s" and "FAILED: not every node exited 0" not in limited
    # a node stopped after the failure is not said OOM-killed too, however its kernel counted
    failed = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(1, 0, 1, "RuntimeError: boom")),
                         (NodePhase.STOPPED, 143, 6.0, None))
    failed[1].oom_kills = 2
    assert not [ln for ln in format_summary(outcome(failed)).splitlines() if "OOM-killed too" in ln]


def test_a_failures_traceback_shows_its_last_15_lines_and_last_lines_name_the_rank(make_job):
    plan = make_job(nodes=2)
    results = results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(1, 0, 1, "RuntimeError: boom")),
                          (NodePhase.STOPPED, 143, 6.0, None))
    frames = "".join(f'  File "t.py", line {n}, in f{n}\n' for n in range(1, 20))
    results[0].root_cause.traceback = f"Traceback (most recent call last):\n{frames}RuntimeError: boom\n\n\n"
    lines = format_summary(outcome(results)).splitlines()
    at = lines.index("traceback from the error file of node0/rank1:")
    assert lines[at + 1:] == [*(f'  |   File "t.py", line {n}, in f{n}' for n in range(6, 20)), "  | RuntimeError: boom"]
    results[0].root_cause.traceback = ""
    lines = format_summary(outcome(results)).splitlines()
    assert lines[-2:] == ["last lines of node0/rank1:", "  | last of node0"]


def test_a_node_that_rejoined_but_after_which_the_job_failed_before_a_step_is_said_so(make_job):
    """Session 115 (h2): "node0 rejoined after injected fault torn-write:..." read as a recovery
    in the summary and on the report page of a job that failed with no step after it."""
    from orchestrate.report.page import recovery_cell

    plan = make_job(nodes=2)
    torn = "injected fault torn-write:node0@step=29"
    failed = outcome(results_for(plan, (NodePhase.FAILED, 1, 5.0, RootCause(0, 0, 1, "OSError: [Errno 22] bad")),
                                 (NodePhase.STOPPED, 143, 5.1, None)))
    failed.timings.recoveries.append(Recovery("node0", torn, 3.0, step_before=29))
    lines = format_summary(failed).splitlines()
    assert (f"recovery: node0 rejoined after {torn}, but the job failed before its next step: last step before it"
            " 29") in lines, lines
    [recorded] = outcome_record(failed)["recoveries"]
    assert recorded["failed_before_step"] is True
    assert recovery_cell(recorded) == "none: the job failed before its next step"
    # a job that succeeded (one that reports no steps), or took a step after the rejoin, recovered
    done = outcome(results_for(plan, (NodePhase.SUCCEEDED, 0, 5.0, None), (NodePhase.SUCCEEDED, 0, 5.0, None)))
    done.timings.recoveries.append(Recovery("node0", torn, 3.0, step_before=29))
    assert f"recovery: node0 rejoined after {torn}: last step before it 29" in format_summary(done).splitlines()
    assert outcome_record(done)["recoveries"][0]["failed_before_step"] is False
    failed.timings.recoveries[0] = Recovery("node0", torn, 3.0, step_before=29, resumed_from=28, resumed_at=4.5)
    assert (f"recovery: node0 rejoined after {torn}: recovery (failure detected to first step after resume) 1.5 s;"
            " steps lost 1 (last step 29, resumed from 28)") in format_summary(failed).splitlines()
    assert recovery_cell(outcome_record(failed)["recoveries"][0]) == "1.5 s"
    # a node lost for good is said lost, whatever the job did
    lost = Recovery("node1", "injected fault lose:node1@step=5", 3.0, lost=True)
    assert lost.describe(job_succeeded=False) == "node1 was lost for good after injected fault lose:node1@step=5"

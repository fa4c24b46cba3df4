"""The summary printed at the end of every run."""
from __future__ import annotations

import re
import signal
from textwrap import shorten
from typing import Optional

from orchestrate.text import ENDED_APART_HINT
from orchestrate.hangs.diagnosis import HangDiagnosis, in_init
from orchestrate.hangs.init_calls import apart_warning
from orchestrate.outcome.judge import (REFUSED_EXIT_CODE, Failure, absent_from_barrier_lines, at_exit_barrier,
                                       compiler_hint, ddp_prefix_hint, device_ordinal_hint, died_at_exit,
                                       diverged_hint, interface_hint, local_files_while_hung, local_rank_argument_hint,
                                       lost_peer_lines, made_alone_hint,
                                       mismatch_hint, missing_module_hint, no_gpu_hint, no_terminal_hint, node_local_file_hint,
                                       read_too_early_hint, repeated_error_line, said_error, torn_save_hint,
                                       uneven_hint, unused_parameters_hint)
from orchestrate.outcome.model import RunResult, SlurmJob
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.preemption import preemption_said, recovered_preemption_said
from orchestrate.outcome.states import NodePhase
from orchestrate.text import (brief, counted, format_table, grace_ran_out, listed, loaded_from_before, peers_named,
                              ranks_text, readable_node_line, shuffled_alike, times, written_by_several)


def every_node(count: int) -> str:
    """``all 2 nodes``; ``its 1 node`` for a run of one."""
    return "its 1 node" if count == 1 else f"all {count} nodes"


def lost_while_joining_lines(outcome: RunResult) -> list[str]:
    """For a run that hung with every rank in ``init_process_group`` after a node was lost for
    good: the loss came before the ranks met, which fails no worker, so torchrun restarted none
    and the ranks left wait for the lost node's ranks until the process group's timeout."""
    hang = outcome.hang
    if not outcome.lost or hang is None or not hang.groups or not all(in_init(g) for g in hang.groups):
        return []
    lost = " and ".join(f"{node} ({fault})" for node, fault in outcome.lost.items())
    return [f"  the ranks left wait for the ranks of {lost}, lost for good before they met: a loss then fails no"
            " worker, so torchrun restarts none, and they wait until the process group's timeout (lose a node once"
            " the job trains, at a step: @step=N)"]


def exited_0(outcome: RunResult) -> str:
    """``all 2 nodes exited 0``, or, where ``lose`` faults took nodes for good, ``1 of 2 nodes
    exited 0; node1 was lost for good (lose:node1@step=3), and the job went on without it``."""
    lost = outcome.lost
    if not lost:
        return f"{every_node(len(outcome.results))} exited 0"
    left = len(outcome.results) - len(lost)
    return (f"{left} of {len(outcome.results)} nodes exited 0; {' and '.join(lost)}"
            f" {'was' if len(lost) == 1 else 'were'} lost for good ({', '.join(lost.values())}), and the job went"
            f" on without {'it' if len(lost) == 1 else 'them'}")


def format_summary(outcome: RunResult) -> str:
    """Render the table printed at the end of every run, followed by its verdict."""
    if outcome.slurm is not None:
        return format_slurm_summary(outcome)
    header = ("node", "ranks", "state", "torchrun exit", "wall time")  # the node's, not its workers'
    rows = [
        (
            r.node.name,
            ",".join(str(g) for g in r.node.global_ranks) or "elastic",
            r.state.value,
            "-" if r.exit_code is None else str(r.exit_code),
            f"{r.wall_s:.1f} s",
        )
        for r in outcome.results
    ]
    t = outcome.timings
    def seconds(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.1f} s"

    lines = ["", f"=== run {outcome.run_id} summary ===", *format_table(header, rows)]
    lines += [outcome.conditions] if outcome.conditions else []  # only where given: else the summary is as ever
    lines.append(
        f"bring-up {seconds(t.bring_up_s)} | until first output {seconds(t.rendezvous_s)} | job {t.job_s:.1f} s"
        f" | teardown {seconds(t.teardown_s)}"
    )
    for recovery in t.recoveries:
        lines.append(f"recovery: {recovery.describe(outcome.job_succeeded)}")
        met = recovered_preemption_said(recovery.node, recovery.cause, outcome.results)
        lines += [f"  {met}"] if met else []  # (an elastic job got a preempted node back)
    if t.unrecovered and not outcome.succeeded:
        lines.append(f"recovery: none: {t.unrecovered}")
    lines += restart_lines(outcome)
    lines += fault_injected_lines(outcome)
    lines += fault_lines(outcome)
    lines += warning_lines(outcome)
    lines.append(f"logs: {outcome.run_dir}")
    if outcome.teardown_error:
        lines.append(f"TEARDOWN FAILED: {outcome.teardown_error}")
    if outcome.succeeded:
        lines.append(f"SUCCEEDED: {exited_0(outcome)}")
        return "\n".join(lines)
    if outcome.job_succeeded:  # the job did, but the experiment asked for did not happen
        lines.append(f"FAILED: {exited_0(outcome)}, but {'; and '.join(outcome.missed)}")
        return "\n".join(lines)
    if ended_hung(outcome):
        lines.append(f"HUNG: {outcome.hang.headline}")
        lines += hang_lines(outcome.hang)
        lines += lost_while_joining_lines(outcome)
        hint = ending_hint(outcome)
        lines += [hint] if hint else []
        lines += grace_lines(outcome)
        return "\n".join(lines)
    if outcome.interrupted:
        name = signal.Signals(outcome.signal_number).name
        how = f"STOPPED by {outcome.stopped_by} ({name})" if outcome.stopped_by else f"INTERRUPTED by {name}"
        if outcome.lost:  # the nodes it went on without were not there to stop
            lost = outcome.lost
            lines.append(f"{how}: every node left was stopped; {' and '.join(lost)} had been lost for good"
                         f" ({', '.join(lost.values())})")
        elif not outcome.results:  # during the bring-up, before the nodes were followed
            lines.append(f"{how} during the bring-up, before its nodes were followed")
        else:
            lines.append(f"{how}: every node was stopped")
        lines += grace_lines(outcome)
        lines += last_look_lines(outcome)
        lines += last_look_hint(outcome)
    elif outcome.error:
        lines.append(f"FAILED: {outcome.error}")
        if outcome.failure is None:  # its time limit, the engine: the nodes were stopped after it
            lines += grace_lines(outcome)
        lines += last_look_lines(outcome)
        lines += last_look_hint(outcome)
    failure = outcome.failure
    if failure is not None:
        lines.append(f"FAILED: {peers_named(failure.describe(), outcome.node_addresses)}")
        # the line of the script that led there, however deep in torch it was raised (not a lost peer's
        # where an earlier attempt's own error is said below)
        if failure.earlier is None:
            lines += own_error_lines(failure, outcome.skipped)
        lost = {node: fault for node, fault in outcome.lost.items() if node != failure.node}
        if lost:  # the nodes left failed: after what, and with how many of them
            lines.append(f"  after {' and '.join(lost)} {'was' if len(lost) == 1 else 'were'} lost for good"
                         f" ({', '.join(lost.values())}): the job went on with"
                         f" {len(outcome.results) - len(outcome.lost)} of {len(outcome.results)} nodes")
        others = [r for r in outcome.results
                  if r.state is NodePhase.FAILED and r.node.name != failure.node and r.root_cause]
        failed_by = said_error(failure.exception, failure.exit_code, failure.last_lines)
        for other in outcome.results:
            cause = other.root_cause if other in others else None
            code = cause.exit_code if cause and cause.exit_code is not None else other.exit_code
            error = said_error(cause.exception, code, other.last_lines) if cause else ""
            met = "" if error or other.node.name == failure.node else preemption_said(other, outcome.results)
            if met:  # another node a preempt hit (a whole job taken back): how its ranks met it
                lines.append(f"  then {other.node.name} (injected fault {other.fault}): {met}")
            elif cause:
                said = ("the same error" if error and error == failed_by
                        else brief(error) if error else f"exit code {code}")
                if other.oom_kills:  # its own memory ran out too, whatever its ranks then said
                    said = oom_too(other)
                lines.append(f"  then {other.node.name} rank {cause.rank}: {peers_named(said, outcome.node_addresses)}")
            elif other.oom_kills and other.state is NodePhase.FAILED and other.node.name != failure.node:
                lines.append(f"  then {other.node.name}: {oom_too(other)}")  # no worker's error to go with it
        if failure.earlier is not None:
            lines.append(f"  {failure.earlier.describe(failure.node)}")
            if failure.earlier.users_frame:
                lines.append(f"  in your code: {failure.earlier.users_frame}")
        repeated = repeated_error_line(failure, outcome.results, [(f.spec, f.detail) for f in outcome.faults])
        lines += [repeated] if repeated else []
        lines += absent_from_barrier_lines(failure, outcome.stopped_where)
        lines += lost_peer_lines(failure, outcome.stopped_where, outcome.node_addresses, outcome.results)
        if not outcome.interrupted:
            lines += grace_lines(outcome)
        lines += divergence_lines(outcome)
        if failure.crashed:
            lines.append(f"  where it crashed: {failure.crashed}")
        lines += timed_out_working_lines(outcome)
        advice = ending_hint(outcome)
        if advice:
            lines.append(advice)
        if failure.exit_code == REFUSED_EXIT_CODE and failure.exception:
            pass  # a worker that refused its input: its one line above says it all
        elif failure.earlier is not None:  # its error says more than the lost peer's
            earlier = failure.earlier
            lines.append(f"last lines of {failure.node}'s attempt {earlier.attempt}, local rank {earlier.local_rank}:")
            lines += [f"  | {ln}" for ln in earlier.last_lines]
        elif failure.traceback:
            lines.append(f"traceback from the error file of {failure.node}/rank{failure.rank}:")
            lines += [f"  | {ln}" for ln in failure.traceback.rstrip().splitlines()[-15:]]
        elif failure.last_lines:
            whose = failure.lines_of or (f"{failure.node}/rank{failure.rank}" if failure.rank is not None
                                         else failure.node)
            lines.append(f"last lines of {whose}:")
            lines += [f"  | {readable_node_line(ln)}" for ln in failure.last_lines]
    elif not outcome.interrupted and not outcome.error:
        orphaned = [r for r in outcome.results if r.state is NodePhase.ORPHANED]
        if orphaned:
            codes = ", ".join(sorted({str(r.exit_code) for r in orphaned}))  # (the node supervisor's own, 75)
            lines.append(f"ORPHANED: {listed([r.node.name for r in orphaned], 8)} lost the run's launcher before the"
                         f" job ended, and stopped {'itself' if len(orphaned) == 1 else 'themselves'} (exit code"
                         f" {codes}): its heartbeat lapsed (it died, or was stopped)")
        else:
            lines.append("FAILED: not every node exited 0")
    return "\n".join(lines)


_TORCH_SEQ = re.compile(r"torch's sequence number (\d+)")
_RECORDS_SEQ = re.compile(r"collective #(\d+)")


def divergence_lines(outcome: RunResult) -> list[str]:
    """Where the ranks' collectives part, by their records, for a failure (none where they do not say)."""
    if not outcome.divergence:
        return []
    return [f"  where, by the ranks' collective records: {outcome.divergence}{numbers_related(outcome)}"]


def numbers_related(outcome: RunResult) -> str:
    """How the records' number of a collective (``collective #4``, counted from 1) stands to torch's
    sequence number that the failure above says of it (counted from 0), so one collective does not
    read as two; nothing where only one of them is said."""
    records = _RECORDS_SEQ.search(outcome.divergence)
    torch_said = {int(n) for r in outcome.results if r.root_cause for n in _TORCH_SEQ.findall(r.root_cause.exception)}
    if records is None or not torch_said:
        return ""
    if torch_said == {int(records[1]) - 1}:
        return (f" (the same call as torch's sequence number {int(records[1]) - 1}: torch counts a group's"
                " collectives from 0, the records from 1)")
    return (f" (#{records[1]} counts from 1 the calls the records saw in the group; torch's sequence number counts"
            " from 0 the operations torch ran in it, which can be more)")


def timed_out_working_lines(outcome: RunResult) -> list[str]:
    """For a collective that timed out while a rank computed (the timeout was shorter than its
    work, and the job was not hung): where every rank was."""
    hang = outcome.hang
    if hang is None or not hang.timed_out or hang.hung:
        return []
    return [f"  {hang.headline}", *hang.lines()[1:]]


def last_look_lines(outcome: RunResult) -> list[str]:
    """For a run ended from outside (an interrupt, ``stop``, its time limit): where the ranks
    were at the watchdog's last look, else at the look ``stop`` took first, hung or quiet and
    working; none where no one looked."""
    hang = outcome.hang
    if hang is None and outcome.stop_look:
        headline, *rest = outcome.stop_look
        return [f"  {'while hung' if outcome.stop_look_hung else 'at the last look'}: {headline}", *rest]
    if hang is None or hang.timed_out:  # (a collective's timeout is the failure's, said with it)
        return []
    return [f"  {'while hung' if hang.hung else 'at the last look'}: {hang.headline}", *hang_lines(hang)]


# A hint said as the run went longer than this is said in short in its summary, on the same output.
SAID_HINT_CHARS = 200
SAID_ABOVE = " ... (said in full above)"


def hang_lines(hang: HangDiagnosis) -> list[str]:
    """A hang's lines past its headline, for the summary: where the run's own output said them as
    it went (the watchdog's verdict), each hint longer than :data:`SAID_HINT_CHARS` cut to its
    start, said to be in full above (not the line of a call one rank skipped: where to look), so
    that one command does not say a DDP hint of 1,100 characters twice, as the run hung and again
    in its summary. outcome.json keeps them whole."""
    lines = hang.lines()[1:]
    if not hang.said:
        return lines
    # (the call one rank skipped is no hint but where to look: kept whole)
    skipped = hang.divergence.fewer if hang.divergence is not None else ""
    long_hints = {f"  {hint}" for hint in hang.advice() if len(hint) > SAID_HINT_CHARS and hint != skipped}
    return [f"  {shorten(line.strip(), SAID_HINT_CHARS, placeholder=SAID_ABOVE)}" if line in long_hints else line
            for line in lines]


def says_failure(outcome: RunResult) -> bool:
    """Whether the summary says the failure with what comes under it (an earlier attempt's error,
    a repeated one, the ranks absent from a barrier): a Compose run that failed and did not end
    hung."""
    return (outcome.slurm is None and not outcome.succeeded and not outcome.job_succeeded
            and not ended_hung(outcome) and outcome.failure is not None)


def ended_hung(outcome: RunResult) -> bool:
    """Whether the run ends in the summary as HUNG: the watchdog, or a collective's timeout while
    no rank worked, ended it, and neither a signal nor the environment did."""
    return (not outcome.succeeded and not outcome.job_succeeded and outcome.hang is not None
            and not outcome.interrupted and not outcome.error and outcome.hung)


def last_look_hint(outcome: RunResult) -> list[str]:
    """Under an interrupt's or a time limit's ending with no failed rank: the hint of what the
    last look at a job that seemed to work found (a rank that spins polling for a file it cannot
    see), where the failure's own lines will not give it."""
    if outcome.failure is not None or outcome.hang is None or outcome.hang.hung:
        return []
    hint = ending_hint(outcome)
    return [hint] if hint else []


def ending_hint(outcome: RunResult) -> str:
    """The one hint the summary gives under how the run ended, what to change and why ("" where
    none applies): for a hang, files a waiting node cannot see; for a failure, the first hint
    of the judge's that explains it (under Slurm, for a worker's own error: not one that a
    peer's lost connection made, nor a job stopped or timed out). Kept in outcome.json and on
    the report page too."""
    if outcome.slurm is not None:
        failure = outcome.failure
        if (failure is None or failure.rank is None or outcome.succeeded or outcome.job_succeeded
                or ended_hung(outcome) or outcome.interrupted or outcome.error or outcome.slurm.workers_collateral):
            return ""
        return failure_hint(outcome, failure)
    if ended_hung(outcome):
        return local_files_while_hung(outcome.hang, outcome.results, outcome.written_locally)
    if (outcome.hang is not None and not outcome.hang.hung and outcome.failure is None
            and (outcome.interrupted or bool(outcome.error))):
        # a job the last look found at work, ended by an interrupt or its time limit: a rank that spun polling for a
        # file it cannot see
        return local_files_while_hung(outcome.hang, outcome.results, outcome.written_locally)
    if not says_failure(outcome):
        return ""
    failure = outcome.failure
    assert failure is not None
    return failure_hint(outcome, failure)


def failure_hint(outcome: RunResult, failure: Failure) -> str:
    """The first of the judge's hints that explains ``failure`` ("" where none does)."""
    torn = [(f.spec, f.struck_file) for f in outcome.fired_faults if f.struck_file]
    return (died_at_exit(failure, outcome.results, outcome.image_torch) or torn_save_hint(failure, torn)
            or interface_hint(failure) or no_gpu_hint(failure, outcome.results)
            or device_ordinal_hint(failure, outcome.results) or unused_parameters_hint(failure)
            or ddp_prefix_hint(failure)
            or mismatch_hint(failure, outcome.divergence, outcome.collectives_checked) or missing_module_hint(failure)
            or diverged_hint(failure, outcome.divergence, outcome.collectives_checked) or uneven_hint(failure)
            or made_alone_hint(failure)
            or node_local_file_hint(failure, outcome.results, outcome.written_locally)
            or read_too_early_hint(failure, outcome.results, outcome.written_shared)
            or compiler_hint(failure) or local_rank_argument_hint(failure) or no_terminal_hint(failure))


# How many files written by several ranks are named, at most.
WRITTEN_BY_SEVERAL_SHOWN = 5


def warning_lines(outcome: RunResult) -> list[str]:
    """What the job did that may fail nothing and still is a mistake, whatever its end: ranks
    whose init_process_group asked for another world than torchrun's, ranks whose collectives
    ended apart (gloo paired different calls), files several ranks wrote whole, a
    DistributedSampler that shuffled every epoch alike; and a note of the files the work
    directory held before the run that the job loaded."""
    # (a job that succeeded fails on it, and says it in its FAILED line)
    apart = [f"warning: {apart_warning(outcome.apart)}"] if outcome.apart and not outcome.job_succeeded else []
    held = [f"note: {loaded_from_before(outcome.loaded_from_before)}"] if outcome.loaded_from_before else []
    shuffled = [f"warning: {shuffled_alike(line, epoch, ranks)}"
                for line, (epoch, ranks) in outcome.shuffled_alike.items()]
    ended = ([f"warning: the ranks' collectives ended apart: {outcome.ended_apart}", f"  hint: {ENDED_APART_HINT}"]
             if outcome.ended_apart else [])
    return ended + apart + written_by_several_lines(outcome) + shuffled + held


def written_by_several_lines(outcome: RunResult) -> list[str]:
    """A warning for each shared file that several ranks wrote whole: they race in it."""
    found = list(outcome.written_by_several.items())
    lines = [f"warning: {written_by_several(path, ranks)}" for path, ranks in found[:1]]
    lines += [f"warning: {ranks_text(ranks)} each wrote {path} whole, too" for path, ranks in
              found[1:WRITTEN_BY_SEVERAL_SHOWN]]
    if len(found) > WRITTEN_BY_SEVERAL_SHOWN:
        lines.append(f"warning: {len(found) - WRITTEN_BY_SEVERAL_SHOWN} more files written by several ranks"
                     " (outcome.json: written_by_several)")
    return lines


# The faults that strike one worker and leave its node up, so that torchrun restarts the workers in
# place (config.fault_spec's KILL_RANK and HANG_RANK, as their specs start: outcome imports no config).
RANK_FAULTS = ("kill-rank:", "hang-rank:")


def own_error_lines(failure: Failure, skipped: str = "") -> list[str]:
    """Under a failure by an error of its own: the line of the script that led there, however
    deep in torch it was raised, and what the error was raised from, often what explains it.
    ``skipped``: a call one rank skipped before the ranks parted, by their records (torch's check
    fails the ranks where they part, a line after the skip): said as the line to look at instead."""
    said = skipped or failure.users_frame
    return ([f"  in your code: {said}"] if said else []) + [f"  {link}" for link in failure.chain]


def oom_too(result: NodeResult) -> str:
    """What a node OOM-killed after the failure's own node went through."""
    return f"OOM-killed too: the kernel killed {counted(result.oom_kills, 'process', 'processes')} at its memory limit"


def restart_lines(outcome: RunResult) -> list[str]:
    """Where torchrun restarted a node's workers in place (--max-restarts): how often on each node;
    the injected faults that struck a worker (their nodes' peers fail on them, so a peer's error
    can be the first in the logs), and the nodes lost for good (the nodes left go on so); and, for
    a node that then ended well, the error each restarted attempt ended in that was not a lost
    peer's (a failed node's are said under its failure). A job that succeeded only after a restart
    is never a plain success."""
    counts = outcome.restarts_in_place
    if not counts:
        return []
    lines = [restarted_line(counts, len(outcome.results))]
    lines += [f"  after injected fault {f.spec} on {f.node}" for f in outcome.fired_faults if f.spec.startswith(RANK_FAULTS)]
    # (the nodes left restart their workers to go on in a smaller world: what a loss asks of torchrun)
    lines += [f"  after {node} was lost for good ({fault}): the nodes left go on so"
              for node, fault in outcome.lost.items()]
    for result in (r for r in outcome.results if r.restarts_in_place and r.state is NodePhase.SUCCEEDED):
        lines += [f"  attempt {e.attempt} of {result.node.name}'s workers ended with local rank {e.local_rank}'s"
                  f" error: {brief(e.exception)}" for e in result.attempts if e.own]
    return lines


def restarted_line(counts: dict[str, int], nodes: int) -> str:
    """How often torchrun restarted each node's workers in place (``counts``, of ``nodes`` nodes)."""
    if len(counts) == nodes and len(set(counts.values())) == 1:
        where = f"{times(next(iter(counts.values())))} on every node"
    else:
        where = ", ".join(f"{times(count)} on {node}" for node, count in counts.items())
    return f"restarted in place: torchrun restarted the workers after a failure, {where}"


def fault_injected_lines(outcome: RunResult) -> list[str]:
    """Every fault that fired, each once: when, how long it held where it ended, what it did beyond
    its spec (the file a torn write cut, a full disk's failed writes, a store outage too short to
    be felt), that it fell before the job's first step (then it tested no training) or still held
    at the stop. A fault with none of these is said too: a store pause too short to be felt
    leaves its trace in the summary."""
    return [f"fault injected: {f.describe()}" for f in outcome.fired_faults]


def fault_lines(outcome: RunResult) -> list[str]:
    """The faults asked for that did not fire, with why (those that did are said as they fire)."""
    return [f"fault not fired: {f.describe()}" for f in outcome.unfired_faults]


# Why a node whose ranks had all finished their scripts outlives its grace: torchrun's agent, its
# workers done, waits for the other nodes' agents in a barrier on the rendezvous store (up to 300 s,
# torch's exit_barrier_timeout), inside a call that runs no Python signal handler until it returns.
EXIT_BARRIER_NOTE = ("; its ranks had finished their scripts, and its torchrun waited for the other nodes at its exit"
                     " barrier (up to 5 minutes), where it takes no SIGTERM: nothing of the job's was cut short")


def grace_lines(outcome: RunResult) -> list[str]:
    """A line for each node that a SIGKILL ended because its stop's grace ran out, with what
    still ran in it a moment before, and why where its ranks had all finished their scripts."""
    return [f"  {grace_ran_out(r.node.name, r.still_running, r.no_grace)}{EXIT_BARRIER_NOTE * at_exit_barrier(r)}"
            for r in outcome.results if r.grace_ran_out]


# Slurm node states that explain a failed job.
_SLURM_TROUBLE = ("DOWN", "FAIL", "DRAIN", "NOT_RESPONDING")


def interrupted_slurm_job(slurm: SlurmJob) -> str:
    """How an interrupted Slurm job ended (its state is the table's ``job`` line): on the
    interrupt's SIGTERM within the grace, killed, or with the cluster where Slurm did not stop it."""
    if not slurm.job_id:
        return "no Slurm job was submitted"
    if slurm.ended_on == "SIGTERM":
        return f"Slurm job {slurm.job_id}'s tasks got SIGTERM and ended within the stop grace"
    if slurm.ended_on == "SIGKILL":
        return f"Slurm job {slurm.job_id}'s tasks were killed (SIGKILL)"
    return f"Slurm job {slurm.job_id} went with the cluster (Slurm did not stop it)"


def slurm_exit_code(job: dict[str, str]) -> str:
    """A Slurm job's exit code as Slurm gave it (``0:0``: the code, then the signal), or that it
    gave none: never one made up."""
    return job.get("ExitCode") or "not given by Slurm"


def format_slurm_summary(outcome: RunResult) -> str:
    """The table and verdict of a run under Slurm, in Slurm's words and the workers'."""
    slurm = outcome.slurm
    assert slurm is not None
    job_named = f"Slurm job {slurm.job_id}" if slurm.job_id else "no Slurm job: it was never submitted"
    lines = ["", f"=== run {outcome.run_id} summary ({job_named}) ==="]
    rows = [(name, info.get("State", "?"), info.get("Reason", "") or "-") for name, info in sorted(slurm.nodes.items())]
    if rows:
        lines += format_table(("node", "Slurm state", "reason"), rows)
    job = slurm.job
    if job:
        lines.append(f"job {slurm.job_id}: {job.get('JobState', '?')} (reason {job.get('Reason', '-')}),"
                     f" exit code {slurm_exit_code(job)}, on {job.get('NodeList', '-')},"
                     f" run time {job.get('RunTime', '-')}")
    lines += [outcome.conditions] if outcome.conditions else []
    bring_up = outcome.timings.bring_up_s or 0.0
    lines.append(f"bring-up {bring_up:.1f} s | job {outcome.timings.job_s:.1f} s")
    if slurm.restarts_in_place:  # within the job's tasks: Slurm's accounting does not see them
        lines.append(restarted_line(slurm.restarts_in_place, len(slurm.nodes)))
    lines += fault_injected_lines(outcome)
    lines += fault_lines(outcome)
    lines += warning_lines(outcome)
    lines.append(f"logs: {outcome.run_dir}")
    if outcome.teardown_error:
        lines.append(f"TEARDOWN FAILED: {outcome.teardown_error}")
    if outcome.succeeded:
        lines.append(f"SUCCEEDED: Slurm job {slurm.job_id} COMPLETED, exit code {slurm_exit_code(job)}")
        return "\n".join(lines)
    if outcome.job_succeeded:  # the job did, but the experiment asked for did not happen
        lines.append(f"FAILED: Slurm job {slurm.job_id} COMPLETED, exit code {slurm_exit_code(job)},"
                     f" but {'; and '.join(outcome.missed)}")
        return "\n".join(lines)
    if ended_hung(outcome):  # the watchdog cancelled the job: where every rank waited says more than Slurm's state
        assert outcome.hang is not None
        lines.append(f"HUNG: {outcome.hang.headline}")
        lines += hang_lines(outcome.hang)
        if outcome.hang.timed_out:  # torch ended the wait, and the job with it
            lines.append(f"  then Slurm job {slurm.job_id} ended {slurm.state or 'in a state unknown'}"
                         f" (reason {job.get('Reason', '-')}, exit code {slurm_exit_code(job)})")
        else:
            lines.append(f"  the launcher then cancelled Slurm job {slurm.job_id} ({slurm.state or 'its state unknown'},"
                         f" exit code {slurm_exit_code(job)})")
        return "\n".join(lines)
    if outcome.interrupted and outcome.stopped_by:
        lines.append(f"STOPPED by {outcome.stopped_by} ({signal.Signals(outcome.signal_number).name} to Slurm job"
                     f" {slurm.job_id or '-'}'s tasks): every node was stopped")
    elif outcome.interrupted:
        lines.append(f"INTERRUPTED: {interrupted_slurm_job(slurm)}; every node stopped")
        lines += last_look_lines(outcome)
    elif outcome.error:
        lines.append(f"FAILED: {outcome.error}")
        lines += last_look_lines(outcome)
    else:
        down = [f"{n} {i.get('State')} ({i.get('Reason') or 'no reason given'})" for n, i in sorted(slurm.nodes.items())
                if any(s in i.get("State", "") for s in _SLURM_TROUBLE)]
        lines.append(f"FAILED: Slurm job {slurm.job_id} {slurm.state} (reason {job.get('Reason', '-')},"
                     f" exit code {slurm_exit_code(job)})" + (f"; Slurm reports {', '.join(down)}" if down else ""))
        failure = outcome.failure
        if failure is not None and failure.rank is not None:
            # A peer's closed connection only follows from what Slurm reported: say so, briefly.
            label = "workers, as a result" if slurm.workers_collateral and (down or outcome.fired_faults) else "workers"
            lines.append(f"  {label}: {failure.node} rank {failure.rank}:"
                         f" {failure.exception or 'exit code ' + str(failure.exit_code)}")
            if label == "workers":
                lines += own_error_lines(failure, outcome.skipped)
                lines += absent_from_barrier_lines(failure, outcome.stopped_where)
                lines += divergence_lines(outcome) + timed_out_working_lines(outcome)
                advice = ending_hint(outcome)
                lines += [advice] if advice else []
                lines += [f"  | {ln}" for ln in failure.traceback.rstrip().splitlines()[-12:]]
    return "\n".join(lines)

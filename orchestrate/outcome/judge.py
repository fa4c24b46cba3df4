"""Judging a run (pure): which failure explains it, and a crash at exit told apart."""
from __future__ import annotations

import posixpath
import re
import signal
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from orchestrate.config.fault_spec import FaultAction
from orchestrate.config.torch_versions import DEFAULT_TORCH  # the default image's, which aborted least at exit
from orchestrate.hangs.collectives import ROOT_TEXT as ROOT_NAMED, UNEVEN_HINT
from orchestrate.hangs.diagnosis import CHECKED_MISMATCH, COLLECTIVES_MADE_ALONE, GLOO_MISMATCH, HangDiagnosis
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.preemption import preemption_said
from orchestrate.outcome.root_cause import (CAUSED_BY, CRASH_EXIT_CODES, AttemptError, EarlierFailure,
                                            absent_from_barrier, is_collateral, linked_exceptions, lost_peer_in)
from orchestrate.outcome.states import NodePhase
from orchestrate.plan.layout import DEBUG_SUBDIR, NODE_INTERFACE, SHARED_DIR, WORKSPACE_DIR
from orchestrate.text import brief, peer_nodes, ranks_text

# What a lost peer that ranks which left early explain asks, unless the ranks' records differ. Asked where
# every rank reported as many steps too: the optimizer's steps count those done, and a rank that ran out of
# batches and one waiting in its next step's backward pass reported as many (5 and 5, tests/jobs/uneven_batches.py).
UNEVEN_QUESTION = " (do all ranks run the same number of steps?)"
# The exit code of a worker that refused its input, by the convention of argparse and app/.
REFUSED_EXIT_CODE = 2


@dataclass(frozen=True)
class Failure:
    """The failure a run is reported for: the earliest one that was not a consequence."""

    node: str
    rank: Optional[int]
    exit_code: Optional[int]
    exception: str
    last_lines: tuple[str, ...]
    traceback: str = ""
    reason: str = ""
    description: str = ""
    crashed: str = ""  # a native crash: where the worker was, and where every thread's stack lies
    collective: str = ""  # the collective the rank's record says failed as it went
    training_pass: str = ""  # which pass of a DDP model's training step that was ("backward pass"), if one
    peers_finished: bool = False  # it lost peers whose scripts had returned (the description says which)
    earlier: Optional[EarlierFailure] = None  # a lost peer's: an earlier attempt's worker whose error was its own
    users_frame: str = ""  # where the user's own code was in its traceback (train.py:13 in <module>: ...)
    chain: tuple[str, ...] = ()  # the exceptions its own was raised from, nearest first ("caused by: ...")
    lines_of: str = ""  # whose last_lines are, where not the failure's node or rank (a preempted node's rank)

    @property
    def errors(self) -> str:
        """Its exception, then those it was raised from, a line each: what a hint looks in, since a
        script's own error often wraps the one that names what went wrong (``RuntimeError: could
        not resume``, caused by a ``FileNotFoundError``; ``training failed at step 5``, raised
        while handling DDP's unused parameters). "" where it names no exception of its own (a
        fault's or an OOM kill's failure, whose reason says it)."""
        return "\n".join([self.exception, *linked_exceptions(self.chain)]) if self.exception else ""

    @property
    def errors_raised_from(self) -> str:
        """Its exception, then those it was raised ``from`` (``caused by``), not those it was
        raised while handling: a missing file or module that a script caught (``except
        FileNotFoundError: start_fresh()``) is not what failed in the error it raised there."""
        return "\n".join([self.exception, *linked_exceptions(self.chain, CAUSED_BY)]) if self.exception else ""

    def describe(self) -> str:
        """One line naming the node, the rank, the exit code and the exception (or why it hung);
        a scheduler's own words where it gave them. A worker that exited 2 with no exception
        refused its input (argparse, ``app/``'s refusals): its last line says why."""
        if self.description:
            return self.description
        if self.reason:
            return f"{self.node} {self.reason}"
        rank = f" rank {self.rank}" if self.rank is not None else ""
        error = said_error(self.exception, self.exit_code, self.last_lines)
        what = f": {brief(error)}" if error else ""
        code = f"exit code {self.exit_code}"
        name = signal_name(self.exit_code)
        if name and name not in what:
            code += f", {name}"
        return f"{self.node}{rank} failed ({code}){what}"


def said_error(exception: str, exit_code: Optional[int], last_lines: Sequence[str]) -> str:
    """The error a failed worker is said by: its exception; for one that exited 2 with none (it
    refused its input: argparse, ``app/``'s refusals), its last line, which says why; else ""."""
    if exception:
        return exception
    if exit_code == REFUSED_EXIT_CODE and last_lines and last_lines[-1].strip():
        return last_lines[-1].strip()
    return ""


def signal_name(exit_code: Optional[int]) -> str:
    """``SIGSEGV`` for torchrun's exit code -11; "" for a code that is no signal."""
    if exit_code is None or exit_code >= 0:
        return ""
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return ""


def find_failure(results: list[NodeResult], diverged: bool = False) -> Optional[Failure]:
    """Choose the failure that explains a run.

    1. A node that was OOM-killed, stopped answering (paused, cut off, gone) or that a fault
       was injected into explains the failures of the others, which only waited for it or
       saw its connections close (the rank that raised under the fault, and its error, named);
       not one a ``lose`` fault took for good, after which the nodes left go on alone: their
       own failure explains the run, and the lost node only where they just lost their peers.
    2. A node whose death ended the job for every node (it held the rendezvous store, and only
       it was restarted) explains the failures of the others.
    3. Otherwise only nodes whose torchrun failed by itself count (not those the launcher
       stopped); a failure that is not a consequence of another (a peer's closed
       connection, a SIGTERM from torchrun) wins over one that is; among consequences, a
       monitored barrier's that names the ranks that did not reach it wins.
    4. Then the earliest failure by the workers' error files, then the node that ended first.
    5. A failure that only lost its peers (a consequence), of a rank that had not finished,
       while other ranks had finished their script: those ranks left while it still needed
       them (uneven data), and the failure says so (:func:`left_early`); where the ranks'
       records show they ``diverged`` (the same collective with other tensors), not that they
       ran uneven steps.

    A node a fault struck that a stop asked of the run then stopped (Ctrl-C, ``stop RUN``) did
    not fail: the stop ended it (a pause's hang is said as where the stop found the ranks); unless
    a worker of it had raised (a save that met a full disk), or the launcher was already ending
    the run (a hang's verdict, a failure's grace) when the stop came.

    Returns:
        The failure, or None when no node failed.
    """
    for result in results:
        if result.oom_kills:
            cause = result.root_cause
            rank = f" (rank {cause.rank} killed)" if cause and cause.exit_code == -9 else ""
            # a rank that lived on and raised (its DataLoader worker was the one killed): its error,
            # where in the script, and what that error was raised from
            raised = (cause is not None and not rank and bool(cause.exception)
                      and not is_collateral(cause, result.last_lines))
            if raised:
                rank = f", and rank {cause.rank} failed: {brief(cause.exception)}"
            return Failure(result.node.name, cause.rank if cause else None, result.exit_code, "",
                           tuple(result.last_lines),
                           reason=f"OOM-killed: the kernel killed {result.oom_kills} process(es) at the"
                                  f" node's memory limit{result.after_step_of_oom()}{rank}; raise --memory-per-node or"
                                  " use less memory",
                           users_frame=cause.users_frame if raised else "", chain=cause.chain if raised else ())
    for result in results:
        if result.state is NodePhase.LOST:  # its end was the fault's; the job's is the nodes' left
            continue
        raised = result.root_cause is not None and bool(result.root_cause.exception)
        stopped = result.stopped_by_request and result.state is NodePhase.STOPPED and not raised
        if result.unresponsive or (result.fault and result.state is not NodePhase.SUCCEEDED and not stopped):
            reason = f"stopped answering: {result.unresponsive}" if result.unresponsive else "failed"
            if result.fault:
                reason += f" (injected fault {result.fault})"
            cause, rank = result.root_cause, result.culprit_rank
            lines, lines_of = tuple(result.last_lines), ""
            if rank is None and cause is not None and cause.exception and cause.rank is not None:
                # a worker raised under the fault (a save that met a full disk): name it and its error
                rank, reason = cause.rank, f"{reason}: {brief(cause.exception)}"
            elif met := preemption_said(result, results):  # what a preempt tests: did the scripts save and finish
                reason = f"{reason}: {met}"
                preemption = result.preemption
                if preemption is not None and preemption.lines_rank is not None:  # its handler's, not torchrun's end
                    lines, lines_of = preemption.last_lines, f"{result.node.name}/rank{preemption.lines_rank}"
            if rank is not None:  # one worker explains it: name it
                reason = f"rank {rank} {reason}"
            return Failure(result.node.name, rank, result.exit_code, "", lines, reason=reason,
                           users_frame=cause.users_frame if cause is not None and rank == cause.rank else "",
                           chain=cause.chain if cause is not None and rank == cause.rank else (), lines_of=lines_of)
    failed = [r for r in results if r.state is NodePhase.FAILED]
    if not failed:
        return None
    for result in results:  # a death that ended the job for every node (the rendezvous store went with it)
        if result.consequence:
            return Failure(result.node.name, None, result.exit_code, "", tuple(result.last_lines),
                           reason=result.consequence)

    def order(result: NodeResult) -> tuple:
        cause = result.root_cause
        # (a node whose torchrun failed with no worker to blame: its agent may have lost the store)
        collateral = (is_collateral(cause, result.last_lines) if cause is not None
                      else lost_peer_in(result.last_lines[-5:]))
        names_absent = cause is not None and bool(absent_from_barrier(cause.exception))
        stamp = cause.timestamp if cause and cause.timestamp is not None else float("inf")
        return (collateral, not names_absent, stamp, result.ended_at)

    first = min(failed, key=order)
    # the nodes left only lost their peers, and had not trained on since the latest loss: it explains it
    lost = [r for r in results if r.state is NodePhase.LOST]
    latest = max(lost, key=lambda r: r.ended_at) if lost else None
    if latest is not None and not latest.went_on_without and order(first)[0]:
        return Failure(latest.node.name, None, latest.exit_code, "", tuple(first.last_lines),
                       reason=f"was lost for good (injected fault {latest.lost}), and the nodes left could not go"
                              f" on without it: {first.node.name} failed", lines_of=first.node.name)
    cause = first.root_cause
    failure = Failure(
        node=first.node.name,
        rank=cause.rank if cause else None,
        exit_code=(cause.exit_code if cause and cause.exit_code is not None else first.exit_code),
        exception=cause.exception if cause else "",
        last_lines=tuple(first.last_lines),
        traceback=cause.traceback if cause else "",
        crashed=cause.crashed if cause else "",
        collective=cause.collective if cause else "",
        training_pass=cause.training_pass if cause else "",
        earlier=first.earlier,
        users_frame=cause.users_frame if cause else "",
        chain=cause.chain if cause else (),
    )
    left = left_early(first, results, uneven=not diverged)
    if not left:
        return failure
    return replace(failure, description=f"{failure.describe()}, as {left}", peers_finished=True)


def left_early(first: NodeResult, results: list[NodeResult], uneven: bool = True) -> str:
    """Why ``first``'s failure, a lost peer, happened when ranks left early: those whose script
    had returned while it still ran (``rank 3 (node1, after step 12) had finished its script while
    ranks 0-2 still ran, and ...``), or "" when that does not explain it (its error is its own,
    a signal ended it, it had finished too, a worker crashed, or no rank had finished). ``uneven``:
    ask whether the ranks run as many steps (not where their records say they differed)."""
    cause = first.root_cause
    if cause is None or not is_collateral(cause, first.last_lines) or cause.rank in first.finished_ranks:
        return ""
    if cause.exit_code is not None and cause.exit_code < 0:
        return ""  # killed, not a lost peer: the crash at exit, a stop, torchrun's SIGTERM
    if any(r.root_cause and r.root_cause.exit_code in CRASH_EXIT_CODES for r in results if r.state is NodePhase.FAILED):
        return ""  # a worker that crashed explains its peers better (and torchrun stopped its node's others)
    finished = {rank: (result.node.name, step) for result in results for rank, step in result.finished_ranks.items()}
    still = [rank for result in results for rank in result.node.global_ranks if rank not in finished]
    if not finished or not still:
        return ""
    who = ", ".join(f"{rank} ({node}{'' if step is None else f', after step {step}'})"
                    for rank, (node, step) in sorted(finished.items()))
    verb = "had finished its script" if len(finished) == 1 else "had finished their scripts"
    lost = "it as a peer" if len(finished) == 1 else "them as peers"
    return (f"{'rank' if len(finished) == 1 else 'ranks'} {who} {verb} while {ranks_text(still)} still ran, and"
            f" {ranks_text(still)}'s collectives lost {lost}{UNEVEN_QUESTION if uneven else ''}")


def at_exit_barrier(result: NodeResult) -> bool:
    """Whether a node's every rank had finished its script (however long after another node
    ended), and only its torchrun still ran (an elastic node's planned ranks are not known: never)."""
    ranks = result.node.global_ranks
    return (bool(ranks) and all(rank in result.returned_ranks for rank in ranks)
            and bool(result.still_running) and all(p.startswith("torchrun ") for p in result.still_running))


def had_finished(result: NodeResult) -> bool:
    """Whether a node's part of the job was done when the run ended: it succeeded, or every rank of
    it had finished its script before any node ended, or only its torchrun still ran, waiting at
    its exit barrier for the others (stopped then, as the run ended)."""
    ranks = result.node.global_ranks
    return (result.state is NodePhase.SUCCEEDED or (bool(ranks) and all(r in result.finished_ranks for r in ranks))
            or at_exit_barrier(result))


def died_at_exit(failure: Optional[Failure], results: list[NodeResult], image_torch: str = "") -> Optional[str]:
    """Explain a worker that died by a signal after its peers finished, or return None.

    Every other node had done its part (exited 0, or waited at its torchrun's exit barrier until
    the run ended) and the failing rank died by a signal with no Python error: the job's work was
    done, and the process crashed on its way out. SIGABRT there is the known gloo crash at
    interpreter exit, seen with every torch tried (``image_torch``: the nodes' torch).
    """
    if failure is None or failure.reason or failure.exit_code is None or failure.exit_code >= 0:
        return None
    if failure.exception and not failure.exception.startswith(("SIG", "Signal ")):  # (torchrun's words for a signal)
        return None  # it died of an error it met (gloo's abort on sizes that differ), not on its way out
    others = [r for r in results if r.node.name != failure.node and r.state is not NodePhase.LOST]
    if not others or not all(had_finished(r) for r in others):
        return None
    own = next((r for r in results if r.node.name == failure.node), None)
    if not all(r.state is NodePhase.SUCCEEDED for r in others) and (
            own is None or failure.rank is None or failure.rank not in own.returned_ranks):
        return None  # peers stopped as the run ended: only a rank whose own script had returned died on its way out
    name = signal_name(failure.exit_code) or f"signal {-failure.exit_code}"
    rank = f" rank {failure.rank}" if failure.rank is not None else ""
    if name == "SIGTERM":  # sent by someone, not a crash
        return (f"{failure.node}{rank} was ended by SIGTERM after its peers finished: the job's work was done; a"
                " process sent it (the script itself, a library's own timeout, or another process in the node).")
    lines = [f"{failure.node}{rank} died by {name} after its peers finished: the job's work was done,"
             " and the worker process crashed while exiting."]
    # the crash dump places it in the script's own thread and code (an atexit handler's os.abort, a native call):
    # that, not gloo's threads, aborted it
    place = failure.crashed.split("; every thread's stack:")[0]  # (not the crash file's path, which may hold " in ")
    in_own_code = " in " in place and "thread, while" not in place
    if name == "SIGABRT" and not in_own_code:
        torch = f" (this image has torch {image_torch})" if image_torch else ""
        lines.append("  cause: gloo's worker threads release tensors during Python's interpreter shutdown"
                     " and abort (\"terminate called without an active exception\"); seen with every torch tried,"
                     f" 2.9 to 2.15{torch}.")
        if image_torch and image_torch != DEFAULT_TORCH:
            lines.append(f"  remedy: run on the default node image (torch {DEFAULT_TORCH}, which aborted least, with"
                         " its exit guard), or free the DDP model (del model; gc.collect()) before"
                         " destroy_process_group().")
        else:
            lines.append("  remedy: free the DDP model (del model; gc.collect()) before destroy_process_group(); the"
                         " node image's exit guard makes this rare (check that the run does not set"
                         " DDP_EXIT_GUARD=0).")
    elif in_own_code:
        lines.append("  it crashed in the script's own thread, where the crash dump says (above): look there, and at"
                     " the native extensions or atexit handlers it calls.")
    else:
        lines.append("  look for native extensions or atexit handlers that outlive destroy_process_group().")
    return "\n".join(lines)


# What a script that needs a GPU says on nodes without one, and what to do about it.
_NO_GPU_HINTS = (
    (("ProcessGroupNCCL is only supported with GPUs",),
     "these nodes have no GPU, and the script asks for NCCL: --nccl-as-gloo gives it gloo wherever it asks"
     " for nccl; what it puts on CUDA still needs a GPU"),
    (("Torch not compiled with CUDA enabled",),
     "the nodes' torch is built without CUDA, and the script puts tensors on CUDA: use an image whose torch"
     " has CUDA, or let the script pick its device by torch.cuda.is_available()"),
    (("Found no NVIDIA driver", "No CUDA GPUs are available"),
     "these nodes have no GPU, and the script puts tensors on CUDA: on a GPU host, run without --cpu (its"
     " GPUs are split among the nodes), or let the script pick its device by torch.cuda.is_available()"),
)


# A rank's place in the ranks' records of an aborted mismatch (``rank 1 was in all_reduce(gradients
# of DDP(Linear)) #13 at train.py:18``): whether it was in a DDP model's training step.
_IN_DDP_STEP = re.compile(r"\((?:gradients|buffers) of DDP\(")


# What the hints say in place of --debug-collectives to a run that had it (or TORCH_DISTRIBUTED_DEBUG=DETAIL by
# --env): torch's check let the calls by, so the option can do no more, and is not suggested again.
CHECK_HAD = "this run already had torch's check of every collective (--debug-collectives), which let them by"


def records_said(divergence: str) -> str:
    """Where a run that had torch's check finds what the ranks did: the line of their collective
    records above (``divergence``), or the records themselves."""
    if divergence:
        return "the line above, from the collective records the ranks wrote, says where each was"
    return f"each rank's last collectives are in its record, {DEBUG_SUBDIR}/rank<N>.json in the run's directory"


def mismatch_hint(failure: Optional[Failure], divergence: str = "", checked: bool = False) -> str:
    """For a rank gloo aborted because the ranks' collectives differ: how to find the first
    difference with both call sites ("" for any other failure). torch's check compares
    collectives, not a send and its receive, and the hint says so; to a run that had the check
    (``checked``), it says where the ranks' records are instead. Where the ranks' records
    (``divergence``: where each was) show some in a DDP model's training step and others in
    another call, that they took different numbers of steps (one more batch on rank 0 and a
    metric's all_reduce after the loop, say), not the general hint alone."""
    if failure is None or GLOO_MISMATCH not in failure.errors:
        return ""
    places = [place for place in divergence.split("; ") if place.startswith("rank ")]
    step_lines = {place.rsplit(" at ", 1)[-1] for place in places if _IN_DDP_STEP.search(place)}
    # the aborted rank's own place has no tensors: in a step where it is at a step's line
    in_step = [place.split(" ")[1] for place in places
               if _IN_DDP_STEP.search(place) or place.rsplit(" at ", 1)[-1] in step_lines]
    uneven = ""
    if in_step and len(in_step) < len(places):
        who = ranks_text(sorted(int(rank) for rank in in_step if rank.isdigit()))
        verb = "was" if len(in_step) == 1 else "were"
        uneven = (f"; here {who} {verb} in a DDP model's training step while the others made another collective:"
                  f" {UNEVEN_HINT}")
    sizes_differ = size_difference(failure.errors, places)
    gathered = re.search(r"\bin (all_gather|gather|all_gather_into_tensor) at ", failure.crashed)
    sizes = (f"; {gathered[1]} takes a tensor of one size from every rank: where ranks hold different counts"
             " (predictions, tokens), gather the sizes first and pad to the largest, or use all_gather_object"
             if gathered else "")
    check = (f"{CHECK_HAD}: it compares each collective's op and shapes, not sends and receives;"
             f" {records_said(divergence)}" if checked else
             "--debug-collectives makes torch stop at the first mismatched collective, naming both (it does not"
             " compare sends and receives)")
    return ("  hint: gloo received more data than expected: the ranks called different collectives, or one with"
            f" different sizes, or a receive is smaller than its send; {check}{sizes_differ}{sizes}{uneven}")


# gloo's size check, as it aborts the receiving rank: the bytes its peer sent, then those it expected.
_GLOO_SIZES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)\.")
# The aborted rank's own place in them: its rank and the op it aborted in.
_ABORTED_IN = re.compile(r"rank (\d+) aborted in (\w+) at ")
# A peer's place in the records of an aborted mismatch: its rank, op and what it moved.
_PEER_PLACE = re.compile(r"rank (\d+) was in (\w+)\((.*)\) #\d+(?: of group .+)? at \S+")
# The bytes an element of each dtype takes, as the records name them.
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}
# broadcast_object_list first broadcasts its objects' sizes, one int64 each: as many as the list holds.
OBJECT_SIZE_BYTES = 8


def size_difference(errors: str, places: list[str]) -> str:
    """Where gloo's abort says how many bytes came and how many the aborted rank expected, and
    one peer's record moved exactly what came (``places``: where each rank was): what differs,
    ``; here rank 1 sent int64[] (8 bytes) where rank 0 expected 4: ...`` (a dtype, a size, an
    object list's length); "" where the records do not say (the general hint is said alone)."""
    found = _GLOO_SIZES.search(errors)
    own = next((match for place in places if (match := _ABORTED_IN.match(place))), None)
    if found is None or own is None:
        return ""
    aborted = own[1]
    sent, expected = int(found[1]), int(found[2])
    # (a peer in another op made another collective: gloo paired the two all the same, and its bytes
    # tell nothing of a dtype)
    peers = [match for place in places if (match := _PEER_PLACE.fullmatch(place)) and match[2] == own[2]]
    for match in peers:
        rank, op, moved = match[1], match[2], ROOT_NAMED.sub("", match[3]).strip()
        objects = re.fullmatch(r"(\d+) objects?", moved)
        broadcaster = re.search(r"from rank (\d+)$", match[3])
        if (op == "broadcast_object_list" and objects and broadcaster is not None and broadcaster[1] == rank
                and sent == int(objects[1]) * OBJECT_SIZE_BYTES):  # (the root's list: another receiver's is no send)
            theirs = expected // OBJECT_SIZE_BYTES
            return (f"; here rank {rank} broadcast a list of {objects[1]} objects where rank {aborted} passed"
                    f" {theirs} slot{'' if theirs == 1 else 's'} (gloo's {sent} vs {expected} bytes are their"
                    " sizes, 8 bytes each): broadcast_object_list takes a list of the same length on every rank")
        tensor = re.fullmatch(r"(\w+)\[([\d,]*)\]", moved)
        if tensor is None or tensor[1] not in DTYPE_BYTES:
            continue
        count = 1
        for size in filter(None, tensor[2].split(",")):
            count *= int(size)
        if count == 0 or sent != count * DTYPE_BYTES[tensor[1]]:
            continue
        head = f"; here rank {rank} sent {moved} ({sent} bytes) where rank {aborted} expected {expected}"
        each = expected // count if expected % count == 0 else 0
        other_dtype = each in DTYPE_BYTES.values() and each != DTYPE_BYTES[tensor[1]]
        theirs = expected // DTYPE_BYTES[tensor[1]] if expected % DTYPE_BYTES[tensor[1]] == 0 else 0
        as_dtype = (f"{count} element{'' if count == 1 else 's'} of {each} bytes"
                    f" ({', '.join(name for name, size in DTYPE_BYTES.items() if size == each and 'complex' not in name)})")
        as_size = f"{theirs} element{'' if theirs == 1 else 's'} of {tensor[1]}"
        if other_dtype and theirs:
            return f"{head}, as {as_dtype} or {as_size}: a dtype or a size that differs"
        if other_dtype:
            return (f"{head}, as {as_dtype}: a dtype that differs, e.g. a tensor built from a Python int on one rank"
                    " (torch.tensor(0), or torch.tensor(sum([])) of an empty list, is int64) and from a float on"
                    " another (float32): give the tensor its dtype (dtype=torch.float32)")
        if theirs:
            return f"{head}, as {as_size}: a size that differs"
    return ""


# torch's own check of one call's arguments, on the rank that made it: ``ProcessGroupGloo::allgather:
# invalid output tensor list at index 0 (expected length 2, got 3)`` (not a difference gloo let by).
ARGUMENTS_REFUSED = re.compile(r"ProcessGroup\w+::\w+: invalid ")


def diverged_hint(failure: Optional[Failure], divergence: str, checked: bool = False) -> str:
    """For a failure whose ranks' records show the same collective made with other tensors, or
    other collectives made at the same place, where neither gloo nor torch's check stopped it
    (``divergence``: where they part): that gloo matches them anyway, and what finds the first
    ("" where gloo or the check caught it, or the records show nothing); to a run that had the
    check (``checked``), that it let them by, and where the records say they part."""
    if failure is None or not divergence:
        return ""
    if any(words in failure.errors for words in (GLOO_MISMATCH, *CHECKED_MISMATCH)):
        return ""  # caught, and said so
    if ARGUMENTS_REFUSED.search(failure.errors):
        return ("  hint: torch refused this call's own arguments on the rank that made it, before any data moved"
                " (a gather's or all_gather's output list holds one tensor per rank of its group, on every rank):"
                " the error says which")
    finished = " (the ranks that finished did so on such data)" if failure.peers_finished else ""
    check = (f"{CHECK_HAD}; {records_said(divergence)}" if checked
             else "--debug-collectives makes torch stop at the first mismatched collective, naming both")
    return ("  hint: the ranks made this collective with different tensors, or different collectives: gloo checks"
            f" neither, so it may hand a rank wrong data with no error, and a rank fails only later{finished}; {check}")


def lost_peer_lines(failure: Optional[Failure], stopped_where: dict[int, str], node_addresses: dict[str, str],
                    results: Sequence[NodeResult]) -> list[str]:
    """For a failure whose error names the peer it lost by its address, on a node whose ranks
    failed of nothing of their own (the failure is the run's first, with nothing earlier said):
    where each of that node's ranks was when torchrun ended it (``stopped_where``, by rank), as
    a rank that left the group early (``destroy_process_group``, then other work) is found."""
    if failure is None or failure.peers_finished or failure.earlier is not None:
        return []
    lost = [node for node in peer_nodes(failure.errors, node_addresses) if node != failure.node]
    return [f"  the peer it lost: rank {rank} ({result.node.name}) was in {stopped_where[rank]} when torchrun ended it"
            for result in results if result.node.name in lost
            for rank in result.node.global_ranks if rank in stopped_where]


def absent_from_barrier_lines(failure: Optional[Failure], stopped_where: dict[int, str]) -> list[str]:
    """For a monitored barrier that failed naming the ranks that did not reach it, those still in
    their scripts: where each was when torchrun ended it (``stopped_where``, by rank); none for
    any other failure, or where the named ranks had finished their scripts (the failure says so)."""
    if failure is None or failure.peers_finished:
        return []
    return [f"  rank {rank} did not pass the barrier in time: it was in {stopped_where[rank]} when torchrun ended it"
            for rank in absent_from_barrier(failure.exception) if rank in stopped_where]


# A frame of torch.load in a traceback: a rank read a checkpoint.
_TORCH_LOAD_FRAME = re.compile(r'torch/serialization\.py", line \d+, in _?load\b')


# A full disk's error as the system gives it: OSError: [Errno 28] No space left on device
_NO_SPACE = re.compile(r"No space left on device|\bENOSPC\b|\[Errno 28\]", re.IGNORECASE)


def met_a_full_disk(error: AttemptError) -> bool:
    """Whether an attempt's error is a full disk's: ENOSPC, in its error or its traceback's last
    lines (torch.save's own error, with the ENOSPC its context)."""
    return any(_NO_SPACE.search(text) for text in (error.exception, *error.last_lines))


def repeated_error_line(failure: Optional[Failure], results: list[NodeResult],
                        notes: Sequence[tuple[str, str]] = ()) -> str:
    """Where torchrun restarted the failing node's workers and the same error of their own ended
    two attempts or more (the newest such error): which attempts, and that a restart does not get
    past it, or that the full disk blamed for the node's end still held, where the error is the
    full disk's own ENOSPC (:func:`met_a_full_disk`; another fault held, a slow, is no cause of a
    script's own error), or where the full disk's notes (``notes``: each fault's spec and what it
    did) say a write failed on it ("" otherwise)."""
    node = next((r for r in results if failure is not None and r.node.name == failure.node), None)
    own = [e for e in node.attempts if e.own] if node is not None else []
    same = [e.attempt for e in own if e.exception == own[-1].exception] if own else []
    if len(same) < 2:
        return ""
    which = ", ".join(str(a) for a in same[:-1]) + f" and {same[-1]}"
    full_disk = node.fault.startswith(f"{FaultAction.DISK_FULL.value}:") and (
        met_a_full_disk(own[-1]) or any(spec == node.fault and _NO_SPACE.search(detail) for spec, detail in notes))
    why = ("a restart runs the same script on the same files again, and does not get past an error of its own"
           if not full_disk else f"injected fault {node.fault} still held, and each attempt met it again")
    return f"  the same error ended attempts {which} of {failure.node}'s workers: {brief(own[-1].exception)}; {why}"


def torn_save_hint(failure: Optional[Failure], torn: list[tuple[str, str]]) -> str:
    """For a rank that failed reading a file after a torn write cut one (``torn``: each such
    fault's spec and the work-directory file it cut): that a save straight onto the file a job
    resumes from leaves nothing whole to resume from, and how to save so that it does ("" for any
    other failure, or where no torn write cut a file). Told by torch.load's frames in the
    failing worker's traceback, or the cut file's name in its error (not in what it printed: the
    node the torn write killed may have said it was saving that file)."""
    if failure is None or not torn:
        return ""
    errors = "\n".join([failure.exception, failure.traceback, *(failure.earlier.last_lines if failure.earlier else ())])
    named = [(spec, path) for spec, path in torn if posixpath.basename(path) in errors]
    if not named and not _TORCH_LOAD_FRAME.search("\n".join([errors, *failure.last_lines])):
        return ""
    spec, path = (named or torn)[-1]
    return (f"  hint: {spec} cut {path} short, and a rank then failed reading a file: a save straight onto the file"
            " a job resumes from leaves no whole checkpoint when a crash cuts it; save to a temporary file beside it,"
            " then os.replace() it onto the name (a rename is atomic), so that the last whole one survives")


def made_alone_hint(failure: Optional[Failure]) -> str:
    """For a rank that lost its peers in a call that is a collective without looking like one (a
    DDP model's forward pass, broadcasting its buffers; an FSDP model's, gathering its parameters;
    a checkpoint's save or load) because they had finished their scripts: that the call is a
    collective, which a rank makes alone in an evaluation, a save or a step the others do not
    take. Told by the collective the rank's record says failed, or by the frames of its traceback
    ("" for any other failure: a fault's, a rank's own error, a lost rendezvous store's, a
    timeout, which the hang diagnosis reads from the ranks' records)."""
    if failure is None or not failure.peers_finished:
        return ""
    text = "\n".join([failure.traceback, *failure.last_lines])
    for marker, frames, hint in COLLECTIVES_MADE_ALONE:
        if f"({marker}" in failure.collective or any(all(word in text for word in frame) for frame in frames):
            return f"  hint: {hint}"
    return ""


def uneven_hint(failure: Optional[Failure]) -> str:
    """For a rank that lost its peers in a DDP model's training step (its backward pass, by its
    record) because they had finished their scripts: that every rank must take as many steps (""
    for any other failure, a lost rendezvous store's too)."""
    if failure is None or not failure.peers_finished or not failure.training_pass:
        return ""
    return f"  hint: {UNEVEN_HINT}"


# Python's words for an import that found nothing, with the module's dotted name.
_MISSING_MODULE = re.compile(r"\bModuleNotFoundError: No module named '(?P<module>[^']+)'")


def missing_module_hint(failure: Optional[Failure]) -> str:
    """For a rank that could not import a module: the two places the nodes look for it, the
    node image and the work directory, and how to put it in either ("" for any other failure).
    A module the host has is not in the nodes unless one of them holds it. Where the module is
    the work directory's package that holds the script itself (``mytrain/train.py`` importing
    ``mytrain.helpers``), it is there: Python puts the script's own directory first on its import
    path, not the work directory, and the script runs as a module of its package instead."""
    match = _MISSING_MODULE.search(failure.errors_raised_from) if failure is not None else None
    if match is None:
        return ""
    assert failure is not None
    top = match.group("module").split(".")[0]
    script = script_in_workdir(failure)
    package, _, _ = script.partition("/")
    # (Python names the package alone where the script's directory, not the work directory, is on the path: a
    # job run as -m mytrain.train that misses mytrain.helpers is told the general hint)
    if script.endswith(".py") and "/" in script and package == top == match.group("module"):
        dotted = script[:-len(".py")].replace("/", ".")
        return (f"  hint: '{top}' is your work directory's own package, but {script} runs with its own directory"
                f" ({WORKSPACE_DIR}/{script.rpartition('/')[0]}) first on its import path, not {WORKSPACE_DIR}: run it"
                f" as a module of its package, -- -m {dotted}")
    return (f"  hint: the nodes have no module '{match.group('module')}': a package (at the version your script"
            " needs) goes into the node image by --requirements FILE (pip requirements) or a --dockerfile; a module"
            " of your own must be importable from --workdir, which every node mounts as /workspace")


# A traceback's frame in a file of the work directory, as the nodes mount it.
_WORKDIR_FRAME = re.compile(r'File "' + re.escape(WORKSPACE_DIR) + r'/(?P<file>[^"]+)", line \d+')


def script_in_workdir(failure: Failure) -> str:
    """The script the failing rank ran, as its work directory holds it (``mytrain/train.py``): the
    outermost frame of its traceback in the work directory; "" where none is there."""
    for line in [*failure.traceback.splitlines(), *failure.last_lines]:
        if frame := _WORKDIR_FRAME.search(line):
            return frame.group("file")
    return ""


def nodes_of_ranks(results: list[NodeResult]) -> dict[int, str]:
    """Each planned rank's node (an elastic run's ranks are numbered at rendezvous: none)."""
    return {rank: result.node.name for result in results for rank in result.node.global_ranks}


# Python's words for a file that is not there (open, torch.load, os.listdir), with its path as the
# script named it (relative too).
_NO_SUCH_PATH = re.compile(r"No such file or directory: '(?P<path>[^']+)'")


def node_local_file_hint(failure: Optional[Failure], results: list[NodeResult],
                         written_locally: dict[str, tuple[int, ...]]) -> str:
    """For a rank that could not find a file (or a directory) that ranks of other nodes wrote on
    their own disks (``written_locally``: each file with its writers): that each node has its
    own, and where a file for every node goes ("" for any other failure, or where a rank of the
    failing node wrote it too)."""
    match = _NO_SUCH_PATH.search(failure.errors_raised_from) if failure is not None else None
    if match is None or not match.group("path").startswith("/"):  # a node's own disk: absolute paths
        return ""
    missing = match.group("path").rstrip("/")
    found = {path: ranks for path, ranks in written_locally.items()
             if path == missing or path.startswith(missing + "/")}
    node_of = nodes_of_ranks(results)
    writers = sorted({rank for ranks in found.values() for rank in ranks})
    if not writers or any(node_of.get(rank) == failure.node for rank in writers):
        return ""
    nodes = sorted({node_of.get(rank, "another node") for rank in writers})
    who = ", ".join(f"{rank} ({node_of.get(rank, '?')})" for rank in writers)
    what = missing if missing in found else f"{len(found)} file{'' if len(found) == 1 else 's'} under {missing}"
    disks = f"{nodes[0]}'s own disk" if len(nodes) == 1 else "their nodes' own disks"
    top = "/" + missing.split("/")[1]
    return (f"  hint: {'rank' if len(writers) == 1 else 'ranks'} {who} wrote {what} on {disks}, and {failure.node}"
            f" has its own {top}: as on a cluster, each node's disk is its own, and only {WORKSPACE_DIR} (the work"
            f" directory) and {SHARED_DIR} are on every node; write it there, or make it on every node (where"
            " LOCAL_RANK is 0) before its ranks read it")


def read_too_early_hint(failure: Optional[Failure], results: list[NodeResult],
                        written_shared: dict[str, tuple[int, ...]]) -> str:
    """For a rank that could not find a file (or a directory) in the directories every node shares
    that other ranks wrote (``written_shared``: each file, relative to the work directory, with its
    writers): it looked before they wrote it, and a barrier between the write and the reads is
    what makes them wait for it ("" for any other failure, or where the failing rank wrote it)."""
    match = _NO_SUCH_PATH.search(failure.errors_raised_from) if failure is not None else None
    if match is None or failure is None:
        return ""
    named = match.group("path").rstrip("/")
    normal = posixpath.normpath(named) if named else ""
    missing = normal[len(WORKSPACE_DIR) + 1:] if normal.startswith(WORKSPACE_DIR + "/") else normal
    if missing in ("", ".", "/") or missing.startswith("../"):
        return ""
    found = [path for path in written_shared if path == missing or path.startswith(missing + "/")]
    writers = sorted({rank for path in found for rank in written_shared[path]})
    if not writers or failure.rank in writers:
        return ""
    node_of = nodes_of_ranks(results)
    who = ", ".join(f"{rank} ({node_of[rank]})" if rank in node_of else str(rank) for rank in writers)
    what = named if missing in found else f"{len(found)} file{'' if len(found) == 1 else 's'} under {named}"
    return (f"  hint: {'rank' if len(writers) == 1 else 'ranks'} {who} wrote {what}, on the storage every node"
            f" shares, and rank {failure.rank} looked for it before it was there: a file that one rank writes for"
            " the others to read needs a dist.barrier() after the write and before the reads, called by every rank")


# How many files of other nodes' own disks a hung rank's hint names, at most.
LOCAL_FILES_SHOWN = 3


def local_files_while_hung(hang: Optional[HangDiagnosis], results: list[NodeResult],
                           written_locally: dict[str, tuple[int, ...]]) -> str:
    """For a hung job whose ranks of one node wait outside any collective (idle: a loop that
    sleeps, polling for a file), or a job that looked at work where they spun on the CPU outside
    any collective while others waited in one (a loop that polls without sleeping): the files
    that ranks of other nodes wrote on their own disks and none of that node's ranks did, which
    that node cannot see ("" where there are none)."""
    if hang is None:
        return ""
    node_of = nodes_of_ranks(results)
    if hang.hung:
        idle = sorted(a.rank for a in hang.activities if a.state == "idle" and a.rank in node_of)
    elif any(a.state == "collective" for a in hang.activities):  # the others wait for the spinning ones
        idle = sorted(a.rank for a in hang.activities if a.state == "busy" and a.detail.startswith("computing (")
                      and a.rank in node_of)
    else:
        return ""
    for node in dict.fromkeys(node_of[rank] for rank in idle):
        others = {path: ranks for path, ranks in written_locally.items()
                  if ranks and all(node_of.get(rank) not in (None, node) for rank in ranks)}
        if not others:
            continue
        files = [f"{path} ({ranks_text(ranks)} on {', '.join(sorted({node_of[r] for r in ranks}))})"
                 for path, ranks in list(others.items())[-LOCAL_FILES_SHOWN:]]
        more = len(others) - len(files)
        ranks = [rank for rank in idle if node_of[rank] == node]
        waiting, verb = ranks_text(ranks), "waits" if len(ranks) == 1 else "wait"
        return (f"  hint: {waiting} ({node}) {verb} outside any collective, and ranks of other nodes wrote files on"
                f" their own disks that {node} cannot see: {'; '.join(files)}" + (f"; and {more} more" if more else "")
                + f"; if {waiting} {verb} for one, write it under {WORKSPACE_DIR} or {SHARED_DIR}, which every node"
                " has, or make it on every node (where LOCAL_RANK is 0)")
    return ""


def device_ordinal_hint(failure: Optional[Failure], results: list[NodeResult]) -> str:
    """For a rank that asked for a GPU its node does not have (``invalid device ordinal``): a
    device picked by the global rank, where the local one would do (each node numbers its GPUs
    from 0), or a node with more ranks than GPUs ("" for any other failure, a rank not known, or
    a node without GPUs: :func:`no_gpu_hint`'s)."""
    if failure is None or failure.rank is None or "invalid device ordinal" not in failure.errors:
        return ""
    node = next((r.node for r in results if r.node.name == failure.node), None)
    if node is None or not node.gpu_ids or failure.rank not in node.global_ranks:
        return ""
    count, local = len(node.gpu_ids), node.global_ranks.index(failure.rank)
    devices = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
    has = f"{node.name} has {count} GPU{'' if count == 1 else 's'} ({devices})"
    if local >= count:
        return (f"  hint: {has} for its {len(node.global_ranks)} ranks, and rank {failure.rank} (local rank {local})"
                " asked for another: pick the GPU as LOCAL_RANK % torch.cuda.device_count()")
    return (f"  hint: {has}, and rank {failure.rank} (local rank {local}) asked for another: pick the GPU by"
            " LOCAL_RANK (torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))), not RANK; each node numbers its"
            " own GPUs from 0, so a script that ran on one machine fails on the other nodes")


# How torch.compile says it found no compiler: inductor's C++ kernels (CPU), Triton's launchers (GPU).
_NO_COMPILER = ("No working C++ compiler found", "Failed to find C compiler", "Python.h: No such file or directory")


def compiler_hint(failure: Optional[Failure]) -> str:
    """For a rank whose torch.compile found no C or C++ compiler in its node: where one comes
    from ("" for any other failure). The default node image has one; an image of the user's may not."""
    if failure is None or not any(words in failure.errors for words in _NO_COMPILER):
        return ""
    return ("  hint: torch.compile builds a compiled model's kernels with a C++ compiler in the nodes: the default"
            " node image has g++ and Python's headers; an --image or --dockerfile of your own needs them too"
            " (apt-get install g++ python3-dev), or set CXX and CC to the compilers it has")


# Python's words for an input() that met the end of its standard input.
_INPUT_AT_EOF = "EOFError: EOF when reading a line"


def no_terminal_hint(failure: Optional[Failure]) -> str:
    """For a rank whose ``input()`` met the end of its standard input: a torchrun worker has no
    terminal to answer it ("" for any other failure)."""
    if failure is None or _INPUT_AT_EOF not in failure.errors_raised_from:  # (not one the script handled)
        return ""
    return ("  hint: a torchrun worker has no terminal: its standard input is empty, so input() meets its end at once;"
            " give the answer as an argument of the script, in the environment (--env NAME=VALUE), or in a file in the"
            " work directory (and for pdb at a breakpoint(), see `python -m orchestrate debug`)")


# gloo's words for a GLOO_SOCKET_IFNAME the host does not have; NCCL's for an NCCL_SOCKET_IFNAME.
_NO_SUCH_INTERFACE = re.compile(r"Unable to find address for: (?P<name>\S+)|no socket interface found")


def interface_hint(failure: Optional[Failure]) -> str:
    """For a worker that could not find the network interface GLOO_SOCKET_IFNAME or
    NCCL_SOCKET_IFNAME names (a cluster's, carried in by ``--env`` or ``--env-file``): the
    interface the nodes have ("" for any other failure)."""
    match = _NO_SUCH_INTERFACE.search(failure.errors) if failure is not None else None
    if match is None or match["name"] == NODE_INTERFACE:  # (its own gone: a fault's doing, not a name)
        return ""
    named = f" ({match['name']})" if match["name"] else ""
    return (f"  hint: the nodes have no network interface by the name GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME"
            f" gives{named}: each node has {NODE_INTERFACE}, its link to the run's network, and lo, and the launcher"
            f" sets both to {NODE_INTERFACE} itself; leave a cluster's interface names (ib0, bond0) out of --env and"
            " --env-file here")


def no_gpu_hint(failure: Optional[Failure], results: list[NodeResult]) -> str:
    """For a failure of a script that needs a GPU, on a node that has none: what to do ("" for
    any other failure)."""
    if failure is None or not failure.exception:
        return ""
    node = next((r.node for r in results if r.node.name == failure.node), None)
    if node is None or node.gpu_ids:
        return ""
    return next((f"  hint: {hint}" for words, hint in _NO_GPU_HINTS
                 if any(said in failure.errors for said in words)), "")


# DDP's reducer, when the step before left parameters without a gradient. torch names them
# under TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL, and otherwise gives their indices only.
_UNUSED_PARAMETERS = "Expected to have finished reduction in the prior iteration"
_UNUSED_NAMES = re.compile(r"Parameters which did not receive grad for rank (?P<rank>\d+): (?P<names>\S.*?)\s*$")
_UNUSED_INDICES = re.compile(r"Parameter indices which did not receive grad for rank (?P<rank>\d+):"
                             r" (?P<indices>\d[\d ]*?)\s*$")


def unused_parameters_hint(failure: Optional[Failure]) -> str:
    """For DDP's error on a model whose loss left parameters out in a step: which ones (by name
    where torch gave them, else by their place in ``model.parameters()``) and the two ways out
    ("" for any other failure)."""
    if failure is None or _UNUSED_PARAMETERS not in failure.errors:
        return ""
    lines = [*failure.traceback.splitlines(), *failure.last_lines]
    names = next((m for m in map(_UNUSED_NAMES.search, lines) if m), None)
    indices = next((m for m in map(_UNUSED_INDICES.search, lines) if m), None)
    if names is not None:
        which = f" {names['names']} (rank {names['rank']})"
    elif indices is not None:
        which = (f" the parameters at {', '.join(indices['indices'].split())} of model.parameters()"
                 f" (rank {indices['rank']})")
    else:
        which = " some parameters"
    named = "" if names is not None else "; --env TORCH_DISTRIBUTED_DEBUG=INFO makes torch name them"
    return (f"  hint: DDP got no gradient for{which} in a step: a model whose loss leaves parameters out on some"
            " steps needs DistributedDataParallel(model, find_unused_parameters=True), which searches the graph"
            f" every step, or a loss that uses every output of the forward{named}")


# argparse's words for a script that requires torch.distributed.launch's --local_rank (or --local-rank).
_LOCAL_RANK_REQUIRED = re.compile(r"the following arguments are required: .*(?P<flag>--local[_-]rank)\b")


def local_rank_argument_hint(failure: Optional[Failure]) -> str:
    """For a script that refused to start for want of a ``--local_rank`` argument: torchrun gives
    the local rank in the environment ("" for any other failure)."""
    found = None if failure is None or failure.exit_code != REFUSED_EXIT_CODE else next(
        (m for m in map(_LOCAL_RANK_REQUIRED.search, failure.last_lines[-3:]) if m), None)
    if found is None:
        return ""
    return (f"  hint: the script requires {found['flag']}, which torch.distributed.launch passed on the command line;"
            " torchrun, which starts every node's workers, passes it in the environment as LOCAL_RANK: read"
            " int(os.environ[\"LOCAL_RANK\"]), or drop required=True and give the argument"
            " default=int(os.environ.get(\"LOCAL_RANK\", 0))")


# torch's load_state_dict, for keys that do not match: DDP's wrapper names its model's keys "module.<key>".
_STATE_DICT_ERROR = "Error(s) in loading state_dict"
_KEYS = re.compile(r'(?P<which>Unexpected|Missing) key\(s\) in state_dict: (?P<keys>".*)$')
DDP_PREFIX = "module."


def state_dict_keys(lines: list[str], which: str) -> set[str]:
    """The keys torch's error lists as ``which`` ("Missing", "Unexpected") in ``lines``."""
    found = next((m for m in map(_KEYS.search, lines) if m and m["which"] == which), None)
    return set(re.findall(r'"([^"]+)"', found["keys"])) if found else set()


def ddp_prefix_hint(failure: Optional[Failure]) -> str:
    """For a ``load_state_dict`` whose keys differ by DDP's ``module.`` prefix: which side has
    it, and how to save or load without it; "" for any other failure, and where both sides or
    neither have it, or taking it off matches no key."""
    if failure is None or _STATE_DICT_ERROR not in failure.errors:
        return ""
    lines = [*failure.traceback.splitlines(), *failure.last_lines]
    missing, unexpected = state_dict_keys(lines, "Missing"), state_dict_keys(lines, "Unexpected")

    def bare(keys: set[str]) -> set[str]:
        return {k[len(DDP_PREFIX):] for k in keys if k.startswith(DDP_PREFIX)}

    saved_wrapped = bool(bare(unexpected) & missing) and not bare(missing)
    loaded_wrapped = bool(bare(missing) & unexpected) and not bare(unexpected)
    if not saved_wrapped and not loaded_wrapped:
        return ""
    if saved_wrapped:
        return ("  hint: the checkpoint's keys begin with module.: it was saved from the DDP wrapper"
                " (model.state_dict() of a DistributedDataParallel), and is loaded into the model without it; save"
                " model.module.state_dict(), so that a checkpoint loads with or without DDP")
    return ("  hint: the model's keys begin with module.: the state is loaded into the DDP wrapper, and the checkpoint"
            " was saved without it; load into model.module (model.module.load_state_dict(...)), and save"
            " model.module.state_dict() too")

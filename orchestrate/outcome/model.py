"""How a run ended, as data: every node's result, the recoveries, the timings, and the run's result."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from orchestrate.hangs.diagnosis import HangDiagnosis
from orchestrate.hangs.init_calls import UNDER_TORCHRUN, apart_facts
from orchestrate.hangs.snapshots import InitCall
from orchestrate.outcome.judge import Failure, find_failure
from orchestrate.outcome.node_result import NodeResult
from orchestrate.outcome.preemption import RankAfterSigterm
from orchestrate.outcome.root_cause import wrapping_links
from orchestrate.outcome.states import NodePhase
from orchestrate.text import counted, readable_node_line


class Lines(list):
    """A rank's lines: a list of them, whose ``in`` finds a piece of text anywhere in them, as
    ``in`` does on :attr:`RunResult.output` (``"ACCEPT OK" in result.rank_output(0)`` is true
    when rank 0 printed a line with it, and ``"Traceback" not in ...`` can fail). ``str()``
    gives the text, one line each."""

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return any(item in line for line in self)
        return super().__contains__(item)

    def __str__(self) -> str:
        return "".join(f"{line}\n" for line in self)


# The cause of a node's death where no fault was injected into it, said after the node's name.
DEATH = "its death"


def named_cause(node: str, cause: str) -> str:
    """A recovery's cause, said apart from its own line: a death with no fault injected names its
    node ("node1's death"), where "its death" would read as another node's."""
    return f"{node}'s death" if cause == DEATH else cause


# The key under which an event's step, or a record's, names the recovery after which its attempt
# counted its steps from 1 again.
ANEW_KEY = "step_counted_anew_after"


def anew_fields(after: Optional[Recovery]) -> dict[str, dict[str, str]]:
    """What an event (``events.jsonl``: a fault, a restart) adds to its ``step`` where that step
    was counted in an attempt whose steps began at 1 again: the recovery that attempt followed, as
    ``outcome.json`` names it (its node and cause; no index, not known yet); nothing elsewhere."""
    return {} if after is None else {ANEW_KEY: {"node": after.node, "cause": after.cause}}


def anew_step_words(step: object, after: Optional[dict]) -> str:
    """A step an event recorded, as the report says it: with the count it is in where that
    attempt counted its steps from 1 again (``after``: the event's ``step_counted_anew_after``),
    in the summary's words."""
    if not after:
        return f"step {step}"
    return f"step {step}{attempt_after(named_cause(str(after.get('node')), str(after.get('cause'))))}"


def attempt_after(cause: str) -> str:
    """Whose count a step counted from 1 again is in: the attempt after ``cause``'s recovery."""
    return f" of the attempt after {cause}, counted from 1 again"


def anew_note(after: Optional[Recovery]) -> str:
    """What a step counted in an attempt whose steps began at 1 again is (``after``: the recovery
    that attempt followed; None where the steps go on from where the job resumed)."""
    if after is None:
        return ""
    return (f"{attempt_after(after.named_cause)}: no rank said where it resumed (an optimizer without a step"
            " count, or a script that started over)")


# The file of a DCP checkpoint directory that DCP reads it by, written once every rank has written its own
DCP_METADATA = ".metadata"


@dataclass
class Recovery:
    """One node that died and rejoined an elastic job, or that was lost for good and left the
    job to go on without it.

    Attributes:
        node: The node.
        cause: What happened to it (the injected fault, or its exit).
        failed_at: Monotonic time the failure was detected.
        step_before: The highest training step the workers reported before the failure (as
            exact as their progress lines are frequent).
        resumed_from: The step the workers resumed from (from "resumed from ... step N").
        resumed_at: Monotonic time of the first training step after the resume.
        lost: The node was lost for good (a ``lose`` fault): the nodes left went on without it.
        counted_anew: Where ``step_before`` was counted in an attempt whose steps began at 1
            again (no rank said where it resumed: an optimizer without a step count, or a script
            that started over), the recovery that attempt followed.
    """

    node: str
    cause: str
    failed_at: float
    step_before: Optional[int] = None
    resumed_from: Optional[int] = None
    resumed_at: Optional[float] = None
    lost: bool = False
    counted_anew: Optional[Recovery] = field(default=None, compare=False, repr=False)

    @property
    def named_cause(self) -> str:
        """Its cause, said apart from its own line: a death with no fault injected names its node
        ("node1's death"), where "its death" would read as another node's."""
        return named_cause(self.node, self.cause)

    @property
    def recovery_s(self) -> Optional[float]:
        return None if self.resumed_at is None else self.resumed_at - self.failed_at

    @property
    def steps_lost(self) -> Optional[int]:
        if self.step_before is None or self.resumed_from is None:
            return None
        return max(0, self.step_before - self.resumed_from)

    def failed_before_step(self, job_succeeded: bool) -> bool:
        """Whether the node rejoined but the job failed before its next step (``job_succeeded``:
        how the job ended): no recovery, as a rejoin whose workers failed reading a torn save."""
        return not self.lost and self.resumed_at is None and not job_succeeded

    def describe(self, job_succeeded: bool = True) -> str:
        """One line; what is not known (no steps reported, no resume yet) is left out. A lost node
        the job was not seen to train on without (no step after it) is said lost, not gone on from;
        a node that rejoined, after which the job failed before a step (``job_succeeded``: how the
        job ended), is said so, not "rejoined" alone, as if it had recovered."""
        if self.lost:
            parts = [f"the job went on without {self.node} after {self.cause}" if self.resumed_at is not None
                     else f"{self.node} was lost for good after {self.cause}"]
        else:
            but = ", but the job failed before its next step" if self.failed_before_step(job_succeeded) else ""
            parts = [f"{self.node} rejoined after {self.cause}{but}"]
        if self.recovery_s is not None:
            parts.append(f"recovery (failure detected to first step after resume) {self.recovery_s:.1f} s")
        if self.steps_lost is not None:
            parts.append(f"steps lost {self.steps_lost} (last step {self.step_before}, resumed from"
                         f" {self.resumed_from})")
        elif self.step_before is not None:
            parts.append(f"last step before it {self.step_before}{anew_note(self.counted_anew)}")
        return "; ".join([": ".join(parts[:2])] + parts[2:]) if len(parts) > 1 else parts[0]


@dataclass(frozen=True)
class WrittenFile:
    """A file the job created or changed in its work directory: its path there, the epoch time
    it was first seen written (its modification time then), and whether it was still there at
    the last look (False: gone by then, as a temporary file renamed onto a save is)."""

    path: str
    time: float
    kept: bool = True


@dataclass
class Timings:
    """Seconds spent in each phase of a run. ``rendezvous_s`` is more than torchrun's rendezvous:
    from the first node's start to the first line any worker printed (the workers' start, their
    ``import torch``, and the script up to its first output too); the summary says "until first
    output"."""

    bring_up_s: Optional[float] = None
    rendezvous_s: Optional[float] = None
    job_s: float = 0.0
    teardown_s: Optional[float] = None
    recoveries: list[Recovery] = field(default_factory=list)
    # A death an elastic job would have recovered from, with no restart left (its --max-restarts
    # all used): said, as a recovery that did not come ("" where none).
    unrecovered: str = ""


@dataclass(frozen=True)
class FaultRecord:
    """A fault that was asked for: when it fired (``elapsed_s`` into the job, at training
    ``step``, None when no worker had reported one) on which ``node`` (a rank fault's is where
    its rank ran), or why it did not (``reason``); when a fault with an end was undone
    (``ended_s``); the epoch time it fired (``fired_time``: the progress records' clock); what it
    did where that is more than its spec says (``detail``: the file a torn write cut, and where);
    the epoch time a fault that strikes later than it fired struck (``struck_time``: a torn
    write is armed when it fires, and strikes at the write it cuts, when its node is killed), and
    the work-directory file it cut (``struck_file``: a save cut short is no save);
    whether it fell before the job's first step, which the workers reported only later
    (``before_first_step``: a fault timed into the start-up, which tested no training); where
    ``step`` was counted in an attempt whose steps began at 1 again (an elastic job's attempt none
    of whose ranks said where it resumed: an optimizer without a step count, or a script that
    started over), the recovery that attempt followed (``counted_anew``);
    whether a fault with an end still held when the run was stopped, its end not come
    (``held_at_stop``: an interrupt, ``stop RUN`` or the time limit came first)."""

    spec: str
    node: str
    fired: bool = True
    elapsed_s: Optional[float] = None
    step: Optional[int] = None
    reason: str = ""
    ended_s: Optional[float] = None
    fired_time: Optional[float] = None
    detail: str = ""
    before_first_step: bool = False
    struck_time: Optional[float] = None
    struck_file: str = ""
    counted_anew: Optional[Recovery] = field(default=None, compare=False)
    held_at_stop: bool = False

    @property
    def fired_at_s(self) -> Optional[float]:
        return self.elapsed_s if self.fired else None

    @property
    def fired_at_step(self) -> Optional[int]:
        return self.step if self.fired else None

    @property
    def struck_s(self) -> Optional[float]:
        """Seconds into the job it struck, where that was later than it fired (a torn write's cut)."""
        if self.struck_time is None or self.fired_time is None or self.elapsed_s is None:
            return None
        return self.elapsed_s + max(0.0, self.struck_time - self.fired_time)

    def describe(self) -> str:
        if not self.fired:
            return f"{self.spec} did not fire: {self.reason}"
        when = [] if self.elapsed_s is None else [f"{self.elapsed_s:.1f} s into the job"]
        at = ([f"at step {self.step}{anew_note(self.counted_anew)}"] if self.step is not None
              else ["before its first step"] if self.before_first_step else [])
        on = [f"on {self.node}"] if self.node and f":{self.node}" not in self.spec else []
        ended = self.ended_s is not None and self.elapsed_s is not None
        held = f", held {(self.ended_s or 0.0) - (self.elapsed_s or 0.0):.1f} s" if ended else ""
        until = ([f"until {self.ended_s:.1f} s{held}"] if self.ended_s is not None
                 else ["still held when the run was stopped"] if self.held_at_stop else [])
        said = ", ".join(when + at + on + until)
        did = f": {self.detail}" if self.detail else ""
        return f"{self.spec}{f' ({said})' if said else ''}{did}"


def marked_before_first_step(records: list[FaultRecord], max_step: Optional[int],
                             first_step_time: Optional[float] = None) -> list[FaultRecord]:
    """The records, those that fired before any worker reported a step marked
    ``before_first_step`` where the workers reported steps later (``max_step``: the highest the
    job reached; None: it reported none, and nothing is known of its steps). A step the workers
    took before a fault fired, though read only after it (``first_step_time``: the epoch time of
    the job's first step, as its record says; a worker's record may come a step late), is before
    it: that fault did not fall before the first step."""
    if max_step is None:
        return records

    def before(record: FaultRecord) -> bool:
        if not record.fired or record.step is not None or record.elapsed_s is None:
            return False
        return first_step_time is None or record.fired_time is None or record.fired_time < first_step_time
    return [replace(r, before_first_step=True) if before(r) else r for r in records]


@dataclass
class SlurmJob:
    """A Slurm job as Slurm reported it: ``scontrol show job`` and ``show node``.

    Attributes:
        job_id: The job's id (empty when it was never submitted).
        job: Its record (``JobState``, ``Reason``, ``ExitCode``, ``NodeList``, ``RunTime``, ...).
        nodes: Each node's record (``State``, ``Reason``), by node name.
        workers_collateral: The workers' first error is a peer's closed connection: a
            consequence of what Slurm reported, not a cause.
        ended_on: After an interrupt, the signal that ended the job's tasks: ``SIGTERM`` (they
            ended within the stop grace) or ``SIGKILL``; "" when unknown.
        restarts_in_place: How many times torchrun restarted each node's workers in place
            within the job's tasks, for the nodes where it did (its logs are in the run's
            directory, as a Compose run's are).
    """

    job_id: str = ""
    job: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    workers_collateral: bool = False
    ended_on: str = ""
    restarts_in_place: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return self.job.get("JobState", "")


@dataclass
class RunResult:
    """The result of a whole run: what the library returns and the CLI prints.

    Attributes:
        run_id: The run.
        run_dir: Its directory of records (logs, events, outcome.json, report.html).
        results: Every node's result, in node-rank order.
        timings: Seconds spent in each phase, and the recoveries.
        faults: Every fault asked for, in the order they fired, then those that did not.
        interrupted: A signal stopped the run (``signal_number``).
        stopped_by: Who sent it, where that was not the launcher's own terminal (``stop RUN``).
        stop_look: Where the ranks were at the look ``stop RUN`` took before it stopped a quiet
            job, its lines (the headline first), where the watchdog had found nothing itself.
        stop_look_hung: Whether that look found the job hung (else quiet and working).
        limited_by: Why the job's time limit was shorter than the run's own ``timeout`` (a test's
            own time limit), where that limit ended it ("" otherwise): the job was not judged.
        error: Why the environment failed the run (bring-up, the engine), if it did.
        error_exit_code: The exit code of that error.
        teardown_error: What was left behind, if the teardown failed.
        image_torch: The torch version of the nodes' image.
        conditions: The link and node sizes the run was given
            (:func:`~orchestrate.text.node_conditions`); "" where none was.
        slurm: The Slurm job, for a run under ``--scheduler slurm``.
        reported_failure: The failure as the scheduler reported it (Slurm); None: judged from
            the nodes' results.
        hang: Where every rank waited when the run hung: ranks grouped by stack, each rank's
            last collectives, the first divergence. Set when the hang watchdog ended the run
            (``--hang-timeout``), found it hung, or a collective timed out (then ``hang.hung`` is
            false where a rank was computing as it did); else None.
        writes: The files the job created or changed in its work directory, the first first
            (None: not followed: a run found in the engine, or a directory too large).
        started_time: The epoch time the launcher began to follow the job (None: not known).
        divergence: For a run that failed on torch's collective mismatch check
            (``--debug-collectives``), the first divergence of the ranks' collective records, with
            their call sites; for a rank gloo aborted on mismatched sizes, where it was and where
            its peers were; "" otherwise.
        skipped: For a run that failed on torch's check, where the ranks' records show a call one
            rank skipped before they parted (``rank 1 made 3 barrier() calls at t.py:23 where rank
            0 made 4: ...``): the line to look at, said in place of the failing rank's own line
            (that is the line after the skip, where the ranks parted); "".
        collectives_checked: The ranks ran under torch's check of every collective
            (``--debug-collectives``, or ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` by ``--env``), as the
            run's plan or the ranks' records say: a hint then never suggests the option again.
        stopped_where: Where each rank's script was when SIGTERM ended it in the latest attempt
            (``load_shard at train.py:12``), by the stacks it wrote then: a rank that a
            collective's timeout or a monitored barrier names, ended before anyone asked it.
        store_lost: How the run's own rendezvous store (``--rdzv-store container``) ended while
            the job ran (its container died), which then explains the nodes' failures; "" if it
            did not.
        written_shared: The files in the directories every node shares that the workers wrote
            whole (``torch.save`` to a path, ``open(path, "w")``), each with its writers: a rank
            that did not find one another rank wrote looked for it too early, and several
            writers race in one file (:attr:`written_by_several`).
        written_locally: The files on a node's own disk (``/tmp``, the home directory) the workers
            wrote, the first 100 of each, each with its writers: a rank of another node that
            cannot find one is told why.
        shuffled_alike: Each line where ranks iterated a shuffling ``DistributedSampler`` again
            with the same epoch (``set_epoch`` forgotten), with that epoch and those ranks.
        ended_apart: For a run whose every rank's script returned, where the ranks made
            different numbers of collectives in a process group they all belong to (gloo paired one
            rank's extra call with the others' next): how many each made and the first call where
            their records part (see :func:`orchestrate.hangs.collectives.ended_apart`); "" none.
        init_calls: How each rank's script called ``init_process_group``, beside what torchrun
            gave it: in its latest attempt, a call that made a group of torchrun's world, else its
            latest; ranks that asked for another world size, or the same rank, did not form the
            job torchrun started (:attr:`apart`).
        loaded_from_before: The files the work directory held when the run began (an earlier run's
            saves, or files of the user's own) that a rank loaded with ``torch.load`` before the run
            wrote them, and the checkpoint directories it held so that a rank loaded with DCP's
            ``load``, each with a slash at its end (``ckpt/step_9/``): a job that resumes from its
            saves began from an earlier run's.
        node_addresses: The nodes by their addresses on the run's network (address -> node), as
            their containers had them when the launcher began to follow them: a peer an error
            names by address (gloo's ``Connection closed by peer [172.20.0.3]:12933``) is named
            by its node too.
    """

    run_id: str
    run_dir: Path
    results: list[NodeResult]
    timings: Timings
    faults: list[FaultRecord] = field(default_factory=list)
    interrupted: bool = False
    signal_number: int = 2
    stopped_by: str = ""
    stop_look: tuple[str, ...] = ()
    stop_look_hung: bool = False
    limited_by: str = ""
    error: str = ""
    error_exit_code: int = 2
    teardown_error: str = ""
    image_torch: str = ""
    conditions: str = ""
    slurm: Optional[SlurmJob] = None
    reported_failure: Optional[Failure] = None
    hang: Optional[HangDiagnosis] = None
    writes: Optional[list[WrittenFile]] = None
    started_time: Optional[float] = None
    store_lost: str = ""
    divergence: str = ""
    skipped: str = ""
    collectives_checked: bool = False
    stopped_where: dict[int, str] = field(default_factory=dict)
    written_shared: dict[str, tuple[int, ...]] = field(default_factory=dict)
    written_locally: dict[str, tuple[int, ...]] = field(default_factory=dict)
    shuffled_alike: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    ended_apart: str = ""
    init_calls: dict[int, InitCall] = field(default_factory=dict)
    node_addresses: dict[str, str] = field(default_factory=dict)
    loaded_from_before: tuple[str, ...] = ()

    @property
    def apart(self) -> str:
        """What in the ranks' ``init_process_group`` calls was not torchrun's, in one line
        (:func:`orchestrate.hangs.init_calls.apart_warning` says why it matters); "" where every
        call asked for what torchrun gave, or the hang's diagnosis said it."""
        if self.hang is not None and self.hang.init_hints:
            return ""
        return apart_facts(self.init_calls)

    @property
    def written_by_several(self) -> dict[str, tuple[int, ...]]:
        """The shared files that more than one rank wrote whole, each with its writers."""
        return {path: ranks for path, ranks in self.written_shared.items() if len(ranks) > 1}

    @property
    def hung(self) -> bool:
        """The run ended because it hung: no progress for ``--hang-timeout``, or a collective
        that timed out while no rank worked (one that timed out while a rank computed ended a
        job that was working: its timeout was too short)."""
        return self.hang is not None and bool(self.hang.cause) and self.hang.hung

    @property
    def job_succeeded(self) -> bool:
        """Every node's torchrun exited 0 (under Slurm: the job COMPLETED), but those a ``lose``
        fault took for good, without which the nodes left went on."""
        if self.interrupted or self.error:
            return False
        if self.slurm is not None:
            return self.slurm.state == "COMPLETED"
        return (any(r.state is NodePhase.SUCCEEDED for r in self.results)
                and all(r.state in (NodePhase.SUCCEEDED, NodePhase.LOST) for r in self.results))

    @property
    def lost(self) -> dict[str, str]:
        """The nodes a ``lose`` fault took for good, each with that fault."""
        return {r.node.name: r.lost for r in self.results if r.state is NodePhase.LOST}

    @property
    def succeeded(self) -> bool:
        """The job succeeded, and every fault asked for happened, and its ranks formed the one job
        torchrun started: a run whose experiment did not happen is not a success, however the job
        ended (:attr:`missed`).

        The job's verdict, not the environment's: a teardown that left the run's project behind
        after a job that succeeded leaves it True (a chaos check, a benchmark and a test judge the
        job), while :attr:`exit_code` is 2, never 0, and :attr:`teardown_error` says what is left
        and how to remove it (the repr and the summary say it too)."""
        return self.job_succeeded and not self.missed

    @property
    def missed(self) -> list[str]:
        """What was asked of the run and did not happen, whatever the job's end, one line each:
        faults that never fired, ranks that did not form the one job torchrun started."""
        unfired = self.unfired_faults
        said = [f"{len(unfired)} fault(s) asked for never fired: {', '.join(f.spec for f in unfired)}"] if unfired else []
        if self.apart:
            said.append(f"the ranks did not form the one job torchrun started ({self.apart}); {UNDER_TORCHRUN}")
        return said

    @property
    def restarts_in_place(self) -> dict[str, int]:
        """How many times torchrun restarted each node's workers in place (--max-restarts), for
        the nodes where it did: ``assert not result.restarts_in_place`` fails a job that only
        succeeded on a second attempt."""
        if self.slurm is not None:  # a Slurm run has no node results: Slurm's records, and the logs
            return dict(self.slurm.restarts_in_place)
        return {r.node.name: r.restarts_in_place for r in self.results if r.restarts_in_place}

    @property
    def fired_faults(self) -> list[FaultRecord]:
        return [f for f in self.faults if f.fired]

    @property
    def unfired_faults(self) -> list[FaultRecord]:
        return [f for f in self.faults if not f.fired]

    @property
    def root_cause(self) -> Optional[Failure]:
        """The failure that explains the run (its node, rank, exception, traceback), or None."""
        return self.failure

    @property
    def recoveries(self) -> list[Recovery]:
        return self.timings.recoveries

    @property
    def after_sigterm(self) -> dict[str, dict[int, RankAfterSigterm]]:
        """How each rank of the nodes a preempt hit met its SIGTERM, by node and global rank
        (an elastic job numbers its ranks anew at each rendezvous): whether its script finished
        (exit 0) after it and how soon (``finished_after_s``), or before it (``finished_before``),
        and the files it opened to write after it (``wrote``, ``wrote_locally``). A test of a
        script's preemption handling asserts on it:
        ``assert result.after_sigterm["node1"][1].finished_after_s is not None``. A rank that had
        reported nothing on the progress channel before the signal is absent."""
        return {result.node.name: {rank.rank: rank for rank in result.preemption.ranks}
                for result in self.results if result.preemption is not None}

    @property
    def report(self) -> Path:
        """The run's report page."""
        return self.run_dir / "report.html"

    @property
    def output(self) -> str:
        """Every line the nodes printed, rank-prefixed (``[node1/rank3] ...``), node by node."""
        logs = sorted(self.run_dir.glob("node*.log")) or sorted(self.run_dir.glob("slurm-job.log"))
        return "".join(log.read_text(errors="replace") for log in logs)

    def rank_output(self, rank: int) -> Lines:
        """The lines of global rank ``rank``, without their prefix: a list whose ``in`` finds a
        piece of text, as on :attr:`output` (see :class:`Lines`).

        Raises:
            IndexError: For a rank the run never had (its ranks are 0 to the world size less 1), or
                any rank of a run that never came up (no node result, and no rank printed a line),
                which would read as a rank that printed nothing: ``"Traceback" not in`` it would hold.
        """
        output = self.output
        lines = Lines(re.findall(rf"^\[[^\]/]+/rank{rank}\] (.*)$", output, re.M))
        # (an elastic plan gives no ranks: its rendezvous does, at most as many as the nodes' processes)
        world_size = sum(len(result.node.global_ranks or result.node.process_gpus) for result in self.results)
        if not lines and world_size and not 0 <= rank < world_size:
            raise IndexError(f"rank {rank}: this run's ranks are 0 to {world_size - 1}")
        # (a Slurm run has no node results of its own: a job submitted, or ranks that printed, say it came up)
        submitted = self.slurm is not None and bool(self.slurm.job_id)
        if not lines and not world_size and not submitted and not re.search(r"^\[[^\]/]+/rank\d+\] ", output, re.M):
            raise IndexError(f"rank {rank}: this run has no ranks: it never came up (no node ran the job, and no"
                             " rank printed a line)")
        return lines

    def __repr__(self) -> str:
        """What a failed ``assert result.succeeded`` shows: how the run ended and why first, the
        failing rank's last lines last (pytest keeps a long repr's head and tail)."""
        if self.succeeded:
            ran = (f"Slurm job {self.slurm.job_id} on {counted(len(self.slurm.nodes), 'node')}" if self.slurm is not None
                   else counted(len(self.results), "node"))
            left = (f"; but exit code {self.exit_code}: TEARDOWN FAILED: {self.teardown_error}"
                    if self.teardown_error else "")
            return f"RunResult({self.run_id}: SUCCEEDED, {ran}, run_dir={self.run_dir}{left})"
        why = []
        if self.interrupted:
            why.append(f"interrupted by signal {self.signal_number}")
        if self.error:
            why.append(self.error)
        failure = self.failure
        if failure is not None:
            why.append(failure.describe() + (f", in your code at {failure.users_frame}" if failure.users_frame else "")
                       + "".join(f", {link}" for link in wrapping_links(failure.chain)[:1]))  # the nearest: what it wraps
        if self.hang is not None and not self.hung and not self.hang.timed_out:  # (else the failure's own line)
            why.append(f"{'while hung' if self.hang.hung else 'at the last look'}: {self.hang.headline}")
        why += [f"fault {f.describe()}" for f in self.unfired_faults]
        why += [f"the ranks did not form the one job torchrun started ({self.apart})"] if self.apart else []
        tail = ""
        if failure is not None:
            last = (failure.traceback.rstrip().splitlines() if failure.traceback else list(failure.last_lines))[-3:]
            where = failure.lines_of or (f"{failure.node}/rank{failure.rank}" if failure.rank is not None
                                         else failure.node)
            tail = f"; last lines of {where}: " + " | ".join(readable_node_line(line).strip() for line in last) if last else ""
        return f"RunResult({self.run_id}: FAILED (exit code {self.exit_code}): {'; '.join(why)}{tail})"

    @property
    def exit_code(self) -> int:
        """The CLI's exit code, one rule: 0 success, 1 the job failed, 2 the environment failed
        it (a bring-up or engine error, or a teardown that left something behind), 128 + the
        signal when a signal stopped it."""
        if self.interrupted:
            return 128 + self.signal_number
        if self.error:
            return self.error_exit_code
        if not self.succeeded:
            return 1
        return 2 if self.teardown_error else 0

    @property
    def hung_or_failed(self) -> bool:
        """Whether the job failed on a node of its own, or was found hung (by the watchdog, or the
        look at its time limit), whatever ended it then."""
        return (self.hang is not None and self.hang.hung) or any(r.state is NodePhase.FAILED for r in self.results)

    @property
    def failure(self) -> Optional[Failure]:
        """The failure to report, chosen by :func:`~orchestrate.outcome.judge.find_failure`."""
        if self.reported_failure is not None or self.slurm is not None:
            failure = self.reported_failure
        else:
            failure = find_failure(self.results, diverged=bool(self.divergence))
        if failure is not None and self.store_lost:  # every node's agent lost the rendezvous with it
            failure = replace(failure, description=f"{self.store_lost}: every node's torchrun agent lost the"
                                                   f" rendezvous; then {failure.describe()}")
        if self.hung:
            assert self.hang is not None
            return Failure(node=failure.node if failure else "", rank=failure.rank if failure else None,
                           exit_code=failure.exit_code if failure else None,
                           exception=failure.exception if failure else "",
                           last_lines=failure.last_lines if failure else (),
                           traceback=failure.traceback if failure else "",
                           lines_of=failure.lines_of if failure else "",
                           description=f"HUNG: {self.hang.headline}")
        return failure

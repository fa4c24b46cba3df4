"""The workers' training steps as the supervisor follows them."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from orchestrate.debugger.states import DebuggerStates, RankInDebugger
from orchestrate.hangs.init_calls import asks_for_torchruns_world
from orchestrate.hangs.snapshots import InitCall
from orchestrate.outcome.model import Recovery, anew_fields
from orchestrate.outcome.preemption import RankAfterSigterm
from orchestrate.outcome.progress import ProgressReader, ProgressRecord


class ProgressWatch:
    """The workers' training steps as the supervisor sees them: the highest step reported, and
    the moment training resumed after an elastic recovery."""

    def __init__(self, directory: Path, record: Callable[..., None]) -> None:
        self.reader = ProgressReader(directory)
        self.record = record
        self.max_step: Optional[int] = None
        # the latest recovery timed by a new worker's first step before any said where it resumed:
        # a rank that says it later (its optimizer's count, held a step) still tells
        self.unsaid: Optional[Recovery] = None
        self.seen = False
        # where the latest recovery's new workers counted their steps from 1 again (no rank said where
        # it resumed: an optimizer without a step count, or a script that started over): that
        # recovery, and when it failed
        self.anew_after: Optional[Recovery] = None
        self.anew_since = 0.0
        self.first_step_time: Optional[float] = None  # the epoch time of the first step a worker took
        self.records = 0  # every record read so far: progress, to the hang watchdog
        self.newest_time = 0.0  # the epoch time of the newest record read (an attach's history is older)
        # each rank's attempts (worker processes): when the first record came, the steps done
        self.attempts: dict[tuple[int, str], tuple[float, set[int]]] = {}
        # each worker process's latest step, by its rank and attempt: when it came (epoch time)
        self.last_step_at: dict[tuple[int, str], float] = {}
        # the ranks whose script returned: their attempt, the highest step it reported, when
        self.finished: dict[int, tuple[str, Optional[int], float]] = {}
        # what each of those made in each process group by its end (collective_log.at_end), compared at the end
        self.ended_collectives: dict[int, dict] = {}
        # the shared files the workers wrote whole, each with the ranks that wrote it
        self.written: dict[str, set[int]] = {}
        # the files the workers loaded with torch.load, each with the epoch time it was first loaded
        self.loaded: dict[str, float] = {}
        # the files on a node's own disk the workers wrote, each with the ranks that wrote it
        self.written_locally: dict[str, set[int]] = {}
        # the lines where ranks iterated a shuffling DistributedSampler again with the same epoch
        self.same_shuffle: dict[str, tuple[int, set[int]]] = {}
        # how each rank's script called init_process_group: of its latest attempt's groups, one of
        # torchrun's world where it made one, else its latest (a world of one made after the job,
        # to export a model, does not undo the job); each with its attempt
        self.init_calls: dict[int, tuple[str, InitCall]] = {}
        # how each rank's script called init_process_group, as it made the call (its latest call)
        self.init_asked: dict[int, InitCall] = {}
        self.init_records = 0  # the calls read so far, as they were made
        # each worker process, by its rank and attempt: its node and when it began (where it did not
        # say, when its first record came)
        self.processes: dict[tuple[int, str], tuple[str, float]] = {}
        # what each worker process said of its end and its writes, in order: a preempted node's
        # ranks are read from these (see after_sigterm)
        self.ends_and_writes: list[ProgressRecord] = []
        # the ranks in their debugger now, and what changed since the supervisor last took it
        self.debugger = DebuggerStates()
        self.debugger_changes: list[tuple[str, RankInDebugger]] = []

    def attempt_steps(self, since: float) -> Optional[int]:
        """The most steps any rank has done in an attempt begun after ``since`` (epoch time;
        None: no such attempt has reported a step)."""
        counts = [len(steps) for first, steps in self.attempts.values() if first > since and steps]
        return max(counts, default=None)

    def steps_reached(self) -> dict[int, int]:
        """Each rank's highest step reported by its latest worker process that reported one (a
        restart's process counts its own), for the ranks that reported any."""
        latest: dict[int, tuple[float, int]] = {}
        for (rank, _), (first, steps) in self.attempts.items():
            if steps and (rank not in latest or first >= latest[rank][0]):
                latest[rank] = (first, max(steps))
        return {rank: step for rank, (_, step) in sorted(latest.items())}

    def step_said(self) -> tuple[Optional[int], Optional[Recovery]]:
        """The step to say a fault or a failure came at, and None or, where the attempt since the
        latest recovery counted its steps from 1 again, that recovery: then the step is
        that attempt's (None: it took none yet), not the job's highest (:attr:`max_step`)."""
        if self.anew_after is None:
            return self.max_step, None
        return self.attempt_steps(self.anew_since), self.anew_after

    def written_whole(self) -> dict[str, tuple[int, ...]]:
        """The shared files the workers wrote whole, each with its writers."""
        return {path: tuple(sorted(ranks)) for path, ranks in sorted(self.written.items())}

    def written_on_nodes_disks(self) -> dict[str, tuple[int, ...]]:
        """The files on a node's own disk the workers wrote, each with its writers, in the order
        they were first read (the latest last: a hung rank's hint names the latest)."""
        return {path: tuple(sorted(ranks)) for path, ranks in self.written_locally.items()}

    def groups_made(self) -> dict[int, InitCall]:
        """How each rank's script called init_process_group (see :attr:`init_calls`)."""
        return {rank: call for rank, (_, call) in sorted(self.init_calls.items())}

    def shuffled_alike(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Each line where ranks iterated a shuffling DistributedSampler again with the same
        epoch: that epoch, and those ranks."""
        return {line: (epoch, tuple(sorted(ranks))) for line, (epoch, ranks) in sorted(self.same_shuffle.items())}

    def finished_before(self, until: float) -> dict[int, Optional[int]]:
        """The ranks whose script returned before ``until`` (epoch time), each with the highest
        step it reported: not those that returned later, when a stop or a peer's end had come."""
        return {rank: step for rank, (_, step, at) in self.finished.items() if at < until}

    def steps_reached_on(self, node: str, ranks: tuple[int, ...]) -> dict[int, int]:
        """:meth:`steps_reached` of the ranks of ``node``: its ``ranks`` (the plan's), or, in an
        elastic job, whose ranks the plan does not give, those whose processes said they ran there."""
        on = set(ranks) or {rank for (rank, _), (where, _) in self.processes.items() if where == node}
        return {rank: step for rank, step in self.steps_reached().items() if rank in on}

    def stepped_after(self, rank: int, since: float) -> bool:
        """Whether a worker process of ``rank`` that ran at ``since`` (epoch time) reported a step
        after it: that process went on past what came then (a failed write its script caught)."""
        return any(at > since and self.processes[key][1] <= since
                   for key, at in self.last_step_at.items() if key[0] == rank)

    def processes_of(self, rank: int) -> int:
        """How many worker processes of ``rank`` reported (an elastic or in-place restart makes more)."""
        return sum(1 for r, _ in self.processes if r == rank)

    def after_sigterm(self, node: str, ranks: tuple[int, ...], signalled: float) -> tuple[RankAfterSigterm, ...]:
        """How the worker processes of ``node`` that ran at ``signalled`` (Unix seconds; a preempt's
        SIGTERM) met it: whether each script had returned or exited 0 before it, or did after it
        (how soon), and which files it opened to write after it. A process is the node's by its
        records, or by its rank among ``ranks`` (the plan's; none in an elastic job) where its
        records name no node; of a rank's processes, the latest begun before the signal is the
        one it met (a process begun later is a restart's). A process that had reported nothing is
        left out: nothing is known of it."""
        begun = sorted((began, rank, attempt) for (rank, attempt), (on, began) in self.processes.items()
                       if began <= signalled and (on == node if on else rank in ranks))
        met = {rank: attempt for _, rank, attempt in begun}  # each rank's latest begun before the signal
        found = []
        for rank, attempt in sorted(met.items()):
            said = [r for r in self.ends_and_writes if r.rank == rank and r.attempt == attempt]
            end = next((r.time for r in said if r.finished), None)
            after = [r for r in said if r.time >= signalled]
            found.append(RankAfterSigterm(
                rank, None if end is None or end < signalled else end - signalled,
                tuple(dict.fromkeys(r.wrote for r in after if r.wrote)),
                tuple(dict.fromkeys(r.wrote_locally for r in after if r.wrote_locally)),
                finished_before=end is not None and end < signalled))
        return tuple(found)

    def poll(self, now: float, recovery: Optional[Recovery], failed_since: Optional[float] = None) -> None:
        """Read what the workers reported since the last poll; ``recovery``, the recovery still
        waiting for training to resume, learns the step it resumed from and when it did. Where no
        worker says where it resumed (a plain script whose optimizer keeps no step count, or one
        that started over), a step of a worker process begun after the failure (``failed_since``,
        Unix seconds) is when it did, from a step not known until a rank says it."""
        for record in self.reader.poll():
            self.records += 1
            self.newest_time = max(self.newest_time, record.time)
            self.processes.setdefault((record.rank, record.attempt),
                                      (record.node, record.began if record.began is not None else record.time))
            changed = take_debugger_record(self.debugger, record)
            if changed is not None:
                self.debugger_changes.append(changed)
            if record.debugger is not None:
                continue
            if record.wrote or record.wrote_locally or record.finished:
                self.ends_and_writes.append(record)
            if record.wrote:  # not a step either
                self.written.setdefault(record.wrote, set()).add(record.rank)
                continue
            if record.wrote_locally:
                self.written_locally.setdefault(record.wrote_locally, set()).add(record.rank)
                continue
            if record.loaded is not None:  # a file torch.load read, not a step
                if record.loaded:  # ("" a stream)
                    self.loaded[record.loaded] = min(record.time, self.loaded.get(record.loaded, record.time))
                continue
            if record.dcp_saved:  # a checkpoint directory DCP saved: the chaos check's, not a step
                continue
            if record.same_shuffle:
                _, ranks = self.same_shuffle.setdefault(record.same_shuffle, (record.shuffle_epoch or 0, set()))
                ranks.add(record.rank)
                continue
            if record.init_asked is not None or record.init_call is not None:
                call = InitCall.from_json(record.init_asked if record.init_asked is not None else record.init_call)
                if call is None:
                    continue
                # (keyed as torchrun numbered the rank: a script may change RANK before it reports)
                rank = call.torchrun_rank if call.torchrun_rank is not None else record.rank
                if record.init_asked is not None:  # the call as it was made
                    self.init_records += 1
                    self.init_asked[rank] = call
                    continue
                kept = self.init_calls.get(rank)  # the group it made
                if kept is None or kept[0] != record.attempt or not asks_for_torchruns_world(kept[1]):
                    self.init_calls[rank] = (record.attempt, call)
                continue
            if record.finished:  # not a step: a script without any still says it
                self.finished[record.rank] = (record.attempt, record.after_step, record.time)
                if record.collectives is not None:
                    self.ended_collectives[record.rank] = record.collectives
                continue
            self.seen = True
            if record.rank in self.finished and self.finished[record.rank][0] != record.attempt:
                del self.finished[record.rank]  # a new process of the rank (an elastic restart) runs on
                self.ended_collectives.pop(record.rank, None)
            first, steps = self.attempts.setdefault((record.rank, record.attempt), (record.time, set()))
            if record.step is not None:
                steps.add(record.step)
                self.last_step_at[(record.rank, record.attempt)] = max(
                    record.time, self.last_step_at.get((record.rank, record.attempt), record.time))
                self.first_step_time = min(self.first_step_time or record.time, record.time)
            if record.resumed is not None:
                if recovery is not None:
                    recovery.resumed_from = record.resumed
                elif self.unsaid is not None and self.unsaid.resumed_from is None:
                    self.unsaid.resumed_from = record.resumed  # a rank said it after another's first step
                    self.anew_after = None
                continue
            if record.step is None:
                continue
            if recovery is not None and (recovery.resumed_from is not None or (
                    failed_since is not None and self.processes[(record.rank, record.attempt)][1] > failed_since)):
                # training resumed: from the step a worker said, or, none having said one, a new
                # worker trains, from a step not known until a rank says it
                recovery.resumed_at = now
                # (its step is the new attempt's first, counted from 1 again where no rank said where it resumed)
                anew = recovery if recovery.resumed_from is None and record.counted and failed_since is not None else None
                self.record("resumed", node=recovery.node, step=record.step, recovery_s=recovery.recovery_s,
                            steps_lost=recovery.steps_lost, **anew_fields(anew))
                said, recovery = recovery, None
                if said.resumed_from is not None:
                    self.max_step = record.step
                    self.anew_after = None
                    continue
                self.unsaid = said
                # counted by the start-up hook with no resume said: from 1 again (an optimizer without
                # a step count resumed, or one with a count that loaded none: the script started over)
                self.anew_after = said if record.counted and failed_since is not None else None
                self.anew_since = failed_since or 0.0
            self.max_step = max(self.max_step or 0, record.step)


def take_debugger_record(states: DebuggerStates, record: ProgressRecord) -> Optional[tuple[str, RankInDebugger]]:
    """Take one progress record into the ranks' debugger states; what changed, or None."""
    return states.take(record.rank, record.attempt, record.node, record.time, record.debugger, record.finished)


class DebuggerWatch:
    """The ranks of a run in their debugger, read from its progress directory as it grows: each
    look reads only what the workers wrote since the last (``debug --wait`` looks every 0.25 s)."""

    def __init__(self, directory: Path) -> None:
        self.reader = ProgressReader(directory)
        self.states = DebuggerStates()

    def ranks(self) -> dict[int, RankInDebugger]:
        for record in self.reader.poll():
            take_debugger_record(self.states, record)
        return dict(self.states.ranks)

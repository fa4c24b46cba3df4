"""The progress channel: workers report their training step; the launcher reads it.

Worker side (standard library only; a no-op outside ddp-compose, so a script that calls it
runs unchanged under plain torchrun or on a cluster)::

    try:
        from orchestrate.node.progress import report
    except ImportError:
        def report(step, **metrics): pass
    ...
    report(step, loss=loss.item())

Each rank appends JSON lines to ``$DDP_PROGRESS_DIR/rank<RANK>.jsonl`` (the run directory,
mounted in every node). ``@step=N`` faults are exact: the launcher lists their steps in
``triggers.json`` before the job starts, and a rank that reports step N, or the first step past
N it reports, waits until the launcher has injected the fault (``fired-N``), so no rank gets past
step N first.

A preempt's SIGTERM: the launcher leaves ``sigterm-<node>`` in the directory as it sends it, and a
worker of that node says a file it writes after it again (each is said once per process
otherwise), so that the launcher can tell what the script saved on its way out. Every record
names its node and when its process began, so that the launcher tells which process the signal
met.

Every record carries its ``attempt``: one token per worker process, so the launcher tells an
elastic job's attempts apart (a restarted job's ranks are new processes). ``@step=+N`` faults
count in an attempt: the launcher lists them in ``triggers.json`` once the fault before has
fired (``"in_attempt": [[N, KEY]]``), and a rank that reports its N-th step in an attempt that
began after that waits for ``fired-KEY``.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any, Optional

PROGRESS_DIR_ENV = "DDP_PROGRESS_DIR"
NODE_ENV = "DDP_NODE"  # the node's name (node0, ...), set per node by the plan
# What the launcher leaves in the directory as a preempt sends a node SIGTERM (``sigterm-node1``).
SIGTERM_MARK_PREFIX = "sigterm-"
# How often a file written before its node's SIGTERM is said again after the mark, at most.
SAID_AGAIN = 3
TRIGGERS_FILE = "triggers.json"
# How long a rank at a fault's step waits for the launcher, at most: never a deadlock.
TRIGGER_WAIT_S = 60.0


class _Channel:
    """This process's progress file and the fault steps to stop at."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.directory = directory
        self.rank = rank
        self.file: IO[str] = open(directory / f"rank{rank}.jsonl", "a", encoding="utf-8")
        self.attempt = f"{os.getpid()}-{time.time():.3f}"
        self.node = os.environ.get(NODE_ENV, "")
        self.began = _process_began()
        self.said_after_sigterm: dict[str, int] = {}  # the files said again after the node's SIGTERM, how often
        self.steps_here: set[int] = set()  # the distinct steps this attempt reported
        self.passed: set[int] = set()  # the fault steps this process waited at, or reported past
        self.written: set[str] = set()  # the shared files reported written (each once)
        self.torch_saved: set[str] = set()  # those reported saved by torch.save
        self.loaded: set[str] = set()  # the files reported loaded by torch.load ("": a stream), DCP's directories
        self.dcp_saved: set[str] = set()  # the directories reported saved by torch.distributed.checkpoint
        self.written_locally: set[str] = set()  # the files on the node's own disk reported written
        try:
            triggers = json.loads((directory / TRIGGERS_FILE).read_text())
            self.triggers = {int(s): str(s) for s in triggers.get("steps", [])}
            self.in_attempt = {int(n): str(key) for n, key in triggers.get("in_attempt", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.triggers, self.in_attempt = {}, {}

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps({**record, "attempt": self.attempt, "node": self.node, "began": self.began}) + "\n")
        self.file.flush()

    def say_again(self, path: str) -> bool:
        """Whether a file said written already is said again: after its node's SIGTERM is marked,
        up to :data:`SAID_AGAIN` times (the mark comes a moment before the signal: a routine save
        in between must not take the place of the save the signal makes)."""
        if self.said_after_sigterm.get(path, 0) >= SAID_AGAIN or not self.node:
            return False
        try:
            if not (self.directory / f"{SIGTERM_MARK_PREFIX}{self.node}").exists():
                return False
        except OSError:  # the run's directory went away: the user's write stands, unsaid
            return False
        self.said_after_sigterm[path] = self.said_after_sigterm.get(path, 0) + 1
        return True

    def triggers_at(self, step: int) -> list[str]:
        """The keys of the faults this step waits for (``step`` just reported): each fault step
        this process has not yet passed, at or below ``step`` (a script that never reports the
        fault's own step, steps counted from 1 against ``@step=0``, or one that reports every
        tenth, waits at the first step it reports past it), then a count in the attempt."""
        self.steps_here.add(step)
        keys = [self.triggers[s] for s in sorted(self.triggers) if s <= step and s not in self.passed]
        self.passed.update(s for s in self.triggers if s <= step)
        in_attempt = self.in_attempt.get(len(self.steps_here))
        return keys + ([in_attempt] if in_attempt is not None else [])

    def wait_for_fault(self, key: str) -> None:
        fired = self.directory / f"fired-{key}"
        deadline = time.monotonic() + TRIGGER_WAIT_S
        while not fired.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


def _process_began() -> float:
    """When this process began (Unix seconds, to the kernel's clock tick): its start in ticks
    since boot (``/proc/self/stat``), against the boot clock now; now where that cannot be read.
    The channel opens at a process's first report, which may come long after it began."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        since_start = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return round(time.time() - max(since_start, 0.0), 3)
    except (OSError, ValueError, IndexError, AttributeError):
        return round(time.time(), 3)


_channel: Optional[_Channel] = None


def _get_channel() -> Optional[_Channel]:
    global _channel
    if _channel is None:
        directory = os.environ.get(PROGRESS_DIR_ENV)
        if not directory or not Path(directory).is_dir():
            return None
        _channel = _Channel(Path(directory), int(os.environ.get("RANK", "0")))
    return _channel


# Whether the script reports its own steps: then the optimizer's count (:func:`report_counted`)
# stays out of the channel, and the script's own numbering stands.
_reported_by_script = False


def report(step: int, **metrics: float) -> None:
    """Report that this rank finished training step ``step`` (with metrics such as loss)."""
    global _reported_by_script
    _reported_by_script = True
    _write_step(step, metrics)


def script_reports() -> bool:
    """Whether the script has reported a step of its own."""
    return _reported_by_script


def report_counted(step: int, taken: float, metrics: Optional[dict] = None) -> None:
    """Report a step counted by the workers' start-up hook (the optimizer's steps), taken at
    epoch time ``taken`` (a first step is reported at the second: see
    :mod:`orchestrate.node.step_counter`), with the ``metrics`` the hook took of it."""
    _write_step(step, metrics or {}, counted=True, taken=taken)


def _write_step(step: int, metrics: dict, counted: bool = False, taken: Optional[float] = None) -> None:
    channel = _get_channel()
    if channel is None:
        return
    record = {"rank": channel.rank, "step": int(step), "time": time.time() if taken is None else taken,
              **{k: float(v) for k, v in metrics.items()}}
    if counted:
        record["counted"] = "optimizer"
    channel.write(record)
    for key in channel.triggers_at(int(step)):
        channel.wait_for_fault(key)


def report_written(path: str, by_torch_save: bool = False) -> None:
    """Report that this rank wrote ``path`` whole (a path relative to the work directory), once
    per process (once more where it is then saved by ``torch.save``, ``by_torch_save``: a checkpoint
    by its kind) and once more after its node's SIGTERM: the launcher names a file that several
    ranks write (see :mod:`orchestrate.node.shared_writes`), and what a preempted rank saved."""
    channel = _get_channel()
    if channel is None:
        return
    anew = path not in channel.written or (by_torch_save and path not in channel.torch_saved)
    if anew or channel.say_again(path):
        channel.written.add(path)
        record: dict[str, Any] = {"rank": channel.rank, "wrote": path, "time": time.time()}
        if by_torch_save:
            channel.torch_saved.add(path)
            record["torch_save"] = True
        channel.write(record)


# How many files one worker reports loaded, at most (a job that loads a data shard per step loads
# thousands; a resume loads its save at the start).
LOADS_NOTED = 100


def report_loaded(path: str, by_dcp: bool = False) -> None:
    """Report that this rank loaded ``path`` with ``torch.load`` (relative to the work directory
    where it is in it; "": a stream with no path), or the checkpoint directory ``path`` with
    ``torch.distributed.checkpoint``'s load (``by_dcp``), once per process and file, for the first
    :data:`LOADS_NOTED` files: the chaos check tells an attempt that read the job's save back from
    one whose resume never ran."""
    channel = _get_channel()
    if channel is None or path in channel.loaded or len(channel.loaded) >= LOADS_NOTED:
        return
    channel.loaded.add(path)
    record: dict[str, Any] = {"rank": channel.rank, "loaded": path, "time": time.time()}
    if by_dcp:
        record["dcp"] = True
    channel.write(record)


def report_dcp_saved(path: str) -> None:
    """Report that this rank saved the checkpoint directory ``path`` with
    ``torch.distributed.checkpoint``'s save (a checkpoint by its kind, as a ``torch.save``), once per
    process and directory. Apart from the files written whole: every rank saves into the one
    directory, each its own files, and none of them races another."""
    channel = _get_channel()
    if channel is None or path in channel.dcp_saved:
        return
    channel.dcp_saved.add(path)
    channel.write({"rank": channel.rank, "dcp_saved": path, "time": time.time()})


def report_written_locally(path: str, most: int) -> None:
    """Report that this rank wrote ``path`` (absolute) on its node's own disk, once per process
    (and once more after its node's SIGTERM) and for the first ``most`` such files: a rank of
    another node that cannot find it is told why (see :mod:`orchestrate.node.shared_writes`)."""
    channel = _get_channel()
    if channel is None or path.startswith(str(channel.directory) + os.sep):  # the channel's own files
        return
    if path in channel.written_locally:
        if not channel.say_again(path):
            return
    elif len(channel.written_locally) >= most:
        return
    channel.written_locally.add(path)
    channel.write({"rank": channel.rank, "wrote_locally": path, "time": time.time()})


def report_same_shuffle(line: str, epoch: int) -> None:
    """Report that this rank iterated a shuffling DistributedSampler again from ``line`` with the
    same epoch (see :mod:`orchestrate.node.sampler_epochs`)."""
    channel = _get_channel()
    if channel is not None:
        channel.write({"rank": channel.rank, "same_shuffle": line, "shuffle_epoch": int(epoch), "time": time.time()})


def report_init_asked(call: dict[str, Any]) -> None:
    """Report how this rank's script calls ``init_process_group``, as it calls it (before torch
    looks for the store): the launcher says at once a call that can only wait until its timeout
    (a store on each node's own localhost), not minutes later with the stacks."""
    channel = _get_channel()
    if channel is not None:
        channel.write({"rank": channel.rank, "init_asked": call, "time": time.time()})


def report_init_call(call: dict[str, Any]) -> None:
    """Report how this rank's script called ``init_process_group``, once the call made its group,
    beside what torchrun gave it (see :mod:`orchestrate.node.init_record`): the launcher names
    ranks that asked for another world size or rank, and so did not form the job torchrun
    started."""
    channel = _get_channel()
    if channel is not None:
        channel.write({"rank": channel.rank, "init_call": call, "time": time.time()})


def report_debugger(state: dict[str, Any]) -> None:
    """Report where this rank's debugger is: it ``waits`` for a terminal (with the call that stopped
    the rank, and where), a terminal is ``attached``, or the rank ``left`` it (see
    :mod:`orchestrate.node.remote_debugger`): the launcher says how to reach it, and its hang
    watchdog waits meanwhile."""
    try:
        channel = _get_channel()
        if channel is not None:
            channel.write({"rank": channel.rank, "debugger": state, "time": time.time()})
    except OSError:
        pass  # a channel that cannot be written must not fail the user's breakpoint


def report_resumed(step: int) -> None:
    """Report that this rank resumed from a checkpoint taken at ``step``."""
    report_resumed_at(step, time.time())


def report_resumed_at(step: int, taken: float) -> None:
    """:func:`report_resumed`, said at epoch time ``taken``: the workers' start-up hook says a
    resume read from an optimizer's own step count at that optimizer's first step here."""
    channel = _get_channel()
    if channel is not None:
        channel.write({"rank": channel.rank, "resumed": int(step), "time": taken})


def report_finished(collectives: Optional[dict] = None) -> None:
    """Report that this rank's script returned (or exited 0), after the highest step it reported
    (null if none): the workers' start-up hook says it, so that a rank that leaves while the
    others still train (uneven data) is named when their collectives lose it. ``collectives``:
    what it made in each process group by then (see collective_log.at_end), compared across the
    ranks of a run that succeeded."""
    try:
        channel = _get_channel()
        if channel is not None:
            after = max(channel.steps_here) if channel.steps_here else None
            said = {"rank": channel.rank, "finished": True, "after_step": after, "time": time.time()}
            channel.write({**said, "collectives": collectives} if collectives else said)
    except OSError:
        pass  # the script succeeded: a channel that cannot be written must not fail it


# Launcher side ---------------------------------------------------------------------------



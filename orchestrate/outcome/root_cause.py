"""Why a node failed: torchrun's failure report and its workers' structured error files."""
from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from orchestrate.hangs.crash_dump import HOOK_DIRS, calls_wrapped, is_workers_hook_file
from orchestrate.hangs.snapshots import is_users_file, users_file_name
from orchestrate.node.peer_loss import says_a_peer_was_lost
from orchestrate.plan.layout import RUN_DIR_MOUNT
from orchestrate.text import brief

_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):")


_RANK_FIELD = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local_rank>\d+)\)")


_EXIT_FIELD = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+)")


_ERROR_FILE_FIELD = re.compile(r"^\s*error_file\s*:\s*(?P<path>/\S+)")


_EXCEPTION_LINE = re.compile(r"^\s*(?P<exc>[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*)$")


# A worker's crash (torchrun's exit code: minus the signal).
CRASH_EXIT_CODES = tuple(-int(s) for s in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE))
# Of those, the ones never a peer's doing: a bad memory access, instruction or arithmetic. An
# abort may be either: a check of the worker's own that failed (gloo's on sizes that differ), or
# a communicator that gave up on a lost peer (NCCL's watchdog, gloo's I/O errors).
OWN_CRASH_CODES = tuple(-int(s) for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE))
ABORTED = -int(signal.SIGABRT)



@dataclass
class RootCause:
    """torchrun's "first observed failure" of one node."""

    rank: int
    local_rank: int
    exit_code: Optional[int] = None
    exception: str = ""
    error_file: str = ""
    traceback: str = ""
    timestamp: Optional[float] = None
    crashed: str = ""  # a native crash: where the worker was (see orchestrate.outcome.crash_dump)
    collective: str = ""  # the collective its record says failed as it went (gather_object(in dcp.save))
    training_pass: str = ""  # which pass of a DDP model's training step that was ("backward pass"), if one
    users_frame: str = ""  # the innermost frame of the user's own code in its traceback (see users_frame_in)
    chain: tuple[str, ...] = ()  # the exceptions it was raised from, nearest first (see exception_chain)

    def add_error_file(self, text: str) -> None:
        """Take message, traceback and time from the worker's structured error file (JSON)."""
        try:
            message = json.loads(text)["message"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(message, dict):
            self.exception = str(message.get("message") or self.exception)
            extra = message.get("extraInfo") or {}
            self.traceback = without_hook_frames(str(extra.get("py_callstack") or ""))
            try:
                self.timestamp = float(extra.get("timestamp"))
            except (TypeError, ValueError):
                pass
        elif isinstance(message, str):
            self.exception = message

    def add_worker_log(self, log: Path) -> None:
        """Take message and traceback from the end of the worker's log (torchrun's
        ``stderr.log`` of it), for a worker that left no error file (its script's main is not
        wrapped in ``@record``): the exception its last traceback ends in, that traceback's text
        (or, for a script Python could not compile, which has none, its last lines), and when
        the log was last written. Nothing where the log ends in no error, or is gone."""
        lines = log_tail(log)
        try:
            written_at = log.stat().st_mtime
        except OSError:
            return
        self.exception = exception_in_lines(lines or [])
        if not self.exception:
            return
        text = [_RANK_PREFIX.sub("", line.rstrip()) for line in lines]
        starts = [i for i, line in enumerate(text) if starts_traceback(line)]
        shown = text[starts[-1]:] if starts else text[-_LOG_LINES_SHOWN:]
        # the start-up hook's own lines (a post-mortem's wait for `debug RUN RANK`) are no part of it
        shown = [line for line in shown if not line.startswith(HOOK_LINE_PREFIX)]
        self.traceback = "\n".join(shown)
        self.timestamp = written_at


# What the workers' start-up hook's own lines start with (node.remote_debugger.STOP_LINE_PREFIX and the
# others: outcome imports none of the nodes' modules).
HOOK_LINE_PREFIX = "[ddp-compose] "

# The storage faults' shim in the workers (node/storage_faults.py), whose full disk raises ENOSPC.
STORAGE_FAULTS_FILE = "storage_faults.py"

# A frame of a traceback: its file, line and (where Python gave it) function.
_FRAME_LINE = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>.+?))?\s*$')


def without_hook_frames(traceback: str) -> str:
    """A Python traceback's text without the frames of the workers' start-up hook (the
    collective recorder's wrappers in the script's calls): each such ``File`` line and the lines
    indented under it go; unchanged where the hook's own code raised (its frames are the story),
    not where a wrapper's call of what it wraps did (``open`` of a missing file)."""
    lines = traceback.splitlines()
    frames = [(i, m["file"]) for i, m in enumerate(map(_FRAME_LINE.match, lines)) if m]
    if frames and frames[-1][1].startswith(HOOK_DIRS):
        line = frames[-1][0] + 1
        # (a disk-full fault's ENOSPC is the system's, as the worker's own traceback shows it)
        full_disk = frames[-1][1].endswith(STORAGE_FAULTS_FILE) and "[Errno 28]" in (lines[-1] if lines else "")
        if not calls_wrapped(lines[line] if line < len(lines) else "") and not full_disk:
            return traceback
    kept, skipping_under = [], None
    for line in traceback.splitlines():
        frame = _FRAME_LINE.match(line)
        if frame:
            skipping_under = len(frame["indent"]) if is_workers_hook_file(frame["file"]) else None
        elif skipping_under is not None and len(line) - len(line.lstrip()) <= skipping_under:
            skipping_under = None
        if skipping_under is None:
            kept.append(line)
    return "\n".join(kept) + ("\n" if traceback.endswith("\n") else "")


# torch's monitored barrier on rank 0, naming the ranks that did not reach it in time (one, or
# all of them with wait_all_ranks=True).
_NOT_AT_BARRIER = re.compile(r"\bRanks? (?P<ranks>\d+(?:, \d+)*) failed to pass monitoredBarrier")


def absent_from_barrier(exception: str) -> tuple[int, ...]:
    """The ranks a failed ``monitored_barrier`` names as not reaching it (``[Rank 0]: Rank 2
    failed to pass monitoredBarrier in 20000 ms``); () for any other error. Rank 0 failed for
    want of them, but its error is the one that says who they are."""
    match = _NOT_AT_BARRIER.search(exception)
    return tuple(int(rank) for rank in match["ranks"].split(", ")) if match else ()


def lost_peer_in(lines: list[str]) -> bool:
    """Whether these lines say a peer, or the rendezvous store, was lost."""
    return says_a_peer_was_lost("\n".join(lines))


def is_collateral(cause: RootCause, last_lines: list[str]) -> bool:
    """Whether a failure looks like a consequence of another rank failing.

    A worker killed by a signal, or one whose error is a peer's closed connection, failed
    because some other rank went first; one that crashed (a segfault) failed by itself, and so
    did one that aborted, unless its last words are a lost peer's.
    """
    lost_a_peer = lost_peer_in([cause.exception, *cause.chain, *last_lines[-5:]])
    if cause.exit_code in OWN_CRASH_CODES:
        return False
    if cause.exit_code == ABORTED:
        return lost_a_peer
    if cause.exit_code is not None and cause.exit_code < 0:
        return True
    return lost_a_peer


def parse_root_cause(lines: list[str]) -> Optional[RootCause]:
    """Find the root cause in torchrun's ChildFailedError report, if the output has one."""
    start = next((i for i, ln in enumerate(lines) if _ROOT_CAUSE.search(ln)), None)
    if start is None:
        return None
    cause: Optional[RootCause] = None
    for line in lines[start + 1:]:
        if line.startswith("====="):
            break
        if cause is None:
            match = _RANK_FIELD.match(line)
            if match:
                cause = RootCause(int(match.group("rank")), int(match.group("local_rank")))
            continue
        file_match = _ERROR_FILE_FIELD.match(line)
        if file_match and not cause.error_file:
            cause.error_file = file_match.group("path")
            continue
        exit_match = _EXIT_FIELD.match(line)
        if exit_match and cause.exit_code is None:
            cause.exit_code = int(exit_match.group("code"))
            if "(SIG" in line:
                cause.exception = line.split("(", 2)[-1].rstrip(") ").strip()
            continue
        exc_match = _EXCEPTION_LINE.match(line)
        if exc_match and not line.lstrip().startswith("File "):
            cause.exception = exc_match.group("exc").strip()
    return cause


# The last line of a Python traceback: the exception's (dotted) name, then its message if any.
_RAISED_LINE = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")
# Of those, one whose name is a class's: its last part capitalised (``torch.fx.TraceError``).
_CLASS_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(: .*)?$")
# torch prefixes every line a worker prints once the process group exists (``[rank1]: ...``).
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")


def exception_in_lines(lines: list[str]) -> str:
    """The exception a worker's last lines end its Python traceback with (``ValueError: bad
    batch``), "" if they hold none: what explains a failure when the script's main is not
    wrapped in torch's ``@record``, which alone writes an error file."""
    text = [_RANK_PREFIX.sub("", line.rstrip()) for line in lines]
    starts = [i for i, line in enumerate(text) if line.strip() == "Traceback (most recent call last):"]
    # After the last traceback's start, its last line as little indented as the start is the
    # exception, whatever its name (a traceback may come indented as a whole: torch's DataLoader
    # writes a NUL byte where the next line's "[rank0]:" would begin); without a start (scrolled
    # out of the tail), a line that names an error.
    indent = len(text[starts[-1]]) - len(text[starts[-1]].lstrip()) if starts else 0
    candidates = [line[indent:] if line[:indent].isspace() else line
                  for line in text[starts[-1] + 1:]] if starts else text
    for line in reversed(candidates):
        if (_RAISED_LINE if starts else _EXCEPTION_LINE).match(line):
            return line.strip()
    return ""


# What Python prints between two tracebacks of one chain, and what it means of the first one's
# exception for the second's: raised ``from`` it, or while handling it.
CAUSED_BY = "caused by"
CHAIN_LINKS = {
    "The above exception was the direct cause of the following exception:": CAUSED_BY,
    "During handling of the above exception, another exception occurred:": "raised while handling",
}
# A link whose exception is the one raised from it, word for word, says so in place of saying it again.
SAME_ERROR = "the same error"
# How many links of a chain are said: the nearest ones.
CHAIN_SAID = 3


def exception_chain(lines: Sequence[str]) -> tuple[str, ...]:
    """The exceptions the last one of a traceback's text was raised from, nearest first, each as
    ``caused by: RuntimeError: DataLoader worker (pid 43) is killed by signal: Killed.`` (raised
    ``from`` it) or ``raised while handling: KeyError: 'step'``; () where it was raised alone. A
    library's error often wraps the one that explains it: a DataLoader worker that "exited
    unexpectedly" was killed, a user's "could not load the checkpoint" met a missing file."""
    text = [_RANK_PREFIX.sub("", line.rstrip()) for line in lines]
    links = []  # (how, exception), the first raised first
    for i, line in enumerate(text):
        how = CHAIN_LINKS.get(line.strip())
        exception = raised_above(text[:i]) if how else ""
        if exception:
            links.append((how, exception))
    said = []
    later = raised_above(text)  # the exception raised from (or while handling) the link looked at
    for how, exception in reversed(links):
        # (a save's clean-up meeting a full disk again raises the same error while handling it)
        said.append(f"{how} {SAME_ERROR}" if exception == later else f"{how}: {exception}")
        later = exception
    return tuple(said)[:CHAIN_SAID]


def linked_exceptions(chain: Sequence[str], how: str = "") -> list[str]:
    """The exceptions of a chain's links (:func:`exception_chain`'s), those linked ``how`` only
    where given (``CAUSED_BY``)."""
    linked = []
    for link in chain:
        link_how, separator, exception = link.partition(": ")
        if separator and link_how in CHAIN_LINKS.values() and (link_how == how or not how):
            linked.append(exception)  # (not a link to the same error: that one is said already)
    return linked


def wrapping_links(chain: Sequence[str]) -> list[str]:
    """The chain's links that name an error of their own (not ``... the same error``)."""
    return [link for link in chain if not link.endswith(f" {SAME_ERROR}")]


def raised_above(text: list[str]) -> str:
    """The exception whose lines end ``text`` (without torch's rank prefixes), as Python prints it
    above the line that chains the next one to it: the lines up from the blank one, to the last
    frame's indented source or the traceback's start (or, for an exception raised with no
    traceback, ``raise X from ValueError("y")``, to a blank line), and of those the first that
    names an error (``...Error: ...``), else the first whose name is a class's (``StopIteration``,
    ``torch.fx.TraceError``), else the first shaped as an exception's line: not the last line of a
    message of several (``Note: ...``), nor a line the script printed before it (``loss: 0.5``)."""
    end = len(text)
    while end and not text[end - 1].strip():
        end -= 1
    begin = end
    while begin and text[begin - 1].strip() and not text[begin - 1][:1].isspace() \
            and text[begin - 1].strip() != TRACEBACK_START:
        begin -= 1
    block = [line.strip() for line in text[begin:end] if _RAISED_LINE.match(line.strip())]
    return next((line for line in block if _EXCEPTION_LINE.match(line)), "") \
        or next((line for line in block if _CLASS_LINE.match(line)), "") or next(iter(block), "")


def says_chained(line: str) -> bool:
    """Whether a worker's line is Python's between two tracebacks of one chain."""
    if "exception" not in line:  # (most lines: the check costs every line a worker prints)
        return False
    return _RANK_PREFIX.sub("", line).strip() in CHAIN_LINKS


def chains_on(traceback: Sequence[str]) -> bool:
    """Whether a traceback's text ends saying the next traceback's exception is chained to its own."""
    last = next((text for text in (_RANK_PREFIX.sub("", line).strip() for line in reversed(traceback)) if text), "")
    return last in CHAIN_LINKS


# The line that begins a Python traceback (torch's DataLoader quotes a worker process's, in the
# error it raises, after "Original ").
TRACEBACK_START = "Traceback (most recent call last):"


def starts_traceback(line: str) -> bool:
    """Whether a worker's line begins a traceback of its own, not one quoted in an error; after
    a progress bar's unfinished redraw too (torchrun's tee joins what came before a ``\\r``)."""
    if "Traceback" not in line:  # (most lines: the check costs every line a worker prints)
        return False
    text = line.rstrip()
    return text.endswith(TRACEBACK_START) and not text.endswith("Original " + TRACEBACK_START)


def is_frame_line(line: str) -> bool:
    """Whether a worker's line is a frame of a traceback (``File "train.py", line 9, in main``)."""
    return "File \"" in line and _FRAME_LINE.match(_RANK_PREFIX.sub("", line.rstrip())) is not None


# The errors of a script Python could not compile: no traceback, only the error's one frame (with
# no function) and the source line.
COMPILE_ERRORS = ("SyntaxError", "IndentationError", "TabError")


def is_compile_error(exception: str) -> bool:
    """Whether a failure's error is one Python raises as it compiles a file (``SyntaxError: ...``)."""
    return exception.split(":", 1)[0].strip() in COMPILE_ERRORS


def users_frame_in(lines: Sequence[str]) -> str:
    """Where the user's own code was when the last traceback in ``lines`` was raised: its
    innermost frame outside torch, other libraries, Python's own modules and the workers' hook,
    as ``train.py:13 in <module>: sampler = DistributedSampler(data)``. An error torch raised
    deep in its own code shows only torch's frames in its last lines; this is the line of the
    script that called it. A traceback quoted in the error (a DataLoader worker's) is looked in
    first, then the one that quotes it; a script that could not be compiled has no traceback, but
    its error's one frame (``File "train.py", line 7``); "" where none has a frame of the user's."""
    text = [_RANK_PREFIX.sub("", line.rstrip()) for line in lines]
    starts = [i for i, line in enumerate(text) if TRACEBACK_START in line]
    if not starts:  # a script Python could not compile: its error's one frame, with no traceback above
        starts = [i - 1 for i, line in enumerate(text)
                  if (found := _FRAME_LINE.match(line)) and not found["function"]][-1:]
    for begin, end in reversed(list(zip(starts, starts[1:] + [len(text)]))):
        for i in range(end - 1, begin, -1):  # innermost first
            frame = _FRAME_LINE.match(text[i])
            if frame is None or is_workers_hook_file(frame["file"]) or not is_users_file(frame["file"]):
                continue
            below = text[i + 1] if i + 1 < end else ""
            is_source = len(below) - len(below.lstrip()) > len(frame["indent"]) and not _FRAME_LINE.match(below)
            # (a file Python could not compile has no function: ``File "m.py", line 2`` of a SyntaxError)
            function = f" in {frame['function']}" if frame["function"] else ""
            return (f"{users_file_name(frame['file'])}:{frame['line']}{function}"
                    + (f": {below.strip()}" if is_source else ""))
    return ""


# A C++ exception nobody caught: the runtime's last words before it aborts the process.
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s*(?P<what>.*?)\s*$")


def native_exception(lines: list[str]) -> str:
    """The C++ exception a worker's last lines say it aborted on (``gloo::EnforceNotMet: [enforce
    fail at ...] 8 vs 4. Received data size doesn't match expected size...``), or "" if none.

    Its ``what():`` line is the first one after the ``terminate`` line, however far: torchrun
    tails a worker's stdout and stderr apart, so lines the script printed can come between."""
    text = [_RANK_PREFIX.sub("", line.rstrip()) for line in lines]
    for i in range(len(text) - 1, -1, -1):
        thrown = _TERMINATE.search(text[i])
        if thrown:
            what = next((m["what"] for m in map(_WHAT.match, text[i + 1:]) if m), "")
            return f"{thrown['type']}: {what}" if what else thrown["type"]
    return ""


def error_file_on_host(run_dir: Path, container_path: str) -> Path:
    """Where a file the node wrote under the run mount lies on the host."""
    return run_dir / Path(container_path).relative_to(RUN_DIR_MOUNT)


@dataclass(frozen=True)
class EarlierFailure:
    """A worker of an earlier attempt of a node (torchrun restarted its workers, or the launcher
    the node) whose log ends in an error of its own: which attempt of which torchrun (in the
    order they ran, from 1), its local rank, its error and its last lines."""

    attempt: int
    local_rank: int
    exception: str
    last_lines: tuple[str, ...]
    users_frame: str = ""  # where the user's own code was in its traceback (see users_frame_in)

    def describe(self, node: str) -> str:
        return (f"attempt {self.attempt} of {node}'s workers failed by an error of its own: local rank"
                f" {self.local_rank}: {brief(self.exception)}")


# How much of a worker's log is read for its error (its traceback's end), and shown.
_LOG_TAIL_BYTES = 16_384
_LOG_LINES_SHOWN = 20


@dataclass(frozen=True)
class AttemptError:
    """The error one attempt of a node's workers ended in, by torchrun's log of it: the attempt
    (in the order they ran, from 1), the local rank, its error, whether it was the worker's own
    (not a lost peer's), and its last lines."""

    attempt: int
    local_rank: int
    exception: str
    own: bool
    last_lines: tuple[str, ...] = ()
    users_frame: str = ""


def attempt_errors(run_dir: Path, node: str) -> list[AttemptError]:
    """Each attempt of a node's workers (torchrun's ``--log-dir``: one folder per attempt, per
    local rank), the oldest first, with the error it ended in: its first local rank whose log
    ends in an error of its own, else its first whose log ends in any; an attempt whose logs
    end in none is left out."""
    found = []
    for number, attempt in enumerate(attempts_in_order(run_dir, node), 1):
        errors = []
        for local, log in sorted(worker_logs(attempt).items()):
            lines = log_tail(log)
            exception = exception_in_lines(lines) if lines is not None else ""
            if exception:
                own = not is_collateral(RootCause(local, local, 1, exception), lines)
                errors.append(AttemptError(number, local, exception, own, tuple(lines[-_LOG_LINES_SHOWN:]),
                                           users_frame_in(lines)))
        if errors:
            found.append(next((e for e in errors if e.own), errors[0]))
    return found


def worker_logs(attempt: Path) -> dict[int, Path]:
    """torchrun's log of each worker of one attempt (its ``stderr.log``): local rank -> file."""
    return {int(p.parent.name): p for p in attempt.glob("*/stderr.log") if p.parent.name.isdigit()}


def log_tail(log: Path) -> Optional[list[str]]:
    """The last lines of a worker's log, where its traceback ends; None where it cannot be read
    (gone meanwhile)."""
    try:
        with log.open("rb") as opened:
            opened.seek(max(0, log.stat().st_size - _LOG_TAIL_BYTES))
            return opened.read().decode(errors="replace").splitlines()
    except OSError:
        return None


def newest_own(errors: list[AttemptError]) -> Optional[EarlierFailure]:
    """The newest of these attempts' errors (:func:`attempt_errors`) that was a worker's own, not
    a lost peer's: where the job's last failure is a consequence (a peer gone while the workers
    restarted), what made them restart (a checkpoint that no longer loads) may be only there.
    None when no log holds one."""
    own = [e for e in errors if e.own]
    if not own:
        return None
    newest = own[-1]
    return EarlierFailure(newest.attempt, newest.local_rank, newest.exception, newest.last_lines, newest.users_frame)


def attempts_in_order(run_dir: Path, node: str) -> list[Path]:
    """A node's attempt folders of torchrun's ``--log-dir`` (each torchrun's, each attempt's), the
    oldest first; one gone meanwhile is left out."""
    dated = []
    for attempt in (run_dir / node / "torchrun").glob("*/attempt_*"):
        try:
            dated.append((attempt.stat().st_mtime, attempt.name, attempt))
        except OSError:
            continue
    return [attempt for _, _, attempt in sorted(dated)]


def restarts_in_place(run_dir: Path, node: str) -> int:
    """How many times a node's torchruns restarted its workers in place (``--max-restarts``): each
    torchrun's attempt folders past its first. A torchrun the launcher started anew (a node
    restarted) counts none, and neither does a restart for a node that joined, which uses up no
    attempt."""
    per_torchrun: dict[Path, int] = {}
    for attempt in attempts_in_order(run_dir, node):
        per_torchrun[attempt.parent] = per_torchrun.get(attempt.parent, 0) + 1
    return sum(count - 1 for count in per_torchrun.values())


def restarted_attempt_errors(run_dir: Path, node: str) -> list[AttemptError]:
    """The errors of a node's attempts that were followed by another (:func:`attempt_errors`,
    less its last attempt's: a node that ended well ended its last attempt well, and a traceback
    its script caught and printed there is no error that ended it)."""
    last = len(attempts_in_order(run_dir, node))
    return [error for error in attempt_errors(run_dir, node) if error.attempt < last]


def latest_error_files(run_dir: Path, node: str) -> dict[int, Path]:
    """torchrun's structured error files of a node's last attempt: local rank -> file."""
    attempts = attempts_in_order(run_dir, node)
    if not attempts:
        return {}
    return {int(p.parent.name): p for p in attempts[-1].glob("*/error.json") if p.parent.name.isdigit()}


def latest_worker_logs(run_dir: Path, node: str) -> dict[int, Path]:
    """torchrun's log of each worker of a node's last attempt: local rank -> file."""
    attempts = attempts_in_order(run_dir, node)
    return worker_logs(attempts[-1]) if attempts else {}


# torch's TORCH_DISTRIBUTED_DEBUG=DETAIL check: "Rank 1 is running collective:
# CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float, ..."
# torch writes a fingerprint without tensors (a barrier's) with no separator: SequenceNumber=8OpType=BARRIER
_FINGERPRINT = re.compile(r"Rank (?P<rank>\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(?P<seq>\d+),?"
                          r"\s*OpType=(?P<op>\w+)(?:, TensorShape=\[(?P<shape>[^\]]*)\])?(?:, TensorDtypes=(?P<dtype>\w+))?")
_DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(?P<how>.*)$")


def short_mismatch(exception: str) -> str:
    """torch's "Detected mismatch between collectives" error in one readable line naming both
    ranks' collectives (``collectives differ: rank 1 ran ALLREDUCE of Float[4] (torch's sequence
    number 3); rank 0 ran ALLREDUCE of Float[1] (torch's sequence number 3) (tensor shapes: 4 vs
    1)``); any other text unchanged."""
    if "Detected mismatch between collectives" not in exception:
        return exception
    found = list(_FINGERPRINT.finditer(exception))
    if not found:
        return exception
    # The first fingerprint is the rank's own. A peer's that reads #0 where the rank's own is
    # further on is not the peer's: where the ranks' collectives differ in kind, torch's exchange
    # of fingerprints brings back an empty one (seen as REDUCE #0, GATHER #0), and its
    # "differences" are against that. At a group's first collective (its own #0 too), such a
    # fingerprint is told by what it lacks: a real reduce or gather moves tensors, and names them.
    unread = {m["rank"] for m in found[1:] if m["seq"] == "0" and (
        found[0]["seq"] != "0" or (m["shape"] is None and m["op"] in ("REDUCE", "GATHER")))}
    # (torch counts a group's collectives from 0: its number is said as torch's, apart from the
    # collective record's, which counts from 1 and may count others, DDP's own among them)
    # (its op is said as a kind the records show, not as torch's empty fingerprint: "it came back as REDUCE, torch's
    # sequence number 0" reads as a reduce the rank made)
    ranks = [f"rank {m['rank']} ran a collective of another kind (torch's check does not say which)"
             if m["rank"] in unread else
             f"rank {m['rank']} ran {m['op']}" + (f" of {m['dtype'] or ''}[{m['shape']}]" if m["shape"] is not None
                                                 else "") + f" (torch's sequence number {m['seq']})"
             for m in found]
    how = None if unread else _DIFFER.search(exception)
    # torch's words, tidied: "Tensor Tensor shapes: 4vs 1  Op type: ..." reads "tensor shapes: 4 vs 1; op type: ..."
    aspects = [re.sub(r"(\S)vs ", r"\1 vs ", aspect.replace("Tensor Tensor", "Tensor"))
               for aspect in re.split(r"\s{2,}|\t", how["how"].strip()) if aspect.strip()] if how else []
    detail = f" ({'; '.join(a.strip()[:1].lower() + a.strip()[1:] for a in aspects)})" if aspects else ""
    return f"collectives differ (--debug-collectives): {'; '.join(ranks)}{detail}"

"""A worker's pdb, reached from the host: ``breakpoint()``, ``pdb.set_trace()`` and
``torch.distributed.breakpoint()`` in a worker wait for ``python -m orchestrate debug RUN RANK``,
instead of reading a stdin the worker does not have (pdb reads end-of-input there at once, and
the rank dies of ``bdb.BdbQuit``).

A rank that stops in the debugger listens on ``pdb-rank<RANK>.sock`` in the run's debug
directory (mounted in every node, so the host's ``debug`` command reaches it; the socket is the
worker's user's only) and says so on the progress channel: where it stopped, and which call
stopped it. One terminal at a time holds it, and one thread of the rank at a time (another that
stops waits for its turn). pdb's commands work as they do in a terminal, but ``interact``, which
would read the worker's own stdin; ``continue`` with no breakpoint left, or end-of-input (Ctrl-D,
a terminal that went away), lets the rank go on and frees the terminal; ``quit`` ends the script
with ``bdb.BdbQuit``, as pdb does. With a breakpoint set in the session (``break``), ``continue``
keeps the session while the rank runs on (said as ``running``: the launcher's hang watchdog
watches it again) and stops it there again, as the script's next ``breakpoint()`` does; a
terminal gone meanwhile is met as end-of-input there.

With ``run --pdb`` (``$DDP_POST_MORTEM``), an error the script does not catch stops the rank the
same way, after its traceback is printed: pdb's post-mortem of the error waits for a terminal, at
the innermost frame of the user's own code (``down`` goes on into the library that raised), and
the rank then ends with its error as it would have (:func:`post_mortem`). The script's own
``pdb.post_mortem()`` (and ``pdb.pm()``) waits the same way, and the script goes on after it
(:func:`users_post_mortem`).

``PYTHONBREAKPOINT`` set in the run's environment (``0`` turns ``breakpoint()`` off) is the
user's choice and is left alone. A process the worker forked (a DataLoader's worker) has pdb as
it is. Standard library only; pdb is imported at the first stop (or when the script imports it).
"""
from __future__ import annotations

import functools
import linecache
import os
import socket
import sys
import threading
from typing import Any, Callable, Optional

from orchestrate.node.hook_frames import is_hook_file
from orchestrate.node.peer_loss import says_a_peer_was_lost

SOCKET_PREFIX = "pdb-rank"
SOCKET_SUFFIX = ".sock"
# The calls that stop a rank, as the launcher names them.
BREAKPOINT_CALL = "breakpoint()"
SET_TRACE_CALL = "pdb.set_trace()"
DIST_BREAKPOINT_CALL = "torch.distributed.breakpoint()"
BREAK_CALL = "a breakpoint set in its session"
POST_MORTEM_CALL = "an uncaught error (--pdb)"
USER_POST_MORTEM_CALL = "pdb.post_mortem()"  # the script's own (pdb.pm() calls it too)
POST_MORTEM_CALLS = (POST_MORTEM_CALL, USER_POST_MORTEM_CALL)
POST_MORTEM_ENV = "DDP_POST_MORTEM"  # set by the plan for run --pdb
RUN_ID_ENV = "DDP_RUN_ID"  # the run, set per node by the plan: the rank's line names the command that reaches it
# What the rank's own line starts with as it waits for a terminal, in its output (``logs RUN`` shows
# it; the launcher's console shows its own line instead).
STOP_LINE_PREFIX = "[ddp-compose] "
ERROR_TEXT_MOST = 160  # characters of a post-mortem's error said where the rank stopped


def socket_name(rank: int) -> str:
    """The file name a rank's debugger listens on, in the run's debug directory."""
    return f"{SOCKET_PREFIX}{rank}{SOCKET_SUFFIX}"


class _Turn:
    """One session at a time per process: the debugger whose session holds the terminal now. A
    stop in another thread waits for its turn; a session is handed on whole (the script stopped
    again in the same thread, or a post-mortem takes over a session that runs on), whichever thread
    then ends it."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.holder: Any = None

    def take(self, debugger: Any) -> None:
        with self.condition:
            while self.holder is not None and self.holder is not debugger:
                self.condition.wait()
            self.holder = debugger

    def hand_on(self, earlier: Any, later: Any) -> None:
        with self.condition:
            if self.holder is earlier:
                self.holder = later

    def give_back(self, debugger: Any) -> None:
        with self.condition:
            if self.holder is debugger:
                self.holder = None
                self.condition.notify_all()


class _Settings:
    """Where this process's debugger listens and whom it tells (set by :func:`install`)."""

    directory: Optional[str] = None
    rank = 0
    pid = 0  # the worker's own process: a process it forked (a DataLoader's worker) is not the rank's
    stopped: Optional[dict[str, Any]] = None  # where the rank is stopped now, as its snapshots say
    examined: Any = None  # a post-mortem's error's frames up to the user's, as its snapshots' main stack
    current: Any = None  # the debugger whose session has a terminal now
    turn = _Turn()  # one session at a time per process: a second thread's stop waits for it
    report: Callable[[dict[str, Any]], None] = staticmethod(lambda state: None)
    where: Callable[[str], str] = staticmethod(lambda filename: filename)


class _Connection:
    """The debugging terminal's end, as pdb's stdin and stdout: text lines over a socket. A
    terminal that went away reads as end-of-input and takes writes silently, so that the user's
    code never sees the debugger's socket fail."""

    def __init__(self, connection: socket.socket) -> None:
        self.socket = connection
        self.reader = connection.makefile("r", encoding="utf-8", errors="replace", newline="\n")
        self.closed = False

    def readline(self) -> str:
        if self.closed:
            return ""
        try:
            return self.reader.readline()
        except OSError:
            self.close()
            return ""

    def write(self, text: str) -> int:
        if not self.closed:
            try:
                self.socket.sendall(text.encode("utf-8", errors="replace"))
            except OSError:
                self.close()
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for closing in (self.reader.close, self.socket.close):
                try:
                    closing()
                except OSError:
                    pass


@functools.lru_cache(maxsize=None)
def debugger_class() -> Any:
    """The debugger's class (see :class:`RemotePdb` inside): made at the first stop, or once pdb
    is imported, so that a worker that never stops does not import pdb for it."""
    import pdb

    class RemotePdb(pdb.Pdb):
        """pdb whose terminal is the host's ``debug`` command (see the module's text). Made with no
        arguments, as torch's ``torch.distributed.breakpoint()`` makes its debugger."""

        call = BREAKPOINT_CALL

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("nosigint", True)  # no SIGINT handler of pdb's in torchrun's worker
            super().__init__(*args, **kwargs)
            self.connection: Optional[_Connection] = None
            self.pending: list[str] = []  # what it said before a terminal connected (torch's header)
            # the host reaches this process's debugger (else it is pdb as it is, on the process's stdin)
            self.reachable = _Settings.directory is not None and os.getpid() == _Settings.pid
            self.thread = threading.get_ident()
            self.running = False  # a terminal holds the session, and the rank runs to a breakpoint set in it
            self.again_by = BREAK_CALL  # what stops a running session's rank again
            self.raised = ""  # a post-mortem's error, said in place of the source line
            self.examined: Any = None  # a post-mortem's frame to start at (the user's innermost)
            self.examined_traceback: Any = None  # the error's own traceback (not a chained error's)
            self.examined_line: Optional[int] = None  # the line of the frame a post-mortem starts at
            self.taken_from: Any = None  # the debugger whose session this one took over

        def take_over(self, earlier: Any) -> None:
            """Go on with ``earlier``'s session, whose script stopped again (this tracer replaces its)."""
            self.taken_from = earlier
            self.connection, earlier.connection = earlier.connection, None
            self.stdin = self.stdout = self.connection  # type: ignore[assignment]
            self.use_rawinput = False
            self.running, self.again_by = True, self.call  # said where it stops, at its first interaction
            _Settings.turn.hand_on(earlier, self)
            _Settings.current = self

        def connected(self) -> bool:
            return self.connection is not None and not self.connection.closed

        def message(self, msg: Any, end: str = "\n") -> None:  # (``end``: Python 3.13's pdb passes it)
            if self.connected():
                self.stdout.write(f"{msg}{end}")
            elif self.reachable:  # said to the terminal that comes
                self.pending.append(f"{msg}{end}")
            else:
                print(msg, end=end, file=self.stdout)

        def do_interact(self, arg: str) -> None:
            self.error("interact reads the worker's own stdin, which no terminal reaches: run statements with !"
                       " (!x = 3) instead")

        def set_trace(self, frame: Any = None) -> None:
            if frame is None:
                frame = sys._getframe().f_back
            self.connect(frame)
            super().set_trace(frame)

        def setup(self, frame: Any, traceback: Any) -> None:
            super().setup(frame, traceback)
            # the stack as under python3: from the script's first frame, not the hook's and runpy's
            # frames that run it
            hook = 0
            while (hook < min(len(self.stack) - 1, self.curindex)
                   and is_hook_file(self.stack[hook][0].f_code.co_filename)):
                hook += 1
            self.stack, self.curindex = self.stack[hook:], self.curindex - hook
            # a post-mortem starts at the user's own frame, not in the library that raised (a
            # chained error's at its own innermost)
            at = [i for i, (frame, _) in enumerate(self.stack) if frame is self.examined]
            if at and traceback is self.examined_traceback:
                self.curindex = at[-1]
                self.curframe = self.stack[self.curindex][0]
                self.curframe_locals = self.curframe.f_locals

        def interaction(self, frame: Any, traceback: Any) -> None:
            if not self.connected():  # the terminal went away: wait for another
                self.connect(frame)
            elif self.running:  # a breakpoint set in the session: the rank stops again in it
                self.running = False
                _Settings.stopped = {"call": self.again_by, **where_called(frame, self.again_by), "attached": True}
                _Settings.report({"state": "attached", **_Settings.stopped})
            super().interaction(frame, traceback)

        def connect(self, frame: Any) -> None:
            """Wait until a terminal connects (and until another thread's session ended); nothing
            where the host cannot reach this process, or this session has its terminal."""
            if not self.reachable or self.connected() or _Settings.directory is None:
                return
            _Settings.turn.take(self)
            path = os.path.join(_Settings.directory, socket_name(_Settings.rank))
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            said = False
            try:
                try:
                    os.unlink(path)  # a session of an earlier stop, or of a process this rank had before
                except FileNotFoundError:
                    pass
                server.bind(path)
                os.chmod(path, 0o600)
                server.listen(1)
                _Settings.stopped = {"call": self.call, **where_called(frame, self.call, self.examined_line),
                                     "attached": False}
                if self.raised:
                    _Settings.stopped["text"] = self.raised
                said = True  # (before the record: an interrupt meanwhile still says it left)
                _Settings.report({"state": "waits", **_Settings.stopped})
                run_id = os.environ.get(RUN_ID_ENV) or "RUN_ID"
                sys.stderr.write(stop_line(_Settings.rank, _Settings.stopped, run_id) + "\n")
                sys.stderr.flush()
                connection, _ = server.accept()
            except OSError as exc:  # no socket here: pdb as it is, never an error in the script
                _Settings.stopped, self.reachable = None, False
                _Settings.turn.give_back(self)
                if said:
                    _Settings.report({"state": "left"})
                instead = "no post-mortem of the error" if self.raised else "pdb reads the worker's own stdin"
                sys.stderr.write(f"[ddp-compose] {self.call}: the host cannot reach this rank's debugger ({exc});"
                                 f" {instead}\n")
                for text in self.pending:
                    self.stdout.write(text)
                self.pending.clear()
                return
            except BaseException:  # an interrupt, a SIGTERM: the rank ends
                _Settings.stopped = None
                _Settings.turn.give_back(self)
                if said:
                    _Settings.report({"state": "left"})
                raise
            finally:
                server.close()
                try:
                    os.unlink(path)  # one terminal at a time: a second finds no rank waiting
                except FileNotFoundError:
                    pass
            self.connection = _Connection(connection)
            self.stdin = self.stdout = self.connection  # type: ignore[assignment]
            self.use_rawinput = False
            self.thread, self.running = threading.get_ident(), False
            _Settings.current = self
            _Settings.stopped = {**(_Settings.stopped or {}), "attached": True}
            _Settings.report({"state": "attached"})
            for text in self.pending:
                self.stdout.write(text)
            self.pending.clear()

        def detach(self) -> None:
            """End the session: the terminal is freed, and the rank told to have left."""
            connection, self.connection = self.connection, None
            if connection is not None:  # (closed already where the terminal went away)
                connection.close()
                self.running = False
                _Settings.stopped = None
                if _Settings.current is self:
                    _Settings.current = None
                _Settings.report({"state": "left"})
                _Settings.turn.give_back(self)

        def do_continue(self, arg: str) -> Any:
            stop = super().do_continue(arg)
            if stop and self.breaks:  # the session stays, and the rank runs to a breakpoint set in it
                self.running = True
                _Settings.stopped = None
                _Settings.report({"state": "running"})
            elif stop:  # nothing will stop the rank in this session again
                self.detach()
            return stop

        do_c = do_cont = do_continue

        def do_EOF(self, arg: str) -> Any:
            """End-of-input (Ctrl-D, a terminal gone): leave the debugger, and let the rank go on (pdb's own
            end where the host cannot reach this process: it quits)."""
            if not self.reachable:
                return super().do_EOF(arg)
            self.message("")
            self.clear_all_breaks()
            self.set_continue()
            self.detach()
            return 1

        def do_quit(self, arg: str) -> Any:
            stop = super().do_quit(arg)
            self.detach()
            return stop

        do_q = do_exit = do_quit

        def examine(self, traceback: Any, said: str, exc: Optional[BaseException] = None) -> None:
            """Post-mortem of an error's ``traceback`` (``said``: what the rank says it stopped at;
            ``exc``: the error, where known): wait for a terminal at the user's innermost frame of
            it (or go on with the session that has one, saying so), and take pdb's commands there;
            whatever ends them ends the session (nothing runs on to a breakpoint: the rank ends
            with its error, or the script that asked goes on)."""
            import traceback as tracebacks

            entry = users_entry(traceback)
            self.raised = said
            self.examined, self.examined_line = entry.tb_frame, entry.tb_lineno
            depth, walked = 1, traceback
            while walked is not entry:
                depth, walked = depth + 1, walked.tb_next
            _Settings.examined = (threading.get_ident(), tracebacks.extract_tb(traceback, limit=depth))
            self.examined_traceback = traceback
            self.reset()
            # no breakpoint of an earlier session stops the rank again (an expression evaluated
            # here, or its exit's code), and no earlier tracer of this thread runs on; the session
            # taken over forgets its breakpoints too (its thread may still run, and asks for them)
            sys.settrace(None)
            self.clear_all_breaks()
            if self.taken_from is not None:
                self.taken_from.breaks = {}
            try:
                if self.connected():  # a session's rank ran on to this error: it stops here, in that session
                    self.running = False
                    _Settings.stopped = {"call": self.call, **where_called(entry.tb_frame, self.call, entry.tb_lineno),
                                         "text": self.raised, "attached": True}
                    _Settings.report({"state": "attached", **_Settings.stopped})
                    self.message(self.raised)  # (a terminal that connects now is told by `debug`)
                    if not self.connected():  # that terminal had gone: the session ends, and another may come
                        self.detach()
                if not self.connected():
                    self.connect(entry.tb_frame)
                if not self.connected():  # the host cannot reach this process: no post-mortem on a stdin it lacks
                    self.pending.clear()
                    return
                # (Python 3.13's pdb takes the error itself, and its chained errors with it)
                self.interaction(None, exc if exc is not None and sys.version_info >= (3, 13) else traceback)
            finally:
                _Settings.examined = None
                if self.connected():  # (`continue` with a breakpoint set here: no tracer would reach it)
                    self.clear_all_breaks()
                    self.detach()

    return RemotePdb


def where_text(file: str, line: Any, function: str) -> str:
    """``bp.py:9 in <module>``: where a rank stopped, as the launcher and the rank name it."""
    return f"{file}:{line} in {function}" if function else f"{file}:{line}"


def stop_words(rank: int, where: str, what: str, run_id: str) -> str:
    """``rank 1 stopped in its debugger at bp.py:9 in <module>: breakpoint(); debug it with: python
    -m orchestrate debug RUN 1``: said by the rank (:func:`stop_line`) and by the launcher alike."""
    return (f"rank {rank} stopped in its debugger at {where}: {what}; debug it with:"
            f" python -m orchestrate debug {run_id} {rank}")


def stop_line(rank: int, stopped: dict[str, Any], run_id: str) -> str:
    """The rank's own line as it waits for a terminal: ``[ddp-compose] `` and :func:`stop_words`."""
    where = where_text(stopped.get("file", ""), stopped.get("line"), stopped.get("function", ""))
    return STOP_LINE_PREFIX + stop_words(rank, where, stopped.get("text") or stopped.get("call", ""), run_id)


def examined_stack() -> Any:
    """The thread a post-mortem examines an error in, and the error's frames, outermost first, up
    to the user's frame it stopped in (``traceback.FrameSummary`` entries), or None: the stack its
    snapshots show for that thread, which is in the debugger's code meanwhile."""
    return _Settings.examined


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or what Python's own report says where that raises."""
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


def error_text(exc: BaseException) -> str:
    """``ValueError: boom``: an error's type and the first line of its message, cut short."""
    message = message_of(exc)
    first = (f"{type(exc).__name__}: {message}" if message else type(exc).__name__).splitlines()[0]
    return first if len(first) <= ERROR_TEXT_MOST else first[:ERROR_TEXT_MOST - 3] + "..."


def is_users_file(filename: str) -> bool:
    """Whether a file is the user's own code: not Python's, not an installed package's (torch's),
    not this hook's, and not made up (``<string>``, a frozen module)."""
    import sysconfig

    if filename.startswith("<") or is_hook_file(filename):
        return False
    libraries = {sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    return not any(filename.startswith(os.path.join(path, "")) for path in libraries if path)


def users_entry(traceback: Any) -> Any:
    """The traceback's innermost entry in the user's own code (its innermost of all where it has
    none): where a post-mortem starts."""
    chosen = innermost = traceback
    while innermost.tb_next is not None:
        innermost = innermost.tb_next
        if is_users_file(innermost.tb_frame.f_code.co_filename):
            chosen = innermost
    return chosen if is_users_file(chosen.tb_frame.f_code.co_filename) else innermost


def post_mortem(exc: BaseException, environ: Any = os.environ) -> None:
    """``run --pdb``: a rank whose script raised ``exc`` and did not catch it (its traceback said)
    waits for a terminal in pdb's post-mortem of it, where the host reaches this process; it ends
    with its error once the session ends. Nothing for an interrupt, an exit, a ``quit`` from pdb, an
    error with no traceback, or one that says a peer was lost (a consequence of another rank's
    failure, said in one line); a debugger that fails says why and lets the rank end."""
    if (not environ.get(POST_MORTEM_ENV) or _Settings.directory is None or os.getpid() != _Settings.pid
            or exc.__traceback__ is None or isinstance(exc, (KeyboardInterrupt, SystemExit))
            or type(exc).__module__ == "bdb" and type(exc).__name__ == "BdbQuit"):
        return
    try:
        if says_a_peer_was_lost(f"{type(exc).__name__}: {message_of(exc)}"):  # its cause is a peer's: that one is worth debugging
            sys.stderr.write(f"[ddp-compose] --pdb: no post-mortem of rank {_Settings.rank}'s {error_text(exc)}:"
                             " a peer was lost first\n")
            return
        debugger_for(POST_MORTEM_CALL).examine(exc.__traceback__, f"uncaught {error_text(exc)}", exc)
    except Exception as broken:  # never a second error in place of the script's own
        sys.stderr.write(f"[ddp-compose] --pdb: the post-mortem debugger failed ({error_text(broken)})\n")


def stopped_in_debugger() -> Optional[dict[str, Any]]:
    """Where this rank is stopped in its debugger (the call, file, line, function, source text,
    and whether a terminal is attached), or None: said in its snapshots."""
    return _Settings.stopped


def where_called(frame: Any, call: str, line: Optional[int] = None) -> dict[str, Any]:
    """Where the script stopped: the file (as the user knows it), line, function and source text of
    ``frame``, or of its caller for ``torch.distributed.breakpoint()`` (whose debugger starts in
    torch's own function); ``line``: a post-mortem's, from the error's traceback (a frame that
    still runs, the one that caught it, is at another line now)."""
    if call == DIST_BREAKPOINT_CALL and frame is not None and frame.f_back is not None:
        frame = frame.f_back
    if frame is None:
        return {"file": "", "line": 0, "function": "", "text": ""}
    code = frame.f_code
    line = frame.f_lineno if line is None else line
    return {"file": _Settings.where(code.co_filename), "line": line, "function": code.co_name,
            "text": linecache.getline(code.co_filename, line).strip()}


def debugger_for(call: str) -> Any:
    """A debugger that names ``call`` as what stopped the rank: the one whose session has a terminal
    now, where this thread's script stops again, takes over its terminal (the session goes on, as a
    terminal's own pdb would), and so does a post-mortem where another thread's session runs on
    (its breakpoints may never come: that thread may have ended); else it waits for one."""
    made = debugger_class()()
    made.call = call
    current = _Settings.current
    if current is not None and current.connected() and (
            current.thread == threading.get_ident() or call in POST_MORTEM_CALLS and current.running):
        made.take_over(current)
    return made


def breakpoint_hook(*args: Any, header: Optional[str] = None, **kwargs: Any) -> None:
    """``sys.breakpointhook``: ``breakpoint()`` stops in the calling frame (``header``, as pdb's
    ``set_trace`` takes it, is said first)."""
    debugger = debugger_for(BREAKPOINT_CALL)
    if header is not None:
        debugger.message(header)
    debugger.set_trace(sys._getframe().f_back)


def set_trace(*, header: Optional[str] = None, **later_options: Any) -> None:
    """``pdb.set_trace``: stop in the calling frame (options of later Pythons' are let be)."""
    debugger = debugger_for(SET_TRACE_CALL)
    if header is not None:
        debugger.message(header)
    debugger.set_trace(sys._getframe().f_back)


def distributed_debugger() -> Any:
    """The debugger ``torch.distributed.breakpoint()`` makes (in place of torch's
    ``_DistributedPdb``): torch then holds the other ranks in a barrier until this one goes on."""
    return debugger_for(DIST_BREAKPOINT_CALL)


def users_post_mortem(plain: Callable[..., None]) -> Callable[..., None]:
    """``pdb.post_mortem`` (and with it ``pdb.pm()``, which calls it): the script's own post-mortem
    of an error (given, or the one being handled) waits for a terminal as a breakpoint does, and
    the script goes on once the session ends; ``plain`` (pdb's own) where the host cannot reach
    this process."""

    @functools.wraps(plain)
    def post_mortem(t: Any = None) -> None:
        exc = t if isinstance(t, BaseException) else None
        traceback = exc.__traceback__ if exc is not None else t
        if t is None:
            _, exc, traceback = sys.exc_info()
        if exc is None:  # a traceback given (pdb.pm() gives the last one): its error, where it is known
            known = (sys.exc_info()[1], getattr(sys, "last_exc", None), getattr(sys, "last_value", None))
            exc = next((e for e in known if e is not None and e.__traceback__ is traceback), None)
        if traceback is None:
            raise ValueError("A valid traceback must be passed if no exception is being handled")
        debugger = debugger_for(USER_POST_MORTEM_CALL)
        if not debugger.reachable:
            return plain(t)
        what = f"{USER_POST_MORTEM_CALL} of {error_text(exc)}" if exc is not None else USER_POST_MORTEM_CALL
        debugger.examine(traceback, what, exc)
    return post_mortem


def route_pdb() -> None:
    """Make ``pdb.set_trace()`` and ``pdb.post_mortem()`` reach the host (run once pdb is imported)."""
    import pdb

    pdb.set_trace = set_trace  # type: ignore[assignment]
    pdb.post_mortem = users_post_mortem(pdb.post_mortem)  # type: ignore[assignment]


def route_torch_breakpoint() -> None:
    """Make ``torch.distributed.breakpoint()`` reach the host (run once torch.distributed is
    imported; torch makes its debugger from this name at each call)."""
    import torch.distributed as dist

    if hasattr(dist, "_DistributedPdb"):
        dist._DistributedPdb = distributed_debugger


def install(directory: str, rank: int, report: Callable[[dict[str, Any]], None],
            where: Callable[[str], str], environ: Any = os.environ) -> bool:
    """Route ``breakpoint()`` (where ``PYTHONBREAKPOINT`` leaves it to Python) to the host's
    ``debug`` command; the caller routes ``pdb.set_trace`` and torch's with :func:`route_pdb`
    and :func:`route_torch_breakpoint` as those are imported. ``report`` says each state on the
    progress channel; ``where`` names a file as the user knows it. Whether ``breakpoint()`` is
    routed."""
    _Settings.directory, _Settings.rank, _Settings.pid = directory, rank, os.getpid()
    _Settings.report, _Settings.where = report, where  # type: ignore[assignment]
    if environ.get("PYTHONBREAKPOINT"):
        return False
    sys.breakpointhook = breakpoint_hook
    return True

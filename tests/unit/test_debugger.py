"""The launcher's side of a rank stopped in its debugger: which ranks are there, from the progress
channel (orchestrate/debugger/states.py); the line that says how to reach one; the hang watchdog,
held while a terminal debugs a rank and naming a rank no terminal came to; and ``debug RUN``,
run as a user runs it against the fake engine."""
from __future__ import annotations

import _thread
import contextlib
import io
import json
import os
import signal
import socket
import sys
import threading
from typing import IO, Iterator, Optional

import pytest

from orchestrate.debugger.states import (ATTACHED, LEFT, RUNNING, WAITS, DebuggerStates, RankInDebugger, choose,
                                         waits_line)
from orchestrate.errors import OrchestrateError
from orchestrate.hangs.diagnosis import diagnose
from orchestrate.hangs.snapshots import Collective, Frame, Probe, RankSnapshot
from orchestrate.node.remote_debugger import POST_MORTEM_CALL, USER_POST_MORTEM_CALL, socket_name
from orchestrate.supervise.progress import DebuggerWatch, ProgressWatch
from tests.fakes import FakeDockerClient, Script, fake_engine
from tests.unit.test_hangs import answering_worker, quick_watchdog  # noqa: F401 - a fixture

STOP = {"state": WAITS, "call": "breakpoint()", "file": "train.py", "line": 9, "function": "<module>",
        "text": "if rank == 1: breakpoint()", "attached": False}


def stopped(rank: int = 1, attached: bool = False) -> RankInDebugger:
    return RankInDebugger(rank, "node1", "a1", "breakpoint()", "train.py", 9, "<module>", 5.0, attached,
                          text="breakpoint()")


def test_a_rank_waits_then_a_terminal_attaches_then_it_leaves_and_each_change_is_told():
    states = DebuggerStates()
    assert states.take(1, "a1", "node1", 5.0, {"state": ATTACHED}) is None  # nothing waited: nothing attached
    change, rank = states.take(1, "a1", "node1", 5.0, STOP)
    assert change == WAITS and rank == RankInDebugger(1, "node1", "a1", "breakpoint()", "train.py", 9, "<module>", 5.0,
                                                      text="if rank == 1: breakpoint()")
    assert states.take(1, "a1", "node1", 6.0, None) is None  # a step, or any other record
    assert states.take(1, "a1", "node1", 6.0, {"state": ATTACHED}) == (ATTACHED, states.ranks[1])
    assert states.attached() == [1] and states.ranks[1].attached
    assert states.take(1, "a1", "node1", 7.0, {"state": LEFT})[0] == LEFT
    assert states.ranks == {} and states.attached() == []


def test_a_rank_that_runs_on_to_a_breakpoint_set_in_its_session_is_not_held_and_stops_again_where_it_says():
    states = DebuggerStates()
    states.take(1, "a1", "node1", 5.0, STOP)
    states.take(1, "a1", "node1", 6.0, {"state": ATTACHED})
    change, rank = states.take(1, "a1", "node1", 7.0, {"state": RUNNING})
    assert change == RUNNING and rank.running and rank.attached
    assert states.attached() == []  # it runs: the watchdog watches it as any rank
    again = {"state": ATTACHED, "call": "a breakpoint set in its session", "file": "train.py", "line": 30,
             "function": "step", "text": "loss.backward()", "attached": True}
    change, rank = states.take(1, "a1", "node1", 8.0, again)
    assert change == ATTACHED and (rank.line, rank.function, rank.attached, rank.running) == (30, "step", True, False)
    assert states.attached() == [1]


def test_a_rank_whose_script_ended_or_whose_process_was_replaced_is_in_no_debugger():
    states = DebuggerStates()
    states.take(1, "a1", "node1", 5.0, STOP)
    assert states.take(1, "a1", "node1", 6.0, None, finished=True)[0] == LEFT
    states.take(2, "a1", "node1", 5.0, STOP)
    assert states.take(2, "a2", "node1", 6.0, None) is None  # an elastic restart's new process
    assert states.ranks == {}
    change, rank = states.take(2, "a3", "node1", 7.0, {**STOP, "line": "9"})  # a newer one stops: a line not read
    assert change == WAITS and rank.attempt == "a3" and rank.line == 0


def test_the_rank_to_debug_is_the_one_named_or_the_only_one_and_every_other_case_says_what_to_do():
    one = {1: stopped(1)}
    assert choose(one, None, "r") == one[1] and choose(one, 1, "r") == one[1]
    with pytest.raises(OrchestrateError, match=r"^no rank of run r is in its debugger \(a script stops there at"
                                               r" breakpoint\(\), pdb.set_trace\(\), torch.distributed.breakpoint\(\) or"
                                               r" pdb.post_mortem\(\), and with run --pdb at an error it does not catch\)$"):
        choose({}, None, "r")
    with pytest.raises(OrchestrateError, match=r"^ranks 0, 1 of run r are in their debugger: name one"
                                               r" \(python -m orchestrate debug r 1\)$"):
        choose({0: stopped(0, attached=True), 1: stopped(1)}, None, "r")  # the one still waiting
    with pytest.raises(OrchestrateError, match=r"^rank 2 of run r is not in its debugger; rank 1 is$"):
        choose(one, 2, "r")
    with pytest.raises(OrchestrateError, match=r"^rank 2 of run r is not in its debugger$"):
        choose({}, 2, "r")
    with pytest.raises(OrchestrateError, match=r"^rank 1 of run r is in a debugging session already"):
        choose({1: stopped(1, attached=True)}, 1, "r")


def test_the_launchers_line_names_where_the_rank_stopped_its_source_and_the_command_that_reaches_it():
    assert waits_line(stopped(1), "20261130-1") == (
        "rank 1 stopped in its debugger at train.py:9 in <module>: breakpoint(); debug it with:"
        " python -m orchestrate debug 20261130-1 1")


def write_records(directory, rank: int, *records: dict) -> None:
    with open(directory / f"rank{rank}.jsonl", "a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps({"rank": rank, "time": 5.0, "attempt": "a1", "node": "node1", **record}) + "\n")


def test_the_watch_takes_debugger_records_as_changes_not_steps_and_debug_reads_them_alike(tmp_path):
    watch = ProgressWatch(tmp_path, lambda kind, **fields: None)
    write_records(tmp_path, 1, {"step": 3}, {"debugger": STOP})
    watch.poll(10.0, None)
    assert watch.max_step == 3 and watch.records == 2
    assert [(c, r.rank) for c, r in watch.debugger_changes] == [(WAITS, 1)]
    assert DebuggerWatch(tmp_path).ranks() == {1: watch.debugger.ranks[1]}
    write_records(tmp_path, 1, {"debugger": {"state": ATTACHED}}, {"debugger": {"state": LEFT}}, {"step": 4})
    watch.poll(11.0, None)
    assert [c for c, _ in watch.debugger_changes] == [WAITS, ATTACHED, LEFT] and watch.max_step == 4
    assert DebuggerWatch(tmp_path).ranks() == {}


def debugger_snapshot(rank: int, attached: bool, stop: dict = STOP) -> RankSnapshot:
    stack = (Frame("train.py", 9, "<module>", "breakpoint()"),)
    return RankSnapshot.from_json({
        "rank": rank, "node": "node1", "pid": 10, "time": 0.0, "cpu_s": 1.0, "completed": 0,
        "stacks": [{"main": True, "frames": [[f.file, f.line, f.function, f.code] for f in stack]
                    + [["/usr/lib/python3.11/socket.py", 294, "accept", "fd, addr = self._accept()"]]}],
        "debugger": {**stop, "attached": attached}})


def test_a_rank_that_waits_for_a_terminal_is_named_with_the_command_and_the_debuggers_frames_left_out():
    waiting = debugger_snapshot(1, attached=False)
    assert [f.file for f in waiting.stack] == ["train.py"]  # up to the script's call
    in_all_reduce = (Collective(1, "all_reduce", "default", "float32[2]", "train.py:10", "entered"),)
    peer = RankSnapshot(0, "node0", 9, 0.0, 1.0, (Frame("train.py", 10, "<module>", "dist.all_reduce(t)"),),
                        in_all_reduce, 0)
    found = diagnose(Probe("b", 5.0, {0: peer, 1: waiting}), Probe("a", 0.0, {0: peer, 1: waiting}), {0, 1}, {}, 30)
    found.run_id = "r7"
    assert [a.state for a in found.activities] == ["collective", "debugger"]
    assert found.headline == ("no progress for 30 s: rank 0 waits in all_reduce(float32[2]) #1 at train.py:10; rank 1 is"
                              " at #0 (not in a collective: stopped in its debugger at train.py:9 in <module>)")
    assert "  rank 1: stopped in its debugger at train.py:9 in <module>" in found.lines()
    assert found.lines()[-1] == ("  rank 1 stopped in its debugger at train.py:9 (if rank == 1: breakpoint()), no"
                                 " terminal came: the others wait for it in their collectives; debug it with python -m"
                                 " orchestrate debug r7 1, or take the breakpoint out")
    alone = diagnose(Probe("b", 5.0, {1: waiting}), None, {1}, {}, 30)  # no rank waits for it: none said to
    assert alone.lines()[-1] == ("  rank 1 stopped in its debugger at train.py:9 (if rank == 1: breakpoint()), no"
                                 " terminal came: debug it with python -m orchestrate debug RUN_ID 1, or take the"
                                 " breakpoint out")
    post_mortem = debugger_snapshot(1, attached=False, stop=POST_MORTEM_STOP)
    after_error = diagnose(Probe("b", 5.0, {1: post_mortem}), None, {1}, {}, 30)  # run --pdb's stop: no breakpoint
    assert after_error.lines()[-1] == ("  rank 1 stopped in its debugger at train.py:12 (uncaught RuntimeError: mat1"
                                       " and mat2 shapes cannot be multiplied), no terminal came: debug it with python"
                                       " -m orchestrate debug RUN_ID 1, or run without --pdb")
    own = debugger_snapshot(1, attached=False, stop={**POST_MORTEM_STOP, "call": USER_POST_MORTEM_CALL})
    assert diagnose(Probe("b", 5.0, {1: own}), None, {1}, {}, 30).lines()[-1].endswith(
        ", or take the pdb.post_mortem() call out")


def test_a_rank_a_terminal_debugs_keeps_its_whole_stack_and_gets_no_hint():
    debugged = debugger_snapshot(1, attached=True)
    assert [f.file for f in debugged.stack][-1].endswith("socket.py")  # where the terminal has it now
    found = diagnose(Probe("b", 5.0, {1: debugged}), None, {1}, {}, 30)
    assert found.lines()[-1] == "  rank 1 stopped in its debugger at train.py:9 (if rank == 1: breakpoint()), a terminal" \
                              " debugs it"


def in_debugger(job, rank: int, *states: dict):
    """A Script.then: the worker says these debugger states on the progress channel."""
    def say() -> None:
        directory = job.run_dir / "progress"
        directory.mkdir(parents=True, exist_ok=True)
        write_records(directory, rank, *({"debugger": state} for state in states))
    return say


@pytest.mark.timeout(60)
def test_a_terminal_debugging_a_rank_holds_the_hang_watchdog_and_the_launcher_says_the_stop_and_the_end(
        make_run, quick_watchdog):  # noqa: F811
    import time

    stop = threading.Event()
    job = make_run(nodes=1, hang_timeout=1.5)
    stuck = [{"seq": 1, "op": "barrier", "group": "default", "shapes": "", "at": "train.py:30", "state": "entered"}]
    started = time.monotonic()
    answers = answering_worker(job, 0, stuck, stop=stop)

    def stops_and_attaches() -> None:
        answers()
        in_debugger(job, 0, STOP, {"state": ATTACHED})()
    job.client = fake_engine(FakeDockerClient(), node0=[Script(
        ["[0|0]:start"], then=stops_and_attaches, after=["[0|0]:done"],
        after_when=lambda: time.monotonic() - started > 6 and (in_debugger(job, 0, {"state": LEFT})() or True))])
    try:
        result = job.run()
    finally:
        stop.set()
    said = job.out.getvalue()
    assert result.succeeded and not result.hung, said[-2000:]
    assert ("[orchestrate] rank 0 stopped in its debugger at train.py:9 in <module>: if rank == 1: breakpoint();"
            " debug it with: python -m orchestrate debug test-run 0") in said
    assert "[orchestrate] rank 0 left its debugger" in said
    from orchestrate.outcome.events import read_events
    recorded = [e for e in read_events(job.run_dir) if e["event"] == "debugger"]  # for the report page's lanes
    assert [(e["state"], e["rank"], e["node"], e["what"]) for e in recorded] == [
        (state, 0, "node1", "if rank == 1: breakpoint()") for state in ("waits", "attached", "left")]  # as it said


@pytest.mark.timeout(60)
def test_a_rank_no_terminal_came_to_ends_a_hang_timeout_run_hung_with_the_command_that_reaches_it(
        make_run, quick_watchdog):  # noqa: F811
    from orchestrate.outcome.summary import format_summary

    stop = threading.Event()
    job = make_run(nodes=1, hang_timeout=2)
    answers = answering_worker(job, 0, [], stop=stop, debugger=STOP)

    def stops() -> None:
        answers()
        in_debugger(job, 0, STOP)()
    job.client = fake_engine(FakeDockerClient(), node0=[Script(["[0|0]:start"], then=stops, hang=True)])
    try:
        result = job.run()
    finally:
        stop.set()
    summary = format_summary(result)
    assert result.hung, job.out.getvalue()[-2000:]
    assert "debug it with python -m orchestrate debug test-run 0, or take the breakpoint out" in summary


def engine_with_a_run(tmp_path, nproc: int = 1):
    from orchestrate.engine.labels import (COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, NODE_RANK_LABEL,
                                           NPROC_LABEL, RUN_DIR_LABEL, RUN_ID_LABEL)
    client = FakeDockerClient()
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "progress").mkdir(parents=True)
    (run_dir / "debug").mkdir()
    labels = {RUN_ID_LABEL: "r", COMPOSE_PROJECT_LABEL: "ddp-r", RUN_DIR_LABEL: str(run_dir), NPROC_LABEL: str(nproc),
              NODE_RANK_LABEL: "0", COMPOSE_SERVICE_LABEL: "node0"}
    node = client.running("ddp-r-node0-1", labels, script_as="node0")
    return client, run_dir, node


def debug_command(client, *args: str, typed: str = "") -> tuple[int, str, str]:
    from orchestrate.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stderr
    sys.stdin, sys.stderr = io.StringIO(typed), err
    try:
        code = main(["debug", "r", *args], out=out, client=client)
    finally:
        sys.stdin, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def test_debug_says_when_no_rank_is_in_its_debugger_and_when_the_run_has_no_running_node(tmp_path):
    client, run_dir, node = engine_with_a_run(tmp_path)
    code, _, err = debug_command(client)
    assert code == 1 and err.startswith("error: no rank of run r is in its debugger")
    code, _, err = debug_command(client, "--wait", "-1")
    assert code == 2 and err == "error: --wait must be 0 or more seconds, got -1\n"
    # a rank the run never had is bad input (it said "rank 7 of run r is not in its debugger", exit 1)
    code, _, err = debug_command(client, "7", "--wait", "20")
    assert code == 2 and err == "error: no rank 7 in run r (ranks 0-0)\n"
    stopping = threading.Timer(1.0, node.stop)  # the run ends while debug waits for a rank
    stopping.start()
    try:
        code, _, err = debug_command(client, "--wait", "20")
    finally:
        stopping.cancel()
    assert code == 2 and err == ("error: run r ended (stopped) while no rank was in its debugger; its output:"
                                 " python -m orchestrate logs r\n")
    code, _, err = debug_command(client, "--wait", "5")  # a run that had ended: refused at once
    assert code == 2 and err == "error: run r has ended (stopped): no node to debug; its output: python -m orchestrate logs r\n"


POST_MORTEM_STOP = {**STOP, "call": POST_MORTEM_CALL, "line": 12, "function": "step",
                    "text": "uncaught RuntimeError: mat1 and mat2 shapes cannot be multiplied"}


@pytest.mark.parametrize("stop, said", [
    (STOP, ["[orchestrate] rank 0 (node1) stopped at train.py:9 in <module>: if rank == 1: breakpoint()",
            "[orchestrate] pdb's commands work here; `continue` or Ctrl-D lets the rank go on, `quit` ends its script"]),
    (POST_MORTEM_STOP, [
        "[orchestrate] rank 0 (node1) stopped at train.py:12 in step: uncaught RuntimeError: mat1 and mat2 shapes"
        " cannot be multiplied",
        "[orchestrate] pdb's commands look at the frames the error left (`up`, `down`, `p`); `continue`, `quit` or"
        " Ctrl-D let the rank end with its error"]),
    ({**POST_MORTEM_STOP, "call": USER_POST_MORTEM_CALL, "text": "pdb.post_mortem() of KeyError: 'k'"}, [
        "[orchestrate] rank 0 (node1) stopped at train.py:12 in step: pdb.post_mortem() of KeyError: 'k'",
        "[orchestrate] pdb's commands look at the frames the error left (`up`, `down`, `p`); `continue`, `quit` or"
        " Ctrl-D let its script go on"]),
], ids=["breakpoint", "post-mortem", "the-scripts-own-post-mortem"])
def test_debug_reaches_the_rank_and_says_where_it_stopped_how_the_session_ends_and_when_it_left(tmp_path, stop,
                                                                                                  said):
    client, run_dir, _ = engine_with_a_run(tmp_path)
    write_records(run_dir / "progress", 0, {"debugger": stop})
    heard: list[bytes] = []

    def rank(connection: socket.socket) -> None:  # a debugger that answers one command, then goes on
        connection.sendall(b"(Pdb) ")
        heard.append(connection.recv(100))
        connection.sendall(b"42\n")
    thread, server = listening(run_dir, 0, rank)
    try:
        code, out, err = debug_command(client, "0", typed="p x\n")
        thread.join(10)
    finally:
        server.close()
    assert heard == [b"p x\n"]
    assert code == 0 and out == "(Pdb) 42\n"
    assert err.splitlines() == [*said, "[orchestrate] the session with rank 0 ended"]


def listening(run_dir, rank: int, debugger) -> tuple[threading.Thread, socket.socket]:
    """A rank's debugger socket, served once by ``debugger(connection)`` on a thread of its own."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(run_dir / "debug" / socket_name(rank)))
    server.listen(1)
    server.settimeout(10)

    def serve() -> None:
        try:
            connection, _ = server.accept()
        except OSError:
            return  # no terminal came (the test closed the socket, or 10 s passed)
        with connection:
            connection.settimeout(10)  # a debugger that waits for what never comes ends: no test hangs on it
            debugger(connection)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, server


def answers_once(connection: socket.socket, heard: list[bytes]) -> None:
    connection.sendall(b"(Pdb) ")
    heard.append(connection.recv(100))


def test_debug_reaches_the_rank_asked_for_among_several_and_names_no_node_where_none_was_recorded(tmp_path):
    client, run_dir, _ = engine_with_a_run(tmp_path, nproc=2)
    write_records(run_dir / "progress", 0, {"debugger": STOP})
    write_records(run_dir / "progress", 1, {"debugger": {**STOP, "line": 11}, "node": ""})
    zero = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # rank 0 listens too, but nobody takes its calls
    zero.bind(str(run_dir / "debug" / socket_name(0)))
    zero.listen(1)
    heard: list[bytes] = []
    one, one_server = listening(run_dir, 1, lambda connection: answers_once(connection, heard))
    try:
        code, out, err = debug_command(client, "1", typed="c\n")
        one.join(10)
        zero.setblocking(False)
        with pytest.raises(BlockingIOError):
            zero.accept()  # no terminal called rank 0
    finally:
        zero.close()
        one_server.close()
    assert code == 0 and out == "(Pdb) " and heard == [b"c\n"]
    assert err.splitlines()[0] == "[orchestrate] rank 1 stopped at train.py:11 in <module>: if rank == 1: breakpoint()"
    assert err.splitlines()[-1] == "[orchestrate] the session with rank 1 ended"


@contextlib.contextmanager
def open_keyboard(typed: bytes = b"") -> Iterator[IO[str]]:
    """A terminal's input with ``typed`` on it that stays open (more could be typed): it ends only
    with the test, never by itself."""
    reading, writing = os.pipe()
    os.write(writing, typed)
    keyboard = os.fdopen(reading)
    try:
        yield keyboard
    finally:
        os.close(writing)  # its end first: the session's thread that reads it returns, and lets go of it
        keyboard.close()


class InterruptingTerminal(io.StringIO):
    """A terminal that brings ``times`` Ctrl-Cs as it is written ``at`` (any text, when None), before
    the text is shown; ``tried``: every text it was asked to write."""

    def __init__(self, at: Optional[str] = None, times: int = 1) -> None:
        super().__init__()
        self.at, self.times = at, times
        self.tried: list[str] = []

    def write(self, text: str) -> int:
        self.tried.append(text)
        if self.at is None or text == self.at:
            for _ in range(self.times):
                signal.raise_signal(signal.SIGINT)
        return super().write(text)


def test_debug_interrupted_lets_the_rank_go_on_and_says_so(tmp_path):
    """Ctrl-C while the terminal still types (its input open): end-of-input goes to pdb, its last
    words are shown, and the session ends with the interrupt's exit code and a line saying so."""
    client, run_dir, _ = engine_with_a_run(tmp_path)
    write_records(run_dir / "progress", 0, {"debugger": STOP})
    heard: list[bytes] = []
    out = io.StringIO()

    def debugger(connection: socket.socket) -> None:
        connection.sendall(b"(Pdb) ")
        heard.append(connection.recv(100))  # what was typed: the session is under way
        _thread.interrupt_main()  # Ctrl-C in the terminal that debugs it, maybe as its prompt is read
        heard.append(connection.recv(100))  # end-of-input: pdb lets the rank go on
        connection.sendall(b"--Return--\n")
    thread, server = listening(run_dir, 0, debugger)
    old = sys.stdin, sys.stderr
    try:
        from orchestrate.cli.main import main

        with open_keyboard(b"p x\n") as keyboard:
            sys.stdin, sys.stderr = keyboard, io.StringIO()
            code = main(["debug", "r"], out=out, client=client)
            err = sys.stderr.getvalue()
            thread.join(10)
    finally:
        sys.stdin, sys.stderr = old
        server.close()
    assert code == 130 and heard == [b"p x\n", b""]
    assert out.getvalue() == "(Pdb) --Return--\n"  # the prompt too, read as Ctrl-C came or not
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C is Python's again
    assert err.splitlines()[-3:] == ["", "[orchestrate] interrupted: rank 0 goes on without its debugger",
                                     "interrupted"], err  # (the last line: main's, after any command's interrupt)


def test_a_first_ctrl_c_waits_for_a_moment_between_reads_and_a_second_is_pythons_own():
    from orchestrate.debugger.session import interrupts_between_reads

    interrupted: list[int] = []
    with interrupts_between_reads(interrupted):
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt here: between a read and its write, maybe
        assert interrupted == [signal.SIGINT]
        with pytest.raises(KeyboardInterrupt):  # a write blocked on a stalled terminal would never look
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(RuntimeError):
        with interrupts_between_reads([]):
            raise RuntimeError("the session failed")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back on every way out

    def callers_own(signum, frame) -> None:
        pass
    signal.signal(signal.SIGINT, callers_own)
    with interrupts_between_reads([]):
        assert signal.getsignal(signal.SIGINT) is callers_own  # not Python's to take: left alone
    signal.signal(signal.SIGINT, signal.default_int_handler)
    seen = []

    def elsewhere() -> None:
        with interrupts_between_reads([]):
            seen.append(signal.getsignal(signal.SIGINT))
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert seen == [signal.default_int_handler]  # off the main thread, where no handler can be set


def test_an_interrupt_waiting_is_raised_once_what_was_read_is_written():
    from orchestrate.debugger.session import receive_all

    pdb, terminal = socket.socketpair()
    with pdb, terminal:
        pdb.sendall("-> x = 1\n(Pdb) ".encode())
        out = io.StringIO()
        with pytest.raises(KeyboardInterrupt):
            receive_all(terminal, out, [], 5.0, [signal.SIGINT])
        assert out.getvalue() == "-> x = 1\n(Pdb) "


def test_an_interrupt_after_the_last_read_still_ends_the_session_as_interrupted():
    """Ctrl-C as the debugger's last words are written out (here: at the final flush of the
    session's text): the session is interrupted, not ended as if the rank had gone on by itself."""
    from orchestrate.debugger.session import talk

    pdb, terminal = socket.socketpair()
    with pdb:
        pdb.sendall(b"--Return--\n")
        pdb.shutdown(socket.SHUT_WR)
        out = InterruptingTerminal(at="")  # the session's last write, after the debugger closed
        with pytest.raises(KeyboardInterrupt):
            talk(terminal, io.StringIO(""), out)
    assert out.getvalue() == "--Return--\n"


def test_a_second_ctrl_c_ends_the_session_at_once_without_waiting_for_the_last_words():
    """A terminal that takes no output (a paused pager): the write of pdb's prompt blocks, a first
    Ctrl-C waits for it, the second ends the session there and then, reading no more."""
    from orchestrate.debugger.session import talk

    pdb, terminal = socket.socketpair()
    with pdb:
        pdb.sendall(b"(Pdb) ")
        out = InterruptingTerminal(times=2)  # Ctrl-C, twice, as the write hangs
        with pytest.raises(KeyboardInterrupt) as raised:
            talk(terminal, io.StringIO(), out, linger_s=0.2)
    assert type(raised.value) is KeyboardInterrupt  # Python's own: the second
    assert out.tried == ["(Pdb) "]  # no last words read after it


def test_where_ctrl_c_is_the_callers_own_the_session_still_reads_the_last_words():
    """A program that took SIGINT itself (its handler raises KeyboardInterrupt) keeps it: its first
    Ctrl-C ends the session as before, pdb told the input ended and its last words shown."""
    from orchestrate.debugger.session import talk

    def callers_own(signum, frame) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, callers_own)

    pdb, terminal = socket.socketpair()

    def debugger() -> None:
        pdb.settimeout(10)
        pdb.sendall(b"(Pdb) ")
        if pdb.recv(100) == b"":  # end-of-input: pdb lets the rank go on
            pdb.sendall(b"--Return--\n")
        pdb.close()
    thread = threading.Thread(target=debugger)
    thread.start()
    out = InterruptingTerminal(at="(Pdb) ")
    with open_keyboard() as keyboard:  # the input ends only by the interrupt
        with pytest.raises(KeyboardInterrupt):
            talk(terminal, keyboard, out)
        thread.join(10)
    assert out.getvalue() == "--Return--\n"  # the prompt's write was the one interrupted


def test_debug_of_a_rank_another_terminal_debugs_says_one_terminal_at_a_time(tmp_path):
    client, run_dir, _ = engine_with_a_run(tmp_path)
    write_records(run_dir / "progress", 0, {"debugger": STOP})
    thread, server = listening(run_dir, 0, lambda connection: None)  # taken: closed unheard
    try:
        code, out, err = debug_command(client, typed="p x\n")
        thread.join(10)
    finally:
        server.close()
    assert code == 1 and out == ""
    assert err.splitlines()[-1] == ("error: rank 0 of run r is in a debugging session already (another terminal's"
                                    " debug); one terminal at a time")


def test_debug_of_a_rank_whose_socket_is_gone_says_so(tmp_path):
    client, run_dir, _ = engine_with_a_run(tmp_path)
    write_records(run_dir / "progress", 0, {"debugger": STOP})  # said it waits, but died before anyone came
    code, _, err = debug_command(client)
    assert code == 1 and err.startswith("error: no debugger listens at ") and "pdb-rank0.sock" in err


def test_run_pdb_gives_every_node_the_switch_the_hook_reads_and_a_users_sbatch_script_refuses_it(make_job, capsys):
    from orchestrate.cli.main import main
    from orchestrate.node.remote_debugger import POST_MORTEM_ENV

    asked = make_job(nodes=2, post_mortem=True)
    assert [node.env.get(POST_MORTEM_ENV) for node in asked.nodes] == ["1", "1"]
    assert not any(POST_MORTEM_ENV in node.env for node in make_job(nodes=2).nodes)
    planned = io.StringIO()
    assert main(["plan", "--nodes", "2", "--pdb"], out=planned) == 0  # from the option to the nodes' environment
    assert f" {POST_MORTEM_ENV}=1 " in planned.getvalue()
    # under Slurm, the generated script's workers start through the hook; a script of the user's own does not
    slurm = io.StringIO()
    assert main(["plan", "--scheduler", "slurm", "--cpu", "--nodes", "2", "--pdb"], out=slurm) == 0
    assert f"export {POST_MORTEM_ENV}=1" in slurm.getvalue()
    assert main(["run", "--scheduler", "slurm", "--cpu", "--pdb", "--sbatch", "tests/jobs/user_job.sbatch"],
                out=io.StringIO()) == 2
    assert capsys.readouterr().err == ("error: --pdb needs the generated batch script: --sbatch tests/jobs/user_job.sbatch"
                                       " starts its workers as it says, without the start-up hook that takes their pdb"
                                       " to `debug RUN RANK`\n")


def test_the_ranks_in_their_debugger_are_read_from_the_progress_channel_with_their_process_and_time(tmp_path):
    from orchestrate.supervise.progress import DebuggerWatch

    def said(*records: dict) -> None:
        with open(tmp_path / "rank0.jsonl", "a") as handle:
            handle.writelines(json.dumps({"rank": 0, "node": "node0", **r}) + "\n" for r in records)

    watch = DebuggerWatch(tmp_path)
    said({"attempt": "p1", "time": 1000.5, "debugger": {"state": WAITS, "call": "breakpoint()", "file": "bp.py",
                                                        "line": 9, "function": "<module>"}})
    assert watch.ranks() == {0: RankInDebugger(0, "node0", "p1", "breakpoint()", "bp.py", 9, "<module>", 1000.5)}
    said({"attempt": "p1", "time": 1003.0, "finished": True})  # its script ended: in no debugger
    assert watch.ranks() == {}
    said({"attempt": "p2", "time": 1010.0, "debugger": {"state": WAITS, "call": "breakpoint()", "file": "bp.py",
                                                        "line": 9, "function": "<module>"}},
         {"attempt": "p3", "time": 1020.0, "step": 1})  # a restart's new process of the rank
    assert watch.ranks() == {}


def test_debug_refuses_a_negative_rank_in_one_line_before_the_engine_is_asked(capsys):
    from orchestrate.cli.main import main

    # no client: the engine asked would be the unit tests' missing one, and its error said instead
    assert main(["debug", "r", "-1"], out=io.StringIO()) == 2
    assert capsys.readouterr().err == "error: RANK must be 0 or more, got -1\n"

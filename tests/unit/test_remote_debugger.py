"""A worker's pdb reached from the host (orchestrate/node/remote_debugger.py) and the host's end of
it (orchestrate/debugger/session.py): a script's breakpoint() or pdb.set_trace() waits on a socket
in the debug directory, says where it stopped, and takes pdb's commands from the terminal that
connects; Ctrl-D or `continue` lets it go on, `quit` ends it as pdb does. Each script runs in a
Python of its own (no torch), with the hook installed as the workers' start-up hook installs it;
tests/workers runs it under torchrun, and tests/integration through `debug RUN` on real nodes."""
from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrate.debugger.session import LONGEST_SOCKET_PATH, connect, talk
from orchestrate.errors import OrchestrateError
from orchestrate.node import remote_debugger
from tests.conftest import ROOT

HOOK = ROOT / "orchestrate" / "node" / "worker_start.py"
WAIT_S = 30.0


class Worker:
    """A script run as rank 3 by the workers' start-up hook, in a Python of its own (no torch),
    with its debug and progress directories."""

    def __init__(self, tmp_path: Path, script: str, environ: dict | None = None) -> None:
        self.directory = tmp_path / "debug"
        self.progress = tmp_path / "progress"
        for made in (self.directory, self.progress):
            made.mkdir(exist_ok=True)
        self.file = tmp_path / "train.py"
        self.file.write_text(script)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
        env.update({"DDP_DEBUG_DIR": str(self.directory), "DDP_PROGRESS_DIR": str(self.progress), "RANK": "3",
                    "DDP_NODE": "node1", "DDP_RUN_ID": "20261130-1", **(environ or {})})
        # (a session of its own: what it forks is killed with it, should a test fail)
        self.process = subprocess.Popen([sys.executable, str(HOOK), "--", "train.py"], cwd=tmp_path, env=env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, start_new_session=True)

    @property
    def socket(self) -> Path:
        return self.directory / remote_debugger.socket_name(3)

    def states(self) -> list[dict]:
        """What the rank said of its debugger on the progress channel."""
        path = self.progress / "rank3.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [r["debugger"] for r in records if "debugger" in r]

    def wait_to_be_reached(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while not self.socket.exists():
            assert self.process.poll() is None, self.finish()
            assert time.monotonic() < deadline, "the worker never listened"
            time.sleep(0.02)

    def debug(self, typed: str) -> str:
        """One terminal's session: the lines typed, and what the terminal showed."""
        shown = io.StringIO()
        talk(self.connect(), io.StringIO(typed), shown)
        return shown.getvalue()

    def connect(self) -> socket.socket:
        """A connection to the rank's debugger, once it listens: its socket's file is there from
        its bind, a moment before its listen (`debug` waits for the rank to say it waits instead)."""
        self.wait_to_be_reached()
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                return connect(self.socket)
            except OrchestrateError as refused:
                assert time.monotonic() < deadline and self.process.poll() is None, refused
                time.sleep(0.02)

    def finish(self) -> tuple[int, str, str]:
        try:
            out, err = self.process.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            out, err = self.process.communicate()
        return self.process.returncode, out, err


@pytest.fixture
def worker(tmp_path):
    made: list[Worker] = []

    def start(script: str, environ: dict | None = None) -> Worker:
        made.append(Worker(tmp_path, script, environ))
        return made[-1]
    yield start
    for each in made:  # a test that failed leaves no process behind, nor one its worker forked
        if each.process.returncode is None:  # not reaped: its group is still its own
            os.killpg(each.process.pid, signal.SIGKILL)
            each.process.communicate()


def test_a_breakpoint_waits_for_a_terminal_which_reads_and_steps_and_continue_lets_the_rank_go_on(worker):
    job = worker("x = 41\nbreakpoint()\nx += 1\nprint('after', x)\n")
    shown = job.debug("p x\nn\np x\nwhere\nc\n")
    code, out, err = job.finish()
    assert code == 0, err
    assert "after 42" in out
    assert "(Pdb) 41\n" in shown and "(Pdb) 42\n" in shown  # the value before and after the step
    assert job.states() == [{"state": "waits", "call": "breakpoint()", "file": "train.py", "line": 2,
                            "function": "<module>", "text": "breakpoint()", "attached": False},
                           {"state": "attached"}, {"state": "left"}]
    assert not job.socket.exists()  # one terminal at a time: none listens once one came
    # its own line, for `logs RUN` (the launcher's console says its own instead)
    assert ("[ddp-compose] rank 3 stopped in its debugger at train.py:2 in <module>: breakpoint(); debug it with:"
            " python -m orchestrate debug 20261130-1 3\n") in err


def test_the_stack_a_terminal_sees_starts_at_the_script_not_at_the_hook_that_runs_it(worker):
    job = worker("def step(n):\n    breakpoint()\n    return n\n\nstep(5)\n")
    shown = job.debug("where\nup\nup\nc\n")
    assert job.finish()[0] == 0
    where = shown.split("(Pdb)")[1]
    assert "train.py(5)<module>()" in where and "train.py(3)step()" in where
    assert "worker_start" not in where and "runpy" not in where
    assert "Oldest frame" in shown  # the script's module is the outermost frame, as under python3


def test_end_of_input_lets_the_rank_go_on_with_its_breakpoints_cleared(worker):
    job = worker("for i in range(3):\n    if i == 0:\n        breakpoint()\n    print('step', i)\n")
    shown = job.debug("b 4\n")  # then Ctrl-D: the breakpoint set would stop it again, but is cleared
    code, out, _ = job.finish()
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("step")] == ["step 0", "step 1", "step 2"]
    assert "Breakpoint 1 at" in shown
    assert [s["state"] for s in job.states()] == ["waits", "attached", "left"]


def test_a_breakpoint_set_in_the_session_stops_the_rank_again_in_it_and_a_later_stop_waits_anew(worker):
    job = worker("for i in range(3):\n    if i == 0:\n        breakpoint()\n    y = i * 10\n"
                 "print('done')\nbreakpoint()\nprint('end')\n")
    first = job.debug("b 4, i == 2\nc\np i\ncl 1\nc\n")  # stops at i == 2 in the same session
    assert "(Pdb) 2\n" in first
    second = job.debug("p 'again'\nc\n")  # the later breakpoint() waits for a new terminal
    code, out, _ = job.finish()
    assert code == 0 and "done" in out and "end" in out
    assert "'again'" in second
    said = job.states()
    assert [s["state"] for s in said] == ["waits", "attached", "running", "attached", "left", "waits", "attached", "left"]
    assert said[3] == {"state": "attached", "call": "a breakpoint set in its session", "file": "train.py", "line": 4,
                       "function": "<module>", "text": "y = i * 10", "attached": True}  # where it stopped again


def test_a_breakpoint_the_script_calls_again_while_its_session_holds_stops_in_that_session(worker):
    job = worker("for i in range(3):\n    breakpoint()\n    y = i\nprint('done')\n")
    first = job.debug("b 3, i == 5\nc\np i\ncl 1\nc\n")  # runs on, then its next breakpoint() stops it here
    second = job.debug("p i\nc\n")  # the session ended: the third waits for a terminal again
    code, out, _ = job.finish()
    assert code == 0 and "done" in out
    assert "(Pdb) 1\n" in first and "(Pdb) 2\n" in second
    assert [s["state"] for s in job.states()] == ["waits", "attached", "running", "attached", "left",
                                                  "waits", "attached", "left"]


def test_two_threads_that_stop_are_debugged_one_after_the_other(worker):
    # one string each: print's arguments are written apart, and the two threads' may interleave
    job = worker("import threading\n\ndef work(n):\n    breakpoint()\n    print(f'thread {n}', flush=True)\n\n"
                 "t = threading.Thread(target=work, args=(1,))\nt.start()\nwork(0)\nt.join()\n")
    sessions = [job.debug("p n\nc\n"), job.debug("p n\nc\n")]
    code, out, _ = job.finish()
    assert code == 0 and "thread 0" in out and "thread 1" in out
    assert sorted(s.split("(Pdb) ")[1].strip() for s in sessions) == ["0", "1"]
    assert [s["state"] for s in job.states()] == ["waits", "attached", "left"] * 2


def test_interact_says_it_is_not_there_and_a_message_keeps_its_end(worker):
    job = worker("breakpoint()\nprint('on')\n")
    shown = job.debug("interact\nc\n")
    assert job.finish()[0] == 0
    assert "*** interact reads the worker's own stdin, which no terminal reaches: run statements with ! (!x = 3)" \
        in shown
    printed = io.StringIO()
    plain = remote_debugger.debugger_class()(stdout=printed)  # a debugger the host cannot reach prints as pdb
    plain.reachable = False
    plain.message("a", end="")
    plain.message("b")
    assert printed.getvalue() == "ab\n"


def test_a_rank_whose_socket_cannot_be_made_has_pdb_as_it_is_and_says_why(worker, tmp_path):
    job = worker("breakpoint()\nprint('never')\n", environ={"DDP_DEBUG_DIR": str(tmp_path / "missing")})
    code, out, err = job.finish()
    assert code == 1 and "never" not in out.splitlines() and err.rstrip().endswith("bdb.BdbQuit")  # no stdin
    assert "[ddp-compose] breakpoint(): the host cannot reach this rank's debugger ([Errno 2] No such file or" \
           " directory); pdb reads the worker's own stdin" in err
    assert job.states() == []


def test_quit_ends_the_script_with_bdbquit_as_pdb_does(worker):
    job = worker("breakpoint()\nprint('never')\n")
    job.debug("q\n")
    code, out, err = job.finish()
    assert code == 1 and "never" not in out
    assert err.rstrip().endswith("bdb.BdbQuit")
    assert [s["state"] for s in job.states()] == ["waits", "attached", "left"]


def test_pdb_set_trace_is_reached_too_and_names_its_call(worker):
    job = worker("import pdb\nv = 'seen'\npdb.set_trace(header='hello from rank 3')\nprint(v)\n")
    shown = job.debug("p v\nc\n")
    code, out, _ = job.finish()
    assert code == 0 and "seen" in out
    assert shown.startswith("hello from rank 3\n")  # said before a terminal came: kept for it
    assert "'seen'" in shown
    assert job.states()[0]["call"] == "pdb.set_trace()" and job.states()[0]["line"] == 3


def test_a_terminal_that_goes_away_mid_session_lets_the_rank_go_on_and_its_code_never_sees_it(worker):
    job = worker("breakpoint()\nfor i in range(200):\n    pass\nprint('went on')\n")
    connection = job.connect()
    connection.recv(100)  # the prompt came
    connection.close()  # killed: no Ctrl-D, no command
    code, out, err = job.finish()
    assert code == 0, err
    assert "went on" in out
    assert [s["state"] for s in job.states()] == ["waits", "attached", "left"]


def test_pythonbreakpoint_in_the_runs_environment_is_left_to_python(worker):
    job = worker("breakpoint()\nprint('not stopped')\n", environ={"PYTHONBREAKPOINT": "0"})
    code, out, _ = job.finish()
    assert code == 0 and "not stopped" in out and job.states() == []


def test_a_process_the_worker_forked_has_pdb_as_it_is(worker):
    job = worker("import os\npid = os.fork()\nif pid == 0:\n    breakpoint()\n    os._exit(7)\n"
                 "_, status = os.waitpid(pid, 0)\nprint('child', os.waitstatus_to_exitcode(status))\n")
    code, out, _ = job.finish()
    # the child's pdb reads its stdin (none): end of input quits, and the child dies of BdbQuit
    assert code == 0 and "child 1" in out
    assert job.states() == [] and not job.socket.exists()


def test_the_host_reaches_a_socket_deeper_than_a_socket_path_may_be(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "pdb-rank0.sock"
    assert len(str(path)) > LONGEST_SOCKET_PATH
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    directory = os.open(deep, os.O_RDONLY)
    try:
        server.bind(f"/proc/self/fd/{directory}/{path.name}")
    finally:
        os.close(directory)
    server.listen(1)

    def answer() -> None:
        connection, _ = server.accept()
        connection.sendall(b"(Pdb) ")
        assert connection.recv(100) == b"c\n"
        connection.sendall("é\n".encode())
        connection.close()
    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    shown = io.StringIO()
    try:
        talk(connect(path), io.StringIO("c\n"), shown)
    finally:
        server.close()
    thread.join(WAIT_S)
    assert shown.getvalue() == "(Pdb) é\n"


def test_a_session_whose_rank_runs_on_ends_a_while_after_the_input_did_and_says_what_it_heard():
    terminal, rank = socket.socketpair()
    rank.sendall(b"(Pdb) ")
    shown = io.StringIO()
    started = time.monotonic()
    heard = talk(terminal, io.StringIO("c\n"), shown, linger_s=0.5)  # the rank never answers nor closes
    assert heard == 6 and shown.getvalue() == "(Pdb) "
    assert 0.5 <= time.monotonic() - started < WAIT_S
    assert rank.recv(100) == b"c\n" and rank.recv(100) == b""  # the line, then end-of-input
    rank.close()
    # a rank that answers slowly (a busy machine) is heard to its end: the wait counts from its last words
    terminal, rank = socket.socketpair()

    def answer_slowly() -> None:
        rank.recv(100)
        for piece in (b"(Pdb) ", b"1\n", b"(Pdb) ", b"bye"):
            time.sleep(0.3)
            rank.sendall(piece)
        rank.close()

    thread = threading.Thread(target=answer_slowly)
    thread.start()
    shown = io.StringIO()
    # (waits of 1 s against pauses of 0.3 s: a loaded machine may hold a thread back for a few tenths)
    assert talk(terminal, io.StringIO("p n\nc\n"), shown, linger_s=1.0) == 17
    thread.join(WAIT_S)
    assert shown.getvalue() == "(Pdb) 1\n(Pdb) bye"
    # a rank that talks on for ever (a breakpoint's own commands, printing at every stop) is left
    # at LINGER_CAP times the wait after the input ended
    from orchestrate.debugger.session import LINGER_CAP
    terminal, rank = socket.socketpair()

    def talk_on() -> None:
        rank.recv(100)
        try:
            while True:
                rank.sendall(b"loss 0.5\n")
                time.sleep(0.05)
        except OSError:  # the terminal left
            rank.close()

    thread = threading.Thread(target=talk_on)
    thread.start()
    started = time.monotonic()  # (it says a line every 0.05 s, against a wait of 0.5 s: see above)
    assert talk(terminal, io.StringIO("c\n"), io.StringIO(), linger_s=0.5) > 0
    assert LINGER_CAP * 0.5 <= time.monotonic() - started < WAIT_S
    thread.join(WAIT_S)
    assert not thread.is_alive()
    taken, other = socket.socketpair()
    other.close()  # another terminal took the rank: this one hears nothing
    assert talk(taken, io.StringIO(""), io.StringIO()) == 0


def test_connecting_where_no_debugger_listens_is_one_clear_error(tmp_path):
    with pytest.raises(OrchestrateError, match=r"no debugger listens at .*pdb-rank2.sock: No such file"):
        connect(tmp_path / "pdb-rank2.sock")


POST_MORTEM = {"DDP_POST_MORTEM": "1"}


def test_with_pdb_an_uncaught_error_waits_for_a_terminal_at_the_users_frame_and_the_rank_ends_with_it(worker):
    # the error is raised in the standard library (json's decoder): the session starts at the
    # user's own line, and `down` goes on into json's frames
    job = worker("import json\n\ndef load(text):\n    parsed = json.loads(text)\n    return parsed\n\n"
                 "batch = 7\nload('{broken')\n", POST_MORTEM)
    shown = job.debug("p text, batch\nwhere\ndown\nc\n")
    code, out, err = job.finish()
    assert code == 1  # it ends with its error, as it would have
    assert err.index("Traceback (most recent call last)") < err.index("[ddp-compose] rank 3 stopped")  # said first
    assert "json.decoder.JSONDecodeError: Expecting property name" in err
    assert "(Pdb) ('{broken', 7)\n" in shown  # the user's frame first, its locals
    assert shown.startswith("> ") and "uncaught JSON" not in shown  # (`debug` says the error as it connects)
    assert "json/__init__.py" in shown.split("(Pdb)")[3]  # `down`: into the library that raised
    where = shown.split("(Pdb)")[2]
    assert "train.py(8)<module>()" in where and "worker_start" not in where
    said = job.states()
    assert said[0] == {"state": "waits", "call": "an uncaught error (--pdb)", "file": "train.py", "line": 4,
                       "function": "load", "attached": False,
                       "text": "uncaught JSONDecodeError: Expecting property name enclosed in double quotes:"
                               " line 1 column 2 (char 1)"}
    assert [s["state"] for s in said] == ["waits", "attached", "left"]
    assert ("rank 3 stopped in its debugger at train.py:4 in load: uncaught JSONDecodeError: Expecting property"
            in err)


def test_without_pdb_an_uncaught_error_ends_the_rank_at_once_and_a_quit_from_pdb_is_no_post_mortem(worker):
    plain = worker("raise ValueError('boom')\n")
    code, _, err = plain.finish()
    assert code == 1 and "ValueError: boom" in err and plain.states() == [] and "stopped" not in err


def test_with_pdb_quitting_a_breakpoint_ends_the_rank_without_a_post_mortem_of_the_quit(worker):
    job = worker("breakpoint()\nprint('not reached')\n", POST_MORTEM)
    job.debug("q\n")
    code, out, err = job.finish()
    assert code == 1 and "bdb.BdbQuit" in err and "not reached" not in out
    assert [s["state"] for s in job.states()] == ["waits", "attached", "left"]  # one stop only


def test_with_pdb_an_error_met_while_a_session_runs_on_to_its_breakpoint_stops_in_that_session(worker):
    job = worker("x = 1\nbreakpoint()\nx = 2\nfor i in range(2):\n    x += 10\nraise KeyError('k')\n", POST_MORTEM)
    shown = job.debug("b 5\nc\nc\nc\np i, x\nc\n")  # stops at line 5 twice, then at the error
    code, _, err = job.finish()
    assert code == 1 and "KeyError: 'k'" in err
    assert "(Pdb) uncaught KeyError: 'k'\n" in shown and "(Pdb) (1, 22)\n" in shown  # the same session
    said = job.states()
    post_mortem = [s for s in said if s.get("call") == remote_debugger.POST_MORTEM_CALL]
    assert post_mortem == [{"state": "attached", "call": "an uncaught error (--pdb)", "file": "train.py", "line": 6,
                            "function": "<module>", "text": "uncaught KeyError: 'k'", "attached": True}]
    assert said[-1] == {"state": "left"} and said[0]["state"] == "waits"


def test_with_pdb_an_error_a_lost_peer_caused_gets_no_post_mortem_and_says_why(worker):
    job = worker("raise RuntimeError('[../third_party/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
                 " [10.0.0.3]:6576')\n", POST_MORTEM)
    code, _, err = job.finish()
    assert code == 1 and job.states() == [] and "Traceback" in err
    assert ("[ddp-compose] --pdb: no post-mortem of rank 3's RuntimeError:"
            " [../third_party/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.3]:6576: a peer was lost first\n") in err


def test_with_pdb_a_rank_waiting_in_its_post_mortem_shows_the_errors_frames_up_to_the_users_in_its_snapshots(
        worker):
    from orchestrate.hangs.snapshots import request_snapshots

    job = worker("import json\n\ndef load(text):\n    return json.loads(text)\n\nload('{')\n", POST_MORTEM)
    job.wait_to_be_reached()
    probe = request_snapshots(job.directory, [3], timeout_s=WAIT_S)
    waiting = probe.snapshots[3]
    assert [(f.file, f.line, f.function) for f in waiting.stack] == [("train.py", 6, "<module>"),
                                                                      ("train.py", 4, "load")]
    assert waiting.debugger.text == "uncaught JSONDecodeError: Expecting property name enclosed in double quotes:" \
                                    " line 1 column 2 (char 1)"
    job.debug("c\n")
    assert job.finish()[0] == 1


def test_with_pdb_an_error_after_another_threads_session_ran_on_takes_that_session_over(worker):
    # the thread's breakpoint never comes again: the ending rank takes its terminal, never waits for it
    job = worker("import threading\ndef work():\n    breakpoint()\n    x = 1\nt = threading.Thread(target=work)\n"
                 "t.start()\nt.join()\nvalue = 7\nraise KeyError('k')\n", POST_MORTEM)
    shown = job.debug("b 4, False\nc\np value\nc\n")
    code, _, err = job.finish()
    assert code == 1 and "KeyError: 'k'" in err
    assert "(Pdb) uncaught KeyError: 'k'\n" in shown and "(Pdb) 7\n" in shown
    assert [s["state"] for s in job.states()] == ["waits", "attached", "running", "attached", "left"]


def test_with_pdb_an_error_met_after_the_sessions_terminal_went_away_waits_for_a_new_one(worker):
    job = worker("import time\nx = 5\nbreakpoint()\ntime.sleep(0.5)\nraise KeyError('k')\n", POST_MORTEM)
    first = job.connect()
    first.sendall(b"b 4, False\nc\n")  # runs on with a breakpoint set; then the terminal goes away
    deadline = time.monotonic() + WAIT_S
    while "running" not in [s["state"] for s in job.states()]:
        assert time.monotonic() < deadline, job.states()
        time.sleep(0.02)
    first.close()
    shown = job.debug("p x\nc\n")  # a new terminal: the post-mortem waited for it
    code, _, _ = job.finish()
    assert code == 1 and "(Pdb) 5\n" in shown
    states = [s["state"] for s in job.states()]
    assert states == ["waits", "attached", "running", "attached", "left", "waits", "attached", "left"]
    assert job.states()[5]["text"] == "uncaught KeyError: 'k'"


def test_with_pdb_a_breakpoint_of_the_earlier_session_does_not_stop_an_expression_of_the_post_mortem(worker):
    job = worker("def f(n):\n    return n * 2\nbreakpoint()\ny = f(1)\nraise KeyError('k')\n", POST_MORTEM)
    shown = job.debug("b 2\nc\nc\np f(5)\nc\n")  # stops in f(1), runs on, then examines the error
    code, _, _ = job.finish()
    assert code == 1
    assert "(Pdb) uncaught KeyError: 'k'\n" in shown and "(Pdb) 10\n" in shown  # f(5) ran through, no new stop
    assert [s["state"] for s in job.states()].count("waits") == 1


def test_with_pdb_an_error_whose_message_cannot_be_made_is_examined_all_the_same(worker):
    job = worker("class Odd(Exception):\n    def __str__(self):\n        raise TypeError('nope')\n\nraise Odd()\n",
                 POST_MORTEM)
    job.debug("c\n")
    code, _, err = job.finish()
    assert code == 1 and "post-mortem debugger failed" not in err
    assert job.states()[0]["text"] == "uncaught Odd: <exception str() failed>"


def test_an_interrupt_while_a_rank_waits_for_a_terminal_ends_it_saying_it_left(worker):
    job = worker("breakpoint()\nprint('not reached')\n")
    job.wait_to_be_reached()
    deadline = time.monotonic() + WAIT_S
    while not job.states():  # said it waits (its socket listens a moment before)
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(job.process.pid, signal.SIGINT)
    code, out, err = job.finish()
    assert code != 0 and "KeyboardInterrupt" in err and "not reached" not in out
    assert [s["state"] for s in job.states()] == ["waits", "left"]  # the launcher holds no stale stop


def test_the_scripts_own_post_mortem_waits_for_a_terminal_and_the_script_then_goes_on(worker):
    job = worker("import json, pdb\n\ndef load(text):\n    return json.loads(text)\n\ntry:\n    load('{')\n"
                 "except ValueError:\n    pdb.post_mortem()\nprint('went on')\n")  # no --pdb: the script asks
    shown = job.debug("p text\nc\n")
    code, out, _ = job.finish()
    assert code == 0 and "went on" in out
    assert shown.startswith("> ") and "train.py(4)load()" in shown and "(Pdb) '{'\n" in shown
    said = job.states()
    assert said[0] == {"state": "waits", "call": "pdb.post_mortem()", "file": "train.py", "line": 4,
                       "function": "load", "attached": False,
                       "text": "pdb.post_mortem() of JSONDecodeError: Expecting property name enclosed in double"
                               " quotes: line 1 column 2 (char 1)"}
    assert [s["state"] for s in said] == ["waits", "attached", "left"]


def test_pdb_pm_of_the_last_error_waits_for_a_terminal_and_post_mortem_outside_an_error_fails_as_pdbs_does(worker):
    job = worker("import pdb, sys\n\ntry:\n    x = 3\n    x / 0\nexcept ZeroDivisionError as error:\n"
                 "    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__\n"
                 "    sys.last_exc = error\npdb.pm()\nprint('after pm')\npdb.post_mortem()\n")
    shown = job.debug("p x\nc\n")
    code, out, err = job.finish()
    assert "(Pdb) 3\n" in shown and "after pm" in out
    assert job.states()[0]["line"] == 5  # the error's line, not the one its frame runs now
    assert job.states()[0]["text"] == "pdb.post_mortem() of ZeroDivisionError: division by zero"  # pm's traceback
    assert code == 1 and "ValueError: A valid traceback must be passed if no exception is being handled" in err


def test_the_scripts_post_mortem_takes_over_another_threads_session_that_runs_on_and_that_thread_goes_on(worker):
    job = worker("import pdb, threading, time\ndef work():\n    breakpoint()\n    for i in range(30):\n"
                 "        time.sleep(0.05)\nt = threading.Thread(target=work)\nt.start()\ntime.sleep(0.5)\n"
                 "try:\n    {}['k']\nexcept KeyError:\n    pdb.post_mortem()\nt.join()\nprint('after')\n")
    first = job.connect()
    first.sendall(b"b 5, i == 99\nc\n")  # the thread runs on with a breakpoint that never comes
    shown = io.StringIO()
    talk(first, io.StringIO("p 1 + 1\nc\n"), shown)  # the same terminal: the main thread's post-mortem
    code, out, err = job.finish()
    assert code == 0 and "after" in out, err
    assert "Exception in thread" not in err and "KeyError: ('" not in err  # its thread lost no breakpoint
    assert "(Pdb) pdb.post_mortem() of KeyError: 'k'\n" in shown.getvalue() and "(Pdb) 2\n" in shown.getvalue()


def test_a_post_mortem_in_a_side_thread_shows_the_errors_frames_in_that_threads_snapshot_only(worker):
    from orchestrate.hangs.snapshots import request_snapshots

    job = worker("import pdb, threading\ndef side():\n    try:\n        {}['k']\n    except KeyError:\n"
                 "        pdb.post_mortem()\nt = threading.Thread(target=side, name='side')\nt.start()\nt.join()\n")
    job.wait_to_be_reached()
    request_snapshots(job.directory, [3], timeout_s=WAIT_S)
    snapshot = json.loads((job.directory / "rank3.json").read_text())
    stacks = {s["thread"]: [f[0] + ":" + str(f[1]) for f in s["frames"]] for s in snapshot["stacks"]}
    assert stacks["side"] == ["train.py:4"]  # the error's frame, where the post-mortem stopped
    assert stacks["MainThread"][0] == "train.py:9" and "threading.py" in stacks["MainThread"][-1]  # in join()
    job.debug("c\n")
    assert job.finish()[0] == 0


def test_a_breakpoint_set_in_a_post_mortem_ends_with_it_and_leaves_no_tracer_in_the_script_that_goes_on(worker):
    job = worker("import pdb, sys\ndef f():\n    return 1\ntry:\n    {}['k']\nexcept KeyError:\n"
                 "    pdb.post_mortem()\nf()\nprint('traced', sys.gettrace() is not None)\n")
    job.debug("b 3\nc\n")
    code, out, _ = job.finish()
    assert code == 0 and "traced False" in out  # the script goes on untraced: no stop in f(), no slowdown
    assert [s["state"] for s in job.states()] == ["waits", "attached", "running", "left"]

"""Standard output whose reader goes away (`| head`): the command ends as SIGPIPE would end it,
quietly and with 141, never as an engine error; what is written after goes nowhere."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from orchestrate.cli.output import ReaderAwareOutput
from orchestrate.interrupts import SignalInterrupt
from tests.conftest import ROOT


def test_a_command_whose_reader_went_away_ends_quietly_with_141(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrate", "plan", "--cpu", "--nodes", "300", "--workdir",
                             str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    proc.stdout.close()  # the reader is gone before the first line (`| true`)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGPIPE, err
    assert err == b""  # no "engine error: [Errno 32] Broken pipe", no "Exception ignored ... BrokenPipeError"


def pipe_output() -> tuple[ReaderAwareOutput, int]:
    read_end, write_end = os.pipe()
    return ReaderAwareOutput(os.fdopen(write_end, "w")), read_end


def test_the_first_broken_write_interrupts_the_main_thread_once_and_the_rest_go_nowhere():
    out, read_end = pipe_output()
    out.write("seen\n")
    out.flush()
    assert os.read(read_end, 100) == b"seen\n"
    os.close(read_end)
    out.write("lost\n")
    with pytest.raises(SignalInterrupt) as raised:
        out.flush()
    assert raised.value.signum == signal.SIGPIPE
    out.write("after\n")  # a run's wind-down and summary: no second interrupt, no error
    out.flush()
    assert out.reader_gone and os.fstat(out.fileno()).st_rdev == os.stat(os.devnull).st_rdev


def test_a_broken_write_in_another_thread_interrupts_the_main_thread_at_its_next_write():
    out, read_end = pipe_output()
    os.close(read_end)

    def writer() -> None:
        out.write("from a thread\n")
        out.flush()  # no interrupt here: this thread is not the one that winds a run down

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join(timeout=10)
    assert out.reader_gone and not thread.is_alive()
    with pytest.raises(SignalInterrupt):
        out.write("main\n")
    out.write("again\n")  # once


def test_a_reader_gone_while_an_interrupt_is_handled_is_no_second_interrupt():
    """Ctrl-C on `run ... | tee log` ends tee too: the wind-down's first line meets the broken
    pipe, and a second interrupt there would kill the nodes without their stop grace."""
    out, read_end = pipe_output()
    os.close(read_end)
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            out.write("interrupted: stopping every node\n")
            out.flush()  # no SignalInterrupt: the wind-down goes on
        out.write("the summary\n")  # nor later: the interrupt was the run's already
        out.flush()
    except SignalInterrupt:  # (a KeyboardInterrupt, which would end pytest's session, not fail the test)
        pytest.fail("a second interrupt while the first one was handled")
    assert out.reader_gone

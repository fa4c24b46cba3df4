"""A worker that dies by a fatal signal under real torchrun and gloo leaves every thread's stack
in the run's debug directory, and the launcher reads from it where the script was: gloo's abort
on a collective whose sizes differ, a segfault in the script's own call; a script that turned
faulthandler on itself keeps its own."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from orchestrate.hangs.crash_dump import last_dump, where_stopped
from orchestrate.outcome.root_cause import native_exception
from tests.workers.conftest import ROOT, hooked_torchrun, host_env

JOB = ROOT / "tests" / "jobs" / "size_mismatch.py"
LOADER_JOB = ROOT / "tests" / "jobs" / "loader_crash.py"


def line_of(text: str, job: Path = JOB) -> int:
    return next(i for i, line in enumerate(job.read_text().splitlines(), 1) if text in line)


def run(tmp_path: Path, *args: str, job: Path = JOB, **env: str) -> str:
    debug = tmp_path / "debug"
    debug.mkdir()
    proc = subprocess.run(hooked_torchrun(2, "--", str(job), *args), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, DDP_DEBUG_DIR=str(debug), PYTHONPATH=str(ROOT), **env), timeout=120)
    assert proc.returncode != 0, proc.stdout[-2000:]
    return proc.stdout + proc.stderr


def test_gloos_abort_on_sizes_that_differ_names_the_scripts_collective(tmp_path):
    output = run(tmp_path)
    dumps = {path.name: last_dump(path.read_text()) for path in (tmp_path / "debug").glob("rank*.crash")}
    crashed = {name: dump for name, dump in dumps.items() if dump is not None}
    assert crashed, dumps  # the rank that received the longer message aborted, and wrote its stacks
    for dump in crashed.values():
        assert dump.fatal == "Aborted"
        # gloo's own thread aborted: it has no Python frames, so the dump names the script's thread
        assert dump.where() == f"in a native thread, while the script was in all_reduce at {JOB.name}:{line_of('# SIZES')}"
    assert native_exception(output.splitlines()).startswith("gloo::EnforceNotMet: [enforce fail at")
    assert "Received data size doesn't match expected size" in native_exception(output.splitlines())


def test_a_segfault_names_the_scripts_function_and_line(tmp_path):
    run(tmp_path, "--crash", "segfault")
    dump = last_dump((tmp_path / "debug" / "rank1.crash").read_text())
    assert dump is not None and dump.fatal == "Segmentation fault"
    assert dump.where() == f"in read_native_buffer at {JOB.name}:{line_of('ctypes.cast(')}"
    # rank 0 lost its peer: no dump (and no file at all where it exited as Python does, not by
    # torchrun's SIGTERM)
    peer = tmp_path / "debug" / "rank0.crash"
    assert not (peer.exists() and peer.read_text())


def test_a_data_loader_workers_segfault_is_dumped_before_torchs_own_handler_says_it(tmp_path):
    output = run(tmp_path, job=LOADER_JOB)
    # (the rank then raises "DataLoader worker (pid N) is killed by signal", or meets the dead
    # worker's closed connection first: torch's words vary, the dump does not)
    assert "ERROR: Unexpected segmentation fault encountered in worker." in output  # torch's handler still runs
    dumps = [last_dump(path.read_text()) for path in sorted((tmp_path / "debug").glob("rank*.crash"))]
    # each rank's loader reaches the item, unless its peer's failure ended it first
    wheres = [dump.where() for dump in dumps if dump]
    assert wheres and set(wheres) == {
        f"in __getitem__ at {LOADER_JOB.name}:{line_of('# DECODER', LOADER_JOB)} (in a DataLoader worker process)"}


def test_a_script_with_its_own_faulthandler_keeps_it(tmp_path):
    output = run(tmp_path, "--crash", "segfault", PYTHONFAULTHANDLER="1")
    assert not list((tmp_path / "debug").glob("rank*.crash"))
    assert "Fatal Python error: Segmentation fault" in output  # where the script asked: its stderr


def test_a_restarted_worker_keeps_its_predecessors_dump_beside_its_own(tmp_path):
    (tmp_path / "rank3.crash").write_text("Fatal Python error: Aborted\n")
    (tmp_path / "rank3.crash.1").write_text("Fatal Python error: Segmentation fault\n")
    # in a process of its own: the hook turns faulthandler on for the rest of a process's life
    code = ("import sys; from orchestrate.node import crash_stacks;"
            f" print(crash_stacks.install({str(tmp_path)!r}, 3))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "True", done.stderr
    assert (tmp_path / "rank3.crash.2").read_text() == "Fatal Python error: Aborted\n"
    assert (tmp_path / "rank3.crash.1").read_text() == "Fatal Python error: Segmentation fault\n"
    assert not (tmp_path / "rank3.crash").exists()  # its own, empty at its normal exit, is gone


def test_a_script_whose_main_torchs_record_wraps_still_dumps_to_its_file(tmp_path):
    script = tmp_path / "recorded.py"
    script.write_text(
        "import ctypes\n"
        "import torch.distributed as dist\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n\n\n"
        "@record\n"
        "def main():\n"
        "    dist.init_process_group('gloo')\n"
        "    if dist.get_rank() == 1:\n"
        "        ctypes.cast(8, ctypes.POINTER(ctypes.c_long))[0]\n"
        "    dist.barrier()\n\n\n"
        "main()\n")
    output = run(tmp_path, job=script)
    assert "Fatal Python error" not in output  # @record turned faulthandler on to stderr; it went back to the file
    dump = last_dump((tmp_path / "debug" / "rank1.crash").read_text())
    assert dump is not None and dump.where() == "in main at recorded.py:10"


def hook_in_a_process(directory: Path, then: str) -> subprocess.Popen:
    """A process that installs the crash stacks for rank 3, then runs ``then``."""
    code = f"import ctypes, os, sys, time\nfrom orchestrate.node import crash_stacks\n" \
           f"crash_stacks.install({str(directory)!r}, 3)\n{then}"
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_only_the_process_that_made_the_file_removes_it_and_only_that_very_file(tmp_path):
    segfault = "ctypes.cast(8, ctypes.POINTER(ctypes.c_long))[0]"
    # a child it forked exits normally (a helper process): the worker's later crash is still dumped
    forked = hook_in_a_process(tmp_path, f"child = os.fork()\nif child == 0:\n    sys.exit(0)\n"
                                         f"os.waitpid(child, 0)\n{segfault}")
    assert forked.wait(timeout=60) == -11
    assert last_dump((tmp_path / "rank3.crash").read_text()).fatal == "Segmentation fault"
    (tmp_path / "rank3.crash").unlink()
    # an older worker of rank 3 ends normally after its successor started (an elastic restart)
    older = hook_in_a_process(tmp_path, "time.sleep(3)")
    deadline = time.monotonic() + 30
    while not (tmp_path / "rank3.crash").exists():  # the older one made its file
        assert time.monotonic() < deadline
        time.sleep(0.05)
    newer = hook_in_a_process(tmp_path, f"time.sleep(5)\n{segfault}")
    assert older.wait(timeout=60) == 0
    assert newer.wait(timeout=60) == -11
    assert last_dump((tmp_path / "rank3.crash").read_text()).fatal == "Segmentation fault"


def test_a_rank_torchrun_ends_by_sigterm_leaves_where_it_was_and_its_peer_that_raised_leaves_nothing(tmp_path):
    """Rank 1 raises; torchrun ends rank 0, which waits outside any collective, by SIGTERM: its
    stacks say where (the hang diagnosis and a monitored barrier's failure name it so)."""
    script = tmp_path / "stuck.py"
    script.write_text(
        "import time\n"
        "import torch.distributed as dist\n\n\n"
        "def wait_for_shard():\n"
        "    time.sleep(120)  # STUCK\n\n\n"
        "dist.init_process_group('gloo')\n"
        "dist.barrier()\n"
        "if dist.get_rank() == 1:\n"
        "    raise ValueError('bad shard')\n"
        "wait_for_shard()\n")
    started = time.time()
    run(tmp_path, job=script)
    debug = tmp_path / "debug"
    assert where_stopped(debug, 0) == f"wait_for_shard at stuck.py:{line_of('# STUCK', script)}"
    assert where_stopped(debug, 0, since=started - 1) != ""
    assert where_stopped(debug, 0, since=time.time() + 60) == ""  # an earlier attempt's stacks say nothing
    assert not (debug / "rank1.stopped").exists()  # it raised, and exited as Python does: nothing to say
    assert where_stopped(debug, 1) == ""


def test_a_script_with_its_own_sigterm_handler_keeps_it(tmp_path):
    script = tmp_path / "handles.py"
    script.write_text(
        "import signal, sys, time\n"
        "import torch.distributed as dist\n\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('saving before I go', flush=True), sys.exit(3)))\n"
        "dist.init_process_group('gloo')\n"
        "dist.barrier()\n"
        "if dist.get_rank() == 1:\n"
        "    raise ValueError('bad shard')\n"
        "time.sleep(120)\n")
    output = run(tmp_path, job=script)
    assert "saving before I go" in output
    assert not (tmp_path / "debug" / "rank0.stopped").exists()  # its handler ran, and it exited normally


def test_a_child_the_worker_forked_writes_no_stacks_when_it_is_ended(tmp_path):
    ready_read, ready_write = os.pipe()
    code = ("import os, signal, time\nfrom orchestrate.node import crash_stacks\n"
            f"assert crash_stacks.dump_when_stopped({str(tmp_path)!r}, 3)\n"
            "child = os.fork()\n"
            "if child == 0:\n"
            f"    os.write({ready_write}, b'x')\n"
            "    time.sleep(60)\n"
            "    os._exit(0)\n"
            f"os.read({ready_read}, 1)\n"
            "os.kill(child, signal.SIGTERM)\n"
            "assert os.waitpid(child, 0)[1] == signal.SIGTERM\n"
            f"assert os.path.getsize({str(tmp_path / 'rank3.stopped')!r}) == 0\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          pass_fds=(ready_read, ready_write), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "rank3.stopped").exists()  # the worker exited normally: its empty file went


def test_a_worker_ended_by_sigterm_still_dies_of_it_at_once_and_a_child_keeps_the_scripts_handler(tmp_path):
    """The stacks are written, then SIGTERM ends the worker as it would have (no wait for
    torchrun's SIGKILL); a child forked after the script set its own SIGTERM handler keeps that
    handler (unregistering would have put SIG_DFL back)."""
    code = ("import os, signal, sys, time\nfrom orchestrate.node import crash_stacks\n"
            f"assert crash_stacks.dump_when_stopped({str(tmp_path)!r}, 3)\n"
            f"open({str(tmp_path / 'registered')!r}, 'w').close()\n"
            "time.sleep(60)\n")
    worker = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    # its handler is in place once the call returned (the stacks' file is made a moment before it:
    # a SIGTERM between the two ended the worker with an empty file, once in CI)
    while not (tmp_path / "registered").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    worker.terminate()
    assert worker.wait(timeout=5) == -15
    assert "in <module>" in (tmp_path / "rank3.stopped").read_text()
    handled = ("import os, signal, sys, time\nfrom orchestrate.node import crash_stacks\n"
               f"assert crash_stacks.dump_when_stopped({str(tmp_path)!r}, 4)\n"
               "signal.signal(signal.SIGTERM, lambda *_: os._exit(3))\n"
               "child = os.fork()\n"
               "if child == 0:\n"
               "    time.sleep(60)\n"
               "    os._exit(0)\n"
               "time.sleep(0.5)\n"
               "os.kill(child, signal.SIGTERM)\n"
               "status = os.waitpid(child, 0)[1]\n"
               "assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3, status\n")
    proc = subprocess.run([sys.executable, "-c", handled], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr

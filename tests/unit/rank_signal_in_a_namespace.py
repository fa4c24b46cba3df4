"""Run by tests/unit/test_fault_kinds.py as PID 1 of a PID namespace of its own (``unshare --pid
--fork --mount-proc``): a process as torchrun starts a worker (TORCHELASTIC_RUN_ID, RANK=5) with
a child of its own that inherits both (a data loader worker), and the node's rank script run
against them: signalled, listed stopped, listed going on, not listed once it died though its child
lives on (orphaned), then nothing listed once every one exited. Beside it a worker of rank 7 in
this process's session, as a launcher that does not start a session per worker keeps one. Nothing outside the namespace can be seen, so nothing outside is signalled.
Prints what it saw, one JSON object."""
import json
import os
import subprocess
import sys
import time

SCRIPT = sys.argv[1]  # the rank script's file


def rank_script(*args: str) -> str:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, check=True).stdout


def state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (its environment no longer readable)."""
    try:
        return state(pid) == "Z"
    except FileNotFoundError:
        return True


def wait_until_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def wait_for(pid: int, stopped: bool) -> None:
    deadline = time.monotonic() + 10
    while (state(pid) == "T") != stopped and time.monotonic() < deadline:
        time.sleep(0.01)


env = {**os.environ, "TORCHELASTIC_RUN_ID": "r", "RANK": "5", "LOCAL_RANK": "0"}
# as torchrun starts a worker: the leader of a session of its own (it ends it with killpg)
worker = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time;"
                           "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
                           "print(c.pid, flush=True); time.sleep(60)"], env=env, stdout=subprocess.PIPE, text=True,
                          start_new_session=True)
child = int(worker.stdout.readline())
# as a launcher that keeps its workers in its own session starts one (rank 7)
plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**env, "RANK": "7"})
seen = {"pid_namespace_init": os.getpid() == 1, "worker": worker.pid, "child": child}
seen["signalled"] = rank_script("signal", "5", "SIGSTOP").split()
wait_for(worker.pid, stopped=True)
seen["states_stopped"] = [state(worker.pid), state(child)]
seen["listed_stopped"] = rank_script("workers").split()
seen["other_rank"] = subprocess.run([sys.executable, SCRIPT, "signal", "6", "SIGCONT"], capture_output=True,
                                    text=True).returncode
rank_script("signal", "5", "SIGCONT")
wait_for(worker.pid, stopped=False)
seen["listed_going_on"] = rank_script("workers").split()
worker.kill()
worker.wait()  # its child is orphaned: handed to this process, PID 1, in the dead worker's session still
seen["orphan_parent"] = int(open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[1])
seen["listed_orphan_left"] = rank_script("workers").split()
seen["orphan_signalled"] = subprocess.run([sys.executable, SCRIPT, "signal", "5", "SIGSTOP"], capture_output=True,
                                          text=True).returncode
os.kill(child, 9)
plain.kill()
plain.wait()
wait_until_gone(child)
seen["listed_after_exit"] = rank_script("workers")
print(json.dumps(seen))

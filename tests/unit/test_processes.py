"""What still runs in a node container, as ``docker top`` lists it (when a stop grace runs out):
the job's processes as the user started them, with their state; nothing where the engine cannot
say; many nodes asked at once, a stuck engine holding no SIGKILL back."""
from __future__ import annotations

from orchestrate.engine.processes import processes_at_once
from orchestrate.text import grace_ran_out
from tests.fakes import FakeDockerClient, Script


def test_the_processes_a_grace_left_running_are_the_jobs_with_their_state_and_none_when_the_engine_cannot_say():
    from orchestrate.engine.processes import node_processes
    from tests.unit.test_supervisor_collaborators import node_container

    client = FakeDockerClient()
    hook = "/opt/ddp-compose/orchestrate/node/worker_start.py"
    container = node_container(client, "r", "node0", Script(hang=True, processes=(
        "/opt/venv/bin/python /opt/venv/bin/torchrun --nnodes 2 train.py", f"/opt/venv/bin/python -u {hook} train.py",
        f"/opt/venv/bin/python -u {hook} --collective-timeout 20 -- train.py --lr 0.1", "python3 " + "x" * 120,
        f"/opt/venv/bin/python /opt/venv/bin/torchrun --nnodes 2 --tee 3 {hook} --collective-timeout 20 -- train.py --lr 1",
        "python3 " + "y" * 92, "python3 eval.py --launcher torchrun", "python3 eval.py --after docker-init",
        "python3 eval.py --config /opt/ddp-compose/orchestrate/node/main.py")))
    container.start()
    assert node_processes(container) == [  # the node's own init and supervisor left out; the hook too
        "torchrun --nnodes 2 train.py (sleeping)", "python train.py (sleeping)", "python train.py --lr 0.1 (sleeping)",
        "python3 " + "x" * 89 + "... (sleeping)",
        "torchrun ... train.py --lr 1 (sleeping)",  # its own options are the plan's; the job is the user's
        "python3 " + "y" * 92 + " (sleeping)",  # 100 characters: whole
        "python3 eval.py --launcher torchrun (sleeping)",  # the job's own words, past where a launcher is named
        "python3 eval.py --after docker-init (sleeping)",
        "python3 eval.py --config /opt/ddp-compose/orchestrate/node/main.py (sleeping)"]
    assert node_processes(container, width=20)[:4:3] == ["torchrun --nnodes... (sleeping)",
                                                        "python3 xxxxxxxxx... (sleeping)"]
    container.kill()
    assert node_processes(container) == []  # ended: the engine's 409


def test_a_process_listing_without_the_columns_it_needs_lists_nothing_and_an_unknown_state_is_shown_as_it_is():
    from orchestrate.engine.processes import node_processes

    class Listed:
        def __init__(self, listing: dict) -> None:
            self.listing = listing

        def top(self, ps_args: str) -> dict:
            assert ps_args == "-o pid,stat,args"
            return self.listing

    assert node_processes(Listed({"Titles": ["PID", "COMMAND"], "Processes": [["1", "sleep 9"]]})) == []
    assert node_processes(Listed({"Titles": ["PID", "STAT", "COMMAND"], "Processes": [
        ["7", "W+", "sleep 9"], ["8", "Zs", "[python3]"], ["9", "S"], ["10", "S", ""], ["11", "S", "docker-init-check"],
        ["12", "Ss", "/sbin/docker-init -- python3 /opt/ddp-compose/orchestrate/node/main.py"]]})) == [
        "sleep 9 (W+)", "[python3] (a zombie)", "docker-init-check (sleeping)"]  # a short row and an empty one left out


def test_what_graces_left_running_is_asked_of_every_node_at_once_and_a_stuck_engine_holds_no_kill_back():
    import threading
    import time
    from types import SimpleNamespace

    import requests

    from tests.unit.test_supervisor_collaborators import node_container

    client = FakeDockerClient()
    nodes = [SimpleNamespace(name=f"node{n}", container=node_container(
        client, "r", f"node{n}", Script(hang=True, processes=(f"python3 train.py --part {n}",)))) for n in range(4)]
    for node in nodes:
        node.container.start()
    nodes[1].container.kill()  # ended meanwhile: the engine's 409
    released = threading.Event()

    def stuck(ps_args: str) -> dict:  # ps hangs on a process stuck in the kernel
        released.wait(30)
        return {}
    nodes[2].container.top = stuck

    def times_out(ps_args: str) -> dict:
        raise requests.exceptions.ReadTimeout("Read timed out")
    nodes[3].container.top = times_out
    began = time.monotonic()
    try:
        left = processes_at_once({node.name: node.container for node in nodes}, limit_s=0.5)
        took = time.monotonic() - began
    finally:
        released.set()
    assert left == {"node0": ["python3 train.py --part 0 (sleeping)"], "node1": [], "node3": []}  # node2: no answer
    assert took < 10, took  # the 0.5 s limit, not the stuck call's 30 s


def test_a_paused_nodes_processes_are_said_paused_not_stuck_in_the_kernel():
    from orchestrate.engine.processes import node_processes
    from tests.unit.test_supervisor_collaborators import node_container

    client = FakeDockerClient()
    container = node_container(client, "r", "node0", Script(hang=True, processes=("python3 train.py",)))
    container.start()
    container.pause()
    assert node_processes(container) == ["python3 train.py (paused)"]


def test_the_line_for_a_grace_that_ran_out_names_what_still_ran_when_anything_was_listed():
    assert grace_ran_out("node1", ["python train.py (sleeping)", "python3 x (stopped)"]) == (
        "node1 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran: python train.py"
        " (sleeping); python3 x (stopped)")
    assert grace_ran_out("node0", []) == "node0 did not stop within its grace after SIGTERM, so it got SIGKILL"


def test_a_background_call_runs_in_a_named_daemon_thread_and_hands_back_its_result_or_its_exception():
    import threading

    from orchestrate.engine.background import in_background

    release = threading.Event()
    seen: list[threading.Thread] = []

    def blocked(value: int) -> int:
        seen.append(threading.current_thread())
        release.wait(10)
        return value * 2
    future = in_background(blocked, 21, name="docker-stop-node0")
    try:
        assert not future.done()
    finally:
        release.set()
    assert future.result(timeout=10) == 42
    assert [(t.name, t.daemon) for t in seen] == [("docker-stop-node0", True)]  # never holds the process's exit

    def refused() -> None:
        raise ValueError("the engine refused")
    assert str(in_background(refused).exception(timeout=10)) == "the engine refused"

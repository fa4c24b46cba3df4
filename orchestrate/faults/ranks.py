"""Faults aimed at one worker process while its node stays healthy: finding the process of a
global rank in the nodes and signalling it (``kill-rank``: SIGKILL; ``hang-rank``: SIGSTOP,
then SIGCONT at its end), and finding the ranks that are stopped (a hung rank, named).

A worker is a process that torchrun started: its environment has ``TORCHELASTIC_RUN_ID`` and
its ``RANK``. The processes it starts itself (data loader workers) inherit both; the rank's
process is the one whose parent is not of the same rank. The script runs in the node as root,
the only user who may read every process's environment.
"""
from __future__ import annotations

from typing import Any

from orchestrate.engine.client import exec_output
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import EngineError

# Run in a node: ``python3 -c SCRIPT signal RANK SIGNAL`` signals the process of RANK and prints
# its pid; ``python3 -c SCRIPT stopped`` prints "RANK PID" for each rank whose process is stopped.
RANK_SCRIPT = r"""
import os, signal, sys

def environment(pid):
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read().decode("utf-8", "replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)

def parent_and_state(pid):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None, "?"
    return int(fields[1]), fields[0]

ranks = {}
for name in os.listdir("/proc"):
    if name.isdigit():
        env = environment(name)
        if "TORCHELASTIC_RUN_ID" in env and "RANK" in env:
            ranks[int(name)] = env["RANK"]
workers = {pid: rank for pid, rank in ranks.items() if ranks.get(parent_and_state(pid)[0]) != rank}
if sys.argv[1] == "signal":
    for pid, rank in workers.items():
        if rank == sys.argv[2]:
            os.kill(pid, getattr(signal, sys.argv[3]))
            print(pid)
else:
    for pid, rank in sorted(workers.items()):
        if parent_and_state(pid)[1] == "T":
            print(rank, pid)
"""


def signal_rank(client: Any, containers: dict[str, Any], rank: int, signal_name: str) -> str:
    """Send ``signal_name`` to the worker process of global ``rank``, wherever it runs among
    the nodes' ``containers`` (by node name); return the node it runs on.

    Raises:
        EngineError: When no node runs that rank now.
    """
    engine_said = ""
    for node, container in containers.items():
        try:
            code, output = exec_output(client, container, ["python3", "-c", RANK_SCRIPT, "signal", str(rank),
                                                           signal_name], user="0:0")
        except engine_errors() as exc:  # the node ended meanwhile: look on the others
            engine_said = f" (the engine: {describe(exc)})"
            continue
        if code == 0 and output.strip():
            return node
    raise EngineError(f"rank {rank} is not running on any node now{engine_said}")


def stopped_ranks(client: Any, container: Any) -> list[int]:
    """The global ranks whose worker process is stopped in this node (none when it cannot be
    asked: it ended, or the engine did not answer)."""
    try:
        code, output = exec_output(client, container, ["python3", "-c", RANK_SCRIPT, "stopped"], user="0:0")
    except engine_errors():
        return []
    if code != 0:
        return []
    return [int(line.split()[0]) for line in output.splitlines() if line.strip() and line.split()[0].isdigit()]

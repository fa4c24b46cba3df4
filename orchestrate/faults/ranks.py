"""Faults aimed at one worker process while its node stays healthy: finding the process of a
global rank in the nodes and signalling it (``kill-rank``: SIGKILL; ``hang-rank``: SIGSTOP,
then SIGCONT at its end), and listing a node's worker processes: the ranks that are stopped (a
hung rank, named) and those that have none any more (a rank that exited while the others wait).

How a node finds a rank's process is :mod:`orchestrate.node.rank_signal`, run there as root.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from orchestrate.engine.client import exec_answer, exec_output
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import EngineError
from orchestrate.node import rank_signal
from orchestrate.text import first_line

# Run in a node as ``python3 -c SCRIPT signal RANK SIGNAL`` or ``python3 -c SCRIPT workers``: the
# text of :mod:`orchestrate.node.rank_signal`, so that a node needs nothing of ddp-compose.
RANK_SCRIPT = Path(rank_signal.__file__).read_text(encoding="utf-8")


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
        if code == 0:  # by the status: its output may be lost on the way (docker/docker-py#2042)
            return node
        if code != rank_signal.NOT_HERE:
            engine_said = f" (the rank script on {node}: exit code {code}: {first_line(output) or 'no output'})"
    raise EngineError(f"rank {rank} is not running on any node now{engine_said}")


def worker_states(client: Any, container: Any) -> Optional[dict[int, str]]:
    """Every worker process in this node, by global rank: its state letter (``T``: stopped).
    A rank left out has no process here. None when the node cannot be asked: it ended, or the
    engine did not answer."""
    try:  # an answer without its end line lost its output on the way: asked again
        code, output = exec_answer(client, container, ["python3", "-c", RANK_SCRIPT, "workers"],
                                   lambda text: text.split()[-1:] == [rank_signal.END], user="0:0")
    except engine_errors():
        return None
    if code != 0 or output.split()[-1:] != [rank_signal.END]:
        return None
    states: dict[int, str] = {}
    for row in (line.split() for line in output.splitlines()):
        if len(row) == 3 and row[0].isdigit() and states.get(int(row[0])) != "T":
            states[int(row[0])] = row[2]  # two processes of a rank (an orphan kept its environment): stopped wins
    return states


def stopped_ranks(client: Any, container: Any) -> list[int]:
    """The global ranks whose worker process is stopped in this node (none when it cannot be
    asked)."""
    return [rank for rank, state in (worker_states(client, container) or {}).items() if state == "T"]

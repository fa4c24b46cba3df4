"""What still runs in a node container, as ``docker top`` lists it: the job's processes, each as
the user started it and with its state, asked of many nodes at once within a limit. Said when a
stop grace runs out, before the SIGKILL: by the launcher, and by ``stop RUN``."""
from __future__ import annotations

import logging
from concurrent.futures import wait
from typing import Any

from orchestrate.engine.background import in_background
from orchestrate.engine.errors import engine_errors
from orchestrate.plan.layout import NODE_MAIN, WORKER_START

log = logging.getLogger(__name__)

# What ps's STAT letter says of a process
PROCESS_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible sleep", "T": "stopped",
                  "t": "stopped by a tracer", "Z": "a zombie", "I": "idle"}
# How long the engine is given to list what stop graces left running, all nodes at once: their
# SIGKILLs wait for it (ps can hang on a process stuck in the kernel)
LISTING_LIMIT_S = 2.0


def node_processes(container: Any, width: int = 100) -> list[str]:
    """The job's processes still alive in a node, each its command line as the user wrote it
    (cut to ``width``) and its state, as ``docker top`` lists them; empty when the engine cannot
    say (it ended meanwhile)."""
    try:
        listing = container.top(ps_args="-o pid,stat,args")  # the engine needs the PID column
    except engine_errors() as exc:
        log.debug("processes of %s: %s", getattr(container, "name", container), exc)
        return []
    titles = listing.get("Titles") or []
    if "STAT" not in titles or "COMMAND" not in titles:
        return []
    stat, command = titles.index("STAT"), titles.index("COMMAND")
    paused = getattr(container, "status", "") == "paused"  # its processes frozen: ps says D
    found = []
    for row in listing.get("Processes") or []:
        words = str(row[command]).split() if len(row) > max(stat, command) else []
        if not words or words[0].rsplit("/", 1)[-1] == "docker-init" or NODE_MAIN in words[:3]:
            continue  # the node's own init and supervisor: not the job's
        args = readable_command(words)
        shown = args if len(args) <= width else args[:width - 3] + "..."
        state = "paused" if paused else PROCESS_STATES.get(str(row[stat])[:1], str(row[stat]))
        found.append(f"{shown} ({state})")
    return found


def readable_command(words: list[str]) -> str:
    """A node's process as the user started it: torch's launcher as ``torchrun ... SCRIPT ARGS``
    (its own options are the plan's), and a worker as ``python SCRIPT ARGS`` where it runs under
    the workers' start-up hook."""
    for at, word in enumerate(words[:3]):
        if word.rsplit("/", 1)[-1] == "torchrun":
            return " ".join(["torchrun", "...", *job_of(words)]) if WORKER_START in words else " ".join(
                ["torchrun", *words[at + 1:]])
        if word == WORKER_START:
            return " ".join(["python", *job_of(words)])
    return " ".join(words)


def job_of(words: list[str]) -> list[str]:
    """The job's own script and arguments in a command line that runs it under the workers'
    start-up hook (``WORKER_START [its options] -- SCRIPT ARGS``)."""
    rest = words[words.index(WORKER_START) + 1:]
    return rest[rest.index("--") + 1:] if "--" in rest else rest


def processes_at_once(containers: dict[str, Any], limit_s: float = LISTING_LIMIT_S) -> dict[str, list[str]]:
    """What still runs in each of these containers (by node name), asked of all at once, for at
    most ``limit_s``; a node the engine did not answer for in time has no entry."""
    if not containers:
        return {}
    asked = {in_background(node_processes, container, name=f"docker-top-{name}"): name
             for name, container in containers.items()}
    done, _ = wait(asked, timeout=limit_s)  # one still waiting on the engine is left to it
    return {asked[future]: future.result() for future in done if future.exception() is None}

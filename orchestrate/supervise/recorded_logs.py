"""``logs RUN`` of a run the engine no longer has: its lines as the run's directory recorded them.

A foreground run tears its nodes down as it ends, but its launcher kept every node's lines in
``<node>.log`` (a Slurm run's job in ``slurm-job.log``), rank-prefixed as the console showed
them. Those files carry no times, so a Compose run's lines come node by node, not merged.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from orchestrate.outcome.run_dirs import recorded_nodes
from orchestrate.supervise.log_selection import last, say_elastic_ranks_unchecked, select_nodes, select_ranks

SLURM_JOB_LOG = "slurm-job.log"  # a Slurm run's job output, every node's lines in the order they came

# The label a recorded line starts with (OutputLine.render): [node1/rank3], [node1/local0], [node1]
_LABEL = re.compile(r"\[(?P<node>[^\]/]+)(?:/rank(?P<rank>\d+)|/local\d+)?\]")


@dataclass(frozen=True)
class RecordedNode:
    """A node as the run's plan recorded it."""

    name: str
    global_ranks: tuple[int, ...]


@dataclass(frozen=True)
class RecordedLine:
    """One recorded line: the node and global rank its label names (None for a node's own line)."""

    node: str
    rank: Optional[int]
    text: str  # the whole line, label included


def parse_recorded(line: str) -> RecordedLine:
    """A recorded line with its label read; a line without one counts as nobody's rank."""
    label = _LABEL.match(line)
    if label is None:
        return RecordedLine("", None, line)
    rank = label.group("rank")
    return RecordedLine(label.group("node"), int(rank) if rank is not None else None, line)


def read_recorded(path: Path) -> list[RecordedLine]:
    with open(path, encoding="utf-8", errors="replace") as log:
        return [parse_recorded(line.rstrip("\n")) for line in log]


def recorded_lines(run_dir: Path, *, node: Optional[str] = None, ranks: Iterable[int] = (),
                   tail: Optional[int] = None, say: Callable[[str], None] = print,
                   why: str = "is no longer in the engine") -> Iterator[str]:
    """The lines the run's directory recorded (all nodes, or one; every line, or those of
    ``ranks``; all, or the last ``tail`` of each log), saying where they come from, and ``why``.

    Raises:
        UsageError: For a node or rank the run does not have, or a plan that cannot be read.
    """
    run_id = run_dir.name
    nodes = [(RecordedNode(name, held), run_dir / f"{name}.log") for name, held in recorded_nodes(run_dir)]
    wanted = set(ranks)
    elastic = bool(nodes) and not any(n.global_ranks for n, _ in nodes)
    chosen = select_ranks(run_id, elastic, nodes, select_nodes(run_id, nodes, node), wanted)
    if wanted and elastic:
        say_elastic_ranks_unchecked(run_id, wanted, say)

    def kept(line: RecordedLine) -> bool:  # (with --rank, a rank's own lines only, as from the engine)
        return (node is None or line.node == node) and (not wanted or line.rank in wanted)

    job_log = run_dir / SLURM_JOB_LOG
    if not any(path.is_file() for _, path in nodes) and job_log.is_file():
        say(f"run {run_id} {why}: its Slurm job's lines as {job_log} recorded them")
        yield from last((ln.text for ln in read_recorded(job_log) if kept(ln)), tail)
        return
    said_where = False
    for recorded, path in chosen:
        if not path.is_file():
            say(f"{recorded.name} left no log in {run_dir} (it did not start, or its lines were never read)")
            continue
        if not said_where:
            each = f", the last {tail} of each node's" if tail is not None and len(chosen) > 1 else ""
            say(f"run {run_id} {why}: its lines as {run_dir} recorded them,"
                f" node by node{each} (the files keep no times to merge them by)")
            said_where = True
        yield from last((ln.text for ln in read_recorded(path) if kept(ln)), tail)

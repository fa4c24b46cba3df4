"""``logs RUN``: a run's output from the engine, rank-prefixed, merged in time or followed."""
from __future__ import annotations

import queue
from typing import IO, Any, Iterator, Optional

from orchestrate.engine.container_log import LogLine, follow_log, read_log
from orchestrate.engine.runs import RunInfo, node_plans
from orchestrate.errors import UsageError
from orchestrate.plan.model import NodePlan
from orchestrate.supervise.worker_lines import WorkerLines


def select_nodes(run: RunInfo, node: Optional[str]) -> list[tuple[NodePlan, Any]]:
    """The (plan, container) of every node, or of ``node`` only.

    Raises:
        UsageError: For a node the run does not have.
    """
    pairs = [(plan, info.container) for plan, info in zip(node_plans(run), run.nodes)]
    if node is None:
        return pairs
    chosen = [pair for pair in pairs if pair[0].name == node]
    if not chosen:
        names = ", ".join(p.name for p, _ in pairs)
        raise UsageError(f"--node {node}: run {run.run_id} has no such node (nodes: {names})")
    return chosen


def history(pairs: list[tuple[NodePlan, Any]]) -> Iterator[str]:
    """Every line the nodes printed so far, rank-prefixed and merged by time."""
    width = max(len(f"{p.name}/rank{max(p.global_ranks, default=9)}") for p, _ in pairs) + 1
    lines = []
    for order, (plan, container) in enumerate(pairs):
        worker_lines = WorkerLines(plan)
        stamp = 0.0
        for logged in read_log(container):
            stamp = logged.stamp or stamp
            lines.extend((stamp, order, len(lines), ln.render(width))
                         for ln in worker_lines.feed(logged.text, logged.source))
        lines.extend((stamp, order, len(lines), ln.render(width)) for ln in worker_lines.flush())
    for *_, rendered in sorted(lines):
        yield rendered


def follow(pairs: list[tuple[NodePlan, Any]]) -> Iterator[str]:
    """The nodes' lines as they come, until every node's container has stopped."""
    width = max(len(f"{p.name}/rank{max(p.global_ranks, default=9)}") for p, _ in pairs) + 1
    arrived: "queue.Queue[tuple[int, Optional[LogLine]]]" = queue.Queue()
    for order, (plan, container) in enumerate(pairs):
        follow_log(container, lambda line, order=order: arrived.put((order, line)), name=f"logs-{plan.name}")
    worker_lines = [WorkerLines(plan) for plan, _ in pairs]
    open_streams = len(pairs)
    while open_streams:
        order, line = arrived.get()
        if line is None:
            open_streams -= 1
            done = worker_lines[order].flush()
        else:
            done = worker_lines[order].feed(line.text, line.source)
        yield from (ln.render(width) for ln in done)


def print_logs(run: RunInfo, out: IO[str], *, node: Optional[str] = None, follow_live: bool = False) -> None:
    """Print a run's output (all nodes, or one), then follow it if asked."""
    pairs = select_nodes(run, node)
    for line in (follow(pairs) if follow_live else history(pairs)):
        out.write(line + "\n")
        out.flush()

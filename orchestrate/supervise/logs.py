"""``logs RUN``: a run's output from the engine, rank-prefixed, merged in time or followed."""
from __future__ import annotations

import queue
import re
import threading
from typing import IO, Any, Iterator, Optional

from orchestrate.engine.client import engine_time, stream_lines
from orchestrate.engine.runs import RunInfo, node_plans
from orchestrate.errors import UsageError
from orchestrate.plan.model import NodePlan
from orchestrate.supervise.worker_lines import WorkerLines

_TIMESTAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+Z) ?(.*)$", re.S)


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


def split_stamp(raw: str) -> tuple[float, str]:
    match = _TIMESTAMPED.match(raw)
    if not match:
        return 0.0, raw
    return engine_time(match.group(1)) or 0.0, match.group(2)


def history(pairs: list[tuple[NodePlan, Any]]) -> Iterator[str]:
    """Every line the nodes printed so far, rank-prefixed and merged by time."""
    width = max(len(f"{p.name}/rank{max(p.global_ranks, default=9)}") for p, _ in pairs) + 1
    lines = []
    for order, (plan, container) in enumerate(pairs):
        worker_lines = WorkerLines(plan)
        stamp = 0.0
        # The engine ends each line with "\n" only: a "\r" inside one is the line's own.
        for raw in container.logs(timestamps=True).decode("utf-8", "replace").replace("\0", "").split("\n"):
            if raw:
                stamp, text = split_stamp(raw)
                lines.extend((stamp, order, len(lines), ln.render(width)) for ln in worker_lines.feed(text))
        lines.extend((stamp, order, len(lines), ln.render(width)) for ln in worker_lines.flush())
    for *_, rendered in sorted(lines):
        yield rendered


def follow(pairs: list[tuple[NodePlan, Any]]) -> Iterator[str]:
    """The nodes' lines as they come, until every node's container has stopped."""
    width = max(len(f"{p.name}/rank{max(p.global_ranks, default=9)}") for p, _ in pairs) + 1
    lines: "queue.Queue[Optional[str]]" = queue.Queue()

    def read(plan: NodePlan, container: Any) -> None:
        worker_lines = WorkerLines(plan)
        try:
            for raw in stream_lines(container.logs(stream=True, follow=True, timestamps=True)):
                for line in worker_lines.feed(split_stamp(raw.decode("utf-8", "replace").replace("\0", ""))[1]):
                    lines.put(line.render(width))
        finally:
            for line in worker_lines.flush():
                lines.put(line.render(width))
            lines.put(None)

    for plan, container in pairs:
        threading.Thread(target=read, args=(plan, container), daemon=True).start()
    open_streams = len(pairs)
    while open_streams:
        line = lines.get()
        if line is None:
            open_streams -= 1
        else:
            yield line


def print_logs(run: RunInfo, out: IO[str], *, node: Optional[str] = None, follow_live: bool = False) -> None:
    """Print a run's output (all nodes, or one), then follow it if asked."""
    pairs = select_nodes(run, node)
    for line in (follow(pairs) if follow_live else history(pairs)):
        out.write(line + "\n")
        out.flush()

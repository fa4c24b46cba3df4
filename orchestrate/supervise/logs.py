"""``logs RUN``: a run's output from the engine, rank-prefixed, merged in time or followed; from its
directory once the engine no longer has it (see :mod:`~orchestrate.supervise.recorded_logs`)."""
from __future__ import annotations

import contextlib
import queue
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Optional

from orchestrate.engine.client import engine_now
from orchestrate.engine.container_log import SOURCES, LogLine, Position, advanced, follow_log, looked_at, read_log
from orchestrate.engine.labels import LAUNCHER_LABEL
from orchestrate.engine.runs import RunInfo, find_run, launcher_alive, node_plans
from orchestrate.errors import EngineUnavailableError, NoSuchRunError
from orchestrate.outcome.events import launcher_exit_code, read_events
from orchestrate.outcome.run_dirs import find_run_dir
from orchestrate.plan.model import NodePlan
from orchestrate.supervise.log_selection import last, say_elastic_ranks_unchecked, select_nodes, select_ranks
from orchestrate.supervise.recorded_logs import recorded_lines
from orchestrate.supervise.worker_lines import OutputLine, WorkerLines
from orchestrate.supervise.worker_quiet import QuietNotice
from orchestrate.text import no_run_named


def node_plans_of(run: RunInfo) -> list[tuple[NodePlan, Any]]:
    return [(plan, info.container) for plan, info in zip(node_plans(run), run.nodes)]


Keep = Callable[[OutputLine], bool]


def every_line(line: OutputLine) -> bool:
    return True


def label_width(pairs: list[tuple[NodePlan, Any]]) -> int:
    return max(len(f"{p.name}/rank{max(p.global_ranks, default=9)}") for p, _ in pairs) + 1


def read_so_far(pairs: list[tuple[NodePlan, Any]], keep: Keep, *, ended: bool
                ) -> tuple[list[OutputLine], list[WorkerLines], list[dict[str, Position]]]:
    """The lines the nodes printed so far (those ``keep`` takes), merged by time; each node's
    reader of its lines and where each of its streams was read to. ``ended``: the pieces of
    lines left unfinished count as lines (nothing follows them)."""
    stamped: list[tuple[float, int, int, OutputLine]] = []
    readers, positions = [], []
    for order, (plan, container) in enumerate(pairs):
        worker_lines = WorkerLines(plan)
        read_to = {source: (0.0, 0) for source in SOURCES}
        stamp = 0.0
        for logged in read_log(container):
            read_to[logged.source] = advanced(read_to[logged.source], logged.stamp)
            stamp = logged.stamp or stamp
            stamped.extend((stamp, order, len(stamped), ln) for ln in worker_lines.feed(logged.text, logged.source))
        if ended:
            stamped.extend((stamp, order, len(stamped), ln) for ln in worker_lines.flush())
        readers.append(worker_lines)
        positions.append(read_to)
    return [line for *_, line in sorted(stamped, key=lambda s: s[:3]) if keep(line)], readers, positions


def history(pairs: list[tuple[NodePlan, Any]], keep: Keep = every_line, tail: Optional[int] = None) -> Iterator[str]:
    """Every line the nodes printed so far (those ``keep`` takes; the last ``tail`` of them),
    rank-prefixed and merged by time."""
    width = label_width(pairs)
    lines, _, _ = read_so_far(pairs, keep, ended=True)
    for line in last(lines, tail):
        yield line.render(width)


LOOK_AGAIN_S = 0.5  # how often a node whose log ended is looked at for a start again, while the run may start it


def nothing_starts_again() -> bool:
    return False


def may_start_nodes_again(run: RunInfo) -> Callable[[], bool]:
    """Whether the run may still start a node again, looked at now: its launcher runs and has
    not said how the run ended (an elastic recovery, a preempted node's return, a restart fault
    are its doing; a detached run's nodes only start again with a follower, as its own)."""
    def goes_on() -> bool:
        return (launcher_alive(run.labels.get(LAUNCHER_LABEL, "")) is True
                and launcher_exit_code(read_events(run.run_dir)) is None)
    return goes_on


YET_TO_START = ("created", "restarting")  # a container that will start: its log is followed when it does


@dataclass
class FollowedNode:
    """One node as ``logs -f`` follows it: the reader of its lines, where each of its streams
    was read to, and the start of the run of its container followed."""

    plan: NodePlan
    container: Any
    reader: WorkerLines
    read_to: dict[str, Position]
    run_started: Optional[float] = None
    log_open: bool = False


def follow(pairs: list[tuple[NodePlan, Any]], keep: Keep = every_line, tail: Optional[int] = None,
           goes_on: Callable[[], bool] = nothing_starts_again, say: Callable[[str], None] = print,
           each_look: Callable[[], None] = lambda: None) -> Iterator[str]:
    """The nodes' lines (those ``keep`` takes) as they come, from the first, or from the last
    ``tail`` of those printed so far; a node whose container starts again (a restart, an
    elastic recovery) is followed on into its new run. Ends when every node's log has ended
    and none will start: none is yet to, and ``goes_on`` says the run may start none again, or
    every node's container is gone. ``each_look`` runs as the nodes are looked at (every
    ``LOOK_AGAIN_S``), lines or none."""
    width = label_width(pairs)
    arrived: "queue.Queue[tuple[int, Optional[LogLine]]]" = queue.Queue()
    if tail is None:
        readers = [WorkerLines(plan) for plan, _ in pairs]
        read_to: list[dict[str, Position]] = [{} for _ in pairs]
    else:
        lines, readers, read_to = read_so_far(pairs, keep, ended=False)
        yield from (line.render(width) for line in last(lines, tail))
        # followed from there, by the same readers: a line begun before goes on
    nodes = [FollowedNode(plan, container, reader, dict(since))
             for (plan, container), reader, since in zip(pairs, readers, read_to)]

    def start(order: int, node: FollowedNode) -> None:
        _, node.run_started = looked_at(node.container)  # (before its streams look: a start after is a new run)
        node.log_open = True
        follow_log(node.container, lambda line: arrived.put((order, line)), since=dict(node.read_to),
                   name=f"logs-{node.plan.name}")

    for order, node in enumerate(nodes):
        start(order, node)
    look_at = time.monotonic() + LOOK_AGAIN_S
    while True:
        with contextlib.suppress(queue.Empty):
            order, line = arrived.get(timeout=max(0.0, look_at - time.monotonic()))
            node = nodes[order]
            if line is None:
                node.log_open = False
                done = node.reader.flush()
            else:
                node.read_to[line.source] = advanced(node.read_to.get(line.source, (0.0, 0)), line.stamp)
                done = node.reader.feed(line.text, line.source)
            yield from (ln.render(width) for ln in done if keep(ln))
        if time.monotonic() < look_at:  # (looked at on time, not per line: a node prints on)
            continue
        each_look()
        yet_to_start, every_one_gone = False, True
        for order, node in enumerate(nodes):
            if node.log_open:
                every_one_gone = False
                continue
            status, started = looked_at(node.container)
            every_one_gone = every_one_gone and status == "gone"
            if started is not None and (node.run_started is None or started > node.run_started):
                if node.run_started is not None:  # (a first start is no news)
                    say(f"{node.plan.name} started again: its new run follows")
                start(order, node)
            yet_to_start = yet_to_start or status in YET_TO_START
        if every_one_gone or not any(n.log_open for n in nodes) and not yet_to_start and not goes_on():
            return  # (a container removed starts no more: a launcher kept alive by more work has no say)
        look_at = time.monotonic() + LOOK_AGAIN_S


def print_run_logs(engine: Callable[[], Any], run_id: str, runs_dir: Path, out: IO[str], *,
                   node: Optional[str] = None, ranks: Iterable[int] = (), tail: Optional[int] = None,
                   follow_live: bool = False, runs_dir_given: bool = False,
                   say: Callable[[str], None] = print) -> None:
    """``logs RUN``: the run's output from the engine (see :func:`print_logs`), or, where the
    engine no longer has it or cannot be reached (``engine()`` connects to it), as its directory
    in ``runs_dir`` recorded it (``runs_dir_given``: the user named it, so a run in neither is
    not told to name one).

    Raises:
        UsageError: For a run neither has, or a run id that names several runs, a node or rank the
            run does not have.
        EngineUnavailableError: When no engine answers and ``runs_dir`` has no such run.
    """
    try:
        run = find_run(engine(), run_id)
    except (NoSuchRunError, EngineUnavailableError) as not_there:
        unreachable = isinstance(not_there, EngineUnavailableError)
        try:
            run_dir = find_run_dir(runs_dir, run_id)
        except NoSuchRunError as not_recorded:
            if not isinstance(not_there, NoSuchRunError):  # no engine answers: it may have the run
                raise not_there from None
            middle = tuple(sorted({*not_there.in_middle, *not_recorded.in_middle}))
            see = "see `python -m orchestrate ps`" + ("" if runs_dir_given else ", or give --runs-dir")
            raise NoSuchRunError(no_run_named(run_id, f"in the engine or in {runs_dir}", see, middle), middle) from None
    else:
        client = engine()
        print_logs(run, out, node=node, ranks=ranks, tail=tail, follow_live=follow_live, say=say,
                   engine_clock=lambda: engine_now(client))
        return
    why, no_follow = (("cannot be looked up, as no Docker engine answers", "cannot be followed without the engine")
                      if unreachable else ("is no longer in the engine", "has ended: there is nothing more to follow"))
    for line in recorded_lines(run_dir, node=node, ranks=ranks, tail=tail, say=say, why=why):
        out.write(line + "\n")
    out.flush()
    if follow_live:
        say(f"run {run_dir.name} {no_follow}")


def print_logs(run: RunInfo, out: IO[str], *, node: Optional[str] = None, ranks: Iterable[int] = (),
               tail: Optional[int] = None, follow_live: bool = False, say: Callable[[str], None] = print,
               engine_clock: Optional[Callable[[], float]] = None) -> None:
    """Print a run's output (all nodes, or one; every line, or those of ``ranks``; all of it, or
    its last ``tail`` lines), then follow it if asked; ``say`` says what the choice could not check,
    and, where ``engine_clock`` gives the clock of the engine's log stamps, that a Compose run
    followed went quiet for its ``--hang-diagnose-after`` (:class:`QuietNotice`), once per quiet
    spell, so that a hung detached run does not leave ``logs -f`` silent for ever."""
    wanted = set(ranks)
    every = node_plans_of(run)
    pairs = select_ranks(run.run_id, run.elastic, every, select_nodes(run.run_id, every, node), wanted)
    if wanted and run.elastic:
        say_elastic_ranks_unchecked(run.run_id, wanted, say)

    def keep(line: OutputLine) -> bool:
        return not wanted or line.global_rank in wanted

    quiet = (QuietNotice(run, engine_clock, say) if engine_clock is not None and run.scheduler == "compose"
             else lambda: None)
    lines = (follow(pairs, keep, tail, goes_on=may_start_nodes_again(run), say=say, each_look=quiet) if follow_live
             else history(pairs, keep, tail))
    printed = 0
    for line in lines:
        out.write(line + "\n")
        out.flush()
        printed += 1
    if not printed and not follow_live and tail != 0:  # (so that no output is not taken for a failed command)
        say(nothing_printed(run, node, sorted(wanted)))


def nothing_printed(run: RunInfo, node: Optional[str], ranks: list[int]) -> str:
    """What ``logs`` says of a run (its ``node``, its ``ranks``) that printed no line so far."""
    whose = (f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of run {run.run_id}" if ranks
             else f"node {node} of run {run.run_id}" if node else f"run {run.run_id}")
    if run.state.ended:
        return f"{whose} printed no output"
    return (f"{whose} has printed no output yet (its nodes may still be starting: torchrun and the workers' imports"
            f" take a while); follow it with: python -m orchestrate logs {run.run_id} -f")

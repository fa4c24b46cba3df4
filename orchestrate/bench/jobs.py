"""The library's entry points of ``bench``: the worker command line of each benchmark (its ``app/``
program, writing its figures to the run's directory), and what becomes of a finished run's
figures (the summary, the table, the JSON and the plot, and the report page again). The runs
themselves go through the library (``launch``), as every run does; the CLI only parses and
prints."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from orchestrate.bench import collectives, ddp, plots
from orchestrate.bench.artifacts import BENCH_FILE, write_artifacts
from orchestrate.config.request import RunRequest
from orchestrate.errors import UsageError
from orchestrate.plan.layout import RUN_DIR_MOUNT
from orchestrate.report.page import write_report_quietly
from orchestrate.text import format_bytes, short_duration

# Where a benchmark's workers write their figures: the run's directory, as the nodes see it.
BENCH_OUT = f"{RUN_DIR_MOUNT}/{BENCH_FILE}"
# Run options a benchmark refuses (its request's field -> the option, and why): it builds its own job
# and measures it as it runs undisturbed.
NOT_FOR_A_BENCH = {
    "sbatch": ("--sbatch", "a batch script of your own would run in place of the job the bench builds"),
    "faults": ("--fault", ("a fault would be measured as if the link and nodes were that slow (a slower link:"
                           " --link)")),
    "post_mortem": ("--pdb", "the bench's programs are the tool's own, and a rank stopped in pdb measures nothing"),
}
# The collectives app.bench_collectives measures (its --ops choices).
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def message_bytes(text: str, allow_zero: bool = False) -> int:
    """Bytes in a message size as ``app.bench_collectives`` and Docker read it (``4``, ``1K``,
    ``64M``, ``1.5G``, a ``B`` after them or not), above 0 (or 0 where ``allow_zero``: none).

    Raises:
        UsageError: Not a size, or one too small.
    """
    from docker.errors import DockerException
    from docker.utils import parse_bytes

    try:
        size = int(parse_bytes(text.strip()))
    except (DockerException, ValueError, OverflowError):
        raise UsageError(f"expected a size in bytes like 4, 1K or 64M, got {text!r}") from None
    if size < 0 or (size == 0 and not allow_zero):
        raise UsageError(f"expected a size {'of 0 bytes or more' if allow_zero else 'above 0 bytes'}, e.g. 4 or 1K,"
                         f" got {text!r}")
    return size


@dataclass(frozen=True)
class BenchReport:
    """A benchmark's table, and where its JSON and plot were written."""

    table: str
    data: Path
    plot: Path

    def format(self) -> str:
        return f"{self.table}\nresults: {self.data}\nplot: {self.plot}"


def check_bench_request(kind: str, request: RunRequest) -> None:
    """Refuse the run options that have no place in ``bench KIND`` (:data:`NOT_FOR_A_BENCH`),
    naming the bench, before anything is asked of the engine.

    Raises:
        UsageError: Naming each option given and why.
    """
    given = [NOT_FOR_A_BENCH[dest] for dest in NOT_FOR_A_BENCH if getattr(request, dest)]
    if given:
        flags = ", ".join(flag for flag, _ in given)
        raise UsageError(f"{flags} {'is' if len(given) == 1 else 'are'} not for bench {kind}, which builds and"
                         f" measures its own job: " + "; ".join(why for _, why in given)
                         + "; run a job of your own with python -m orchestrate run")


WIRE_ROUNDS = 3  # each of the wire test's three measures is taken this often (app.bench_collectives' rounds=3)


def wire_test_note(wire_bytes: int, rate_bits: Optional[int], pairs: int = 1) -> str:
    """What ``bench collectives`` says before its wire test, which prints nothing until it ends:
    what it sends, and, at a ``--link rate=`` (``rate_bits``), about how long that takes: node 0
    sends each stream's bytes once alone, then once per process pair (``pairs``), then (both ways)
    once per pair again, ``WIRE_ROUNDS`` times each, through its shaped egress; "" where it is
    skipped (``--wire-bytes 0``)."""
    if not wire_bytes:
        return ""
    size = format_bytes(wire_bytes, upper=True)
    sent = f"the wire test sends {size} per TCP stream, {WIRE_ROUNDS} rounds of each of its three measures"
    if rate_bits:
        seconds = WIRE_ROUNDS * wire_bytes * (1 + 2 * pairs) / (rate_bits / 8)
        sent += f": about {short_duration(seconds)} at the link's rate before the collectives' table"
    return f"{sent}; --wire-bytes shortens it (e.g. --wire-bytes 16M; 0 skips it)"


def collectives_target(*, min_size: str, max_size: str, min_time_s: float, wire_bytes: str,
                       ops: Optional[Sequence[str]] = None) -> list[str]:
    """The workers' command line of ``bench collectives``.

    Raises:
        UsageError: What its workers would refuse, or never end on, before any node starts: an
            operation they do not measure, a size that is none or below 1 byte, a smallest
            message above the largest, timed calls of no time.
    """
    unknown = [op for op in ops or () if op not in COLLECTIVE_OPS]
    if unknown:
        raise UsageError(f"--ops: no collective {', '.join(map(repr, unknown))} (choose from"
                         f" {', '.join(COLLECTIVE_OPS)})")
    sizes = {}
    for flag, text in (("--min-size", min_size), ("--max-size", max_size), ("--wire-bytes", wire_bytes)):
        try:
            sizes[flag] = message_bytes(text, allow_zero=flag == "--wire-bytes")
        except UsageError as exc:
            raise UsageError(f"{flag}: {exc}") from None
    smallest, largest = sizes["--min-size"], sizes["--max-size"]
    if smallest > largest:
        raise UsageError(f"--min-size {min_size} is above --max-size {max_size}")
    if not 0 < min_time_s < math.inf:
        raise UsageError(f"--min-time must be above 0 seconds, got {min_time_s:g}")
    # (the workers get the bytes read here: two readers of one text could disagree)
    min_size, max_size, wire_bytes = (str(sizes[flag]) for flag in ("--min-size", "--max-size", "--wire-bytes"))
    return ["-m", "app.bench_collectives", "--out", BENCH_OUT, "--min-size", min_size, "--max-size", max_size,
            "--min-time", f"{min_time_s:g}", "--wire-bytes", wire_bytes, *(["--ops", *ops] if ops else [])]


def ddp_target(*, steps: int, batch_size: int, image_size: int, buckets_mb: Sequence[float],
               batch_sizes: Optional[Sequence[int]] = None, sweep: Optional[bool] = None) -> list[str]:
    """The workers' command line of ``bench ddp``.

    Raises:
        UsageError: A bucket size of no bytes, or --sweep with --batch-sizes.
    """
    if batch_sizes and sweep:
        raise UsageError("--sweep searches batch sizes from --batch-size, and --batch-sizes measures the sizes given:"
                         " give one")
    if any(not 0 < bucket < math.inf for bucket in buckets_mb):
        raise UsageError(f"--buckets: bucket sizes must be above 0 MB, got {' '.join(f'{b:g}' for b in buckets_mb)}")
    target = ["-m", "app.bench_ddp", "--out", BENCH_OUT, "--steps", str(steps), "--batch-size", str(batch_size),
              "--image-size", str(image_size), "--buckets", *[f"{b:g}" for b in buckets_mb]]
    if batch_sizes:
        target += ["--batch-sizes", *[str(b) for b in batch_sizes]]
    if sweep is not None:
        target.append("--sweep" if sweep else "--no-sweep")
    return target


def figures(run_dir: Path) -> dict:
    """What a benchmark's workers wrote."""
    return json.loads((run_dir / BENCH_FILE).read_text())


def report_collectives(run_dir: Path, link: str) -> BenchReport:
    """A finished ``bench collectives`` run: its summary against the wire, written beside it."""
    summary = collectives.collectives_summary(figures(run_dir), link)
    data, plot = write_artifacts(run_dir, "bench", summary, plots.plot_collectives, summary)
    write_report_quietly(run_dir)  # again, with the benchmark's table and plot
    return BenchReport(collectives.format_collectives(summary), data, plot)


def report_ddp(run_dirs: Sequence[Path], link: str = "") -> BenchReport:
    """Finished ``bench ddp`` runs, one per node count (over ``link``, "" for the bridge as it
    is): their summaries, and their table's rows as the results the report page shows, written
    beside the last."""
    summaries = [ddp.ddp_summary(figures(run_dir), link) for run_dir in run_dirs]
    data, plot = write_artifacts(run_dirs[-1], "bench", {"runs": summaries, "results": ddp.ddp_rows(summaries)},
                                 plots.plot_ddp, summaries)
    write_report_quietly(run_dirs[-1])
    return BenchReport(ddp.format_ddp(summaries), data, plot)

"""The library's entry points of ``bench``: the worker command line of each benchmark (its ``app/``
program, writing its figures to the run's directory), and what becomes of a finished run's
figures (the summary, the table, the JSON and the plot, and the report page again). The runs
themselves go through the library (``launch``), as every run does; the CLI only parses and
prints."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from orchestrate.bench import collectives, ddp, plots
from orchestrate.bench.artifacts import BENCH_FILE, write_artifacts
from orchestrate.plan.layout import RUN_DIR_MOUNT
from orchestrate.report.page import write_report_quietly

# Where a benchmark's workers write their figures: the run's directory, as the nodes see it.
BENCH_OUT = f"{RUN_DIR_MOUNT}/{BENCH_FILE}"


@dataclass(frozen=True)
class BenchReport:
    """A benchmark's table, and where its JSON and plot were written."""

    table: str
    data: Path
    plot: Path

    def format(self) -> str:
        return f"{self.table}\nresults: {self.data}\nplot: {self.plot}"


def collectives_target(*, min_size: str, max_size: str, min_time_s: float, wire_bytes: str,
                       ops: Optional[Sequence[str]] = None) -> list[str]:
    """The workers' command line of ``bench collectives``."""
    return ["-m", "app.bench_collectives", "--out", BENCH_OUT, "--min-size", min_size, "--max-size", max_size,
            "--min-time", f"{min_time_s:g}", "--wire-bytes", wire_bytes, *(["--ops", *ops] if ops else [])]


def ddp_target(*, steps: int, batch_size: int, image_size: int, buckets_mb: Sequence[float],
               batch_sizes: Optional[Sequence[int]] = None, sweep: Optional[bool] = None) -> list[str]:
    """The workers' command line of ``bench ddp``."""
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


def report_ddp(run_dirs: Sequence[Path]) -> BenchReport:
    """Finished ``bench ddp`` runs, one per node count: their summaries, written beside the last."""
    summaries = [ddp.ddp_summary(figures(run_dir)) for run_dir in run_dirs]
    data, plot = write_artifacts(run_dirs[-1], "bench", {"runs": summaries}, plots.plot_ddp, summaries)
    write_report_quietly(run_dirs[-1])
    return BenchReport(ddp.format_ddp(summaries), data, plot)

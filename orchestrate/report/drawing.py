"""matplotlib, set up once for files (no display), imported only when something is drawn: the
benchmarks' PNG plots (:mod:`orchestrate.bench.plots`). The report page draws without it
(:mod:`orchestrate.report.svg`)."""
from __future__ import annotations

from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt

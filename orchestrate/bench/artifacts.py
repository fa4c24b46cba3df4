"""What every benchmark leaves: its figures as JSON and its plot."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

BENCH_FILE = "bench.json"


def link_lines(link: str) -> list[str]:
    """The line a benchmark's table starts with where its nodes' links were shaped (``--link``),
    so that its figures are never read as the bridge's; none where they were not."""
    return [f"link {link}: every figure below was measured over this shaped link (--link)"] if link else []


def write_artifacts(directory: Path, name: str, data: dict, plot: Callable[[Any, Path], Path], plot_input: Any) -> tuple[Path, Path]:
    """Write ``<name>.json`` and draw ``<name>.png`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    data_path = directory / f"{name}.json"
    data_path.write_text(json.dumps(data, indent=2) + "\n")
    return data_path, plot(plot_input, directory / f"{name}.png")

"""Comparing the ``--compare`` files of two runs: tensors with ``torch.load`` inside a node of the
run's own image (the launcher never imports torch), exactly or within a relative tolerance;
any other file byte for byte."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from orchestrate.chaos.verdict import FileComparison
from orchestrate.engine.errors import describe, engine_errors
from orchestrate.errors import EngineError
from orchestrate.node import compare_tensors

# Run in a node as ``python3 -c SCRIPT RTOL FIRST_DIR SECOND_DIR PATH...``: the text of
# :mod:`orchestrate.node.compare_tensors`, so that a node needs nothing of ddp-compose.
COMPARE_SCRIPT = Path(compare_tensors.__file__).read_text(encoding="utf-8")


def compare_files(client: Any, image: str, undisturbed: Path, with_faults: Path, paths: list[str], rtol: float,
                  run_as: Optional[str] = None) -> list[FileComparison]:
    """Each of ``paths`` (relative to the work directories) in the two runs' copies.

    Raises:
        EngineError: When the comparison's container cannot run.
    """
    comparisons: dict[str, FileComparison] = {}
    present = []
    for path in paths:
        missing = [name for name, base in (("the undisturbed run", undisturbed), ("the run with faults", with_faults))
                   if not (base / path).is_file()]
        if missing:
            comparisons[path] = FileComparison(path, "bytes", False, problem=f"missing in {' and '.join(missing)}")
        else:
            present.append(path)
    for row in load_and_compare(client, image, undisturbed, with_faults, present, rtol, run_as):
        path = row["path"]
        if row["loadable"]:
            comparisons[path] = FileComparison(path, "tensors", row["equal"], row["max_difference"], row["where"],
                                               rtol=rtol, rtol_needed=row.get("rtol_needed"))
        else:
            same = (undisturbed / path).read_bytes() == (with_faults / path).read_bytes()
            comparisons[path] = FileComparison(path, "bytes", same)
    return [comparisons[p] for p in paths]


def load_and_compare(client: Any, image: str, undisturbed: Path, with_faults: Path, paths: list[str], rtol: float,
                     run_as: Optional[str]) -> list[dict]:
    if not paths:
        return []
    try:
        output = client.containers.run(
            image, ["python3", "-c", COMPARE_SCRIPT, f"{rtol:g}", "/undisturbed", "/with-faults", *paths], remove=True, entrypoint=[],
            user=run_as or "", environment={"PYTHONDONTWRITEBYTECODE": "1"},
            volumes={str(undisturbed): {"bind": "/undisturbed", "mode": "ro"},
                     str(with_faults): {"bind": "/with-faults", "mode": "ro"}})
    except engine_errors() as exc:
        stderr = getattr(exc, "stderr", None)  # a ContainerError's: what the comparison said, not its command line
        said = [ln for ln in (stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else str(stderr or ""))
                .splitlines() if ln.strip()]
        why = (f"the comparison exited {getattr(exc, 'exit_status', '?')}: {said[-1].strip()}" if said
               else describe(exc))
        raise EngineError(f"cannot compare the runs' files in a container of {image}: {why}") from None
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

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

# Run in a node as ``python3 -c SCRIPT RTOL FIRST_DIR SECOND_DIR PATH...``: loads each pair with torch.load and walks them together (dicts, lists,
# tensors, numbers); prints one JSON object per path. A file torch cannot load is "bytes".
COMPARE_SCRIPT = r"""
import json, sys
import torch

def walk(a, b, where, rtol, worst):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            worst.append((float("inf"), where + f" (shape {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype})"))
            return False
        if not a.is_floating_point():
            a, b = a.double(), b.double()
        diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        worst.append((diff, where))
        return torch.equal(a, b) if rtol == 0 else bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=0.0))
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            worst.append((float("inf"), where + f" (keys differ: {sorted(map(str, a.keys() ^ b.keys()))[:5]})"))
            return False
        return all([walk(a[k], b[k], f"{where}.{k}" if where else str(k), rtol, worst) for k in a])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            worst.append((float("inf"), where + f" (lengths {len(a)} vs {len(b)})"))
            return False
        return all([walk(x, y, f"{where}[{i}]", rtol, worst) for i, (x, y) in enumerate(zip(a, b))])
    if isinstance(a, float) and isinstance(b, float):
        worst.append((abs(a - b), where))
        return a == b if rtol == 0 else abs(a - b) <= rtol * abs(b)
    same = a == b
    if not same:
        worst.append((float("inf"), where + f" ({a!r} vs {b!r})"))
    return bool(same)

rtol, first, second = float(sys.argv[1]), sys.argv[2], sys.argv[3]
for path in sys.argv[4:]:
    try:
        a = torch.load(first + "/" + path, map_location="cpu", weights_only=False)
        b = torch.load(second + "/" + path, map_location="cpu", weights_only=False)
    except Exception:
        print(json.dumps({"path": path, "loadable": False}))
        continue
    worst = []
    equal = walk(a, b, "", rtol, worst)
    largest = max(worst, default=(0.0, ""))
    print(json.dumps({"path": path, "loadable": True, "equal": equal,
                      "max_difference": largest[0] if largest[0] != float("inf") else None, "where": largest[1]}))
"""


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
            comparisons[path] = FileComparison(path, "tensors", row["equal"], row["max_difference"], row["where"])
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
        raise EngineError(f"cannot compare the runs' files in a container of {image}: {describe(exc)}") from None
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

"""ddp-compose's launcher: run torchrun jobs across simulated nodes (Docker Compose).

Library API: describe the job with a :class:`RunRequest` (the options of ``run``, as
keywords), run it with :class:`Run` (or :func:`run`), and read the :class:`RunResult`. The
plan alone is :func:`make_plan` of a :class:`RunConfig`. The CLI (``python -m orchestrate``)
is a thin layer over these. This package never imports torch, and importing it imports
nothing: the workers' import (``orchestrate.progress``) stays as light as the standard library.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RunRequest": "orchestrate.config.request",
    "Run": "orchestrate.launch.run",
    "run": "orchestrate.launch.run",
    "RunResult": "orchestrate.outcome.model",
    "RunConfig": "orchestrate.config.run_config",
    "JobPlan": "orchestrate.plan.model",
    "NodePlan": "orchestrate.plan.model",
    "make_plan": "orchestrate.plan.make",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'orchestrate' has no attribute {name!r}")

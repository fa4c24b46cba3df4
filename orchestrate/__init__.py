"""ddp-compose's launcher: run torchrun jobs across simulated nodes (Docker Compose).

Library API: build a :class:`RunConfig`, plan it with :func:`make_plan`, carry it out with
:func:`launch`. The CLI (``python -m orchestrate``) is a thin layer over these. This
package never imports torch, and importing it imports nothing: the workers' import
(``orchestrate.progress``) stays as light as the standard library.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RunConfig": "orchestrate.config.run_config",
    "JobPlan": "orchestrate.plan.model",
    "NodePlan": "orchestrate.plan.model",
    "make_plan": "orchestrate.plan.make",
    "launch": "orchestrate.launch.run",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'orchestrate' has no attribute {name!r}")

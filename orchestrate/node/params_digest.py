"""A digest of an optimizer's parameters after a step, for ``chaos --compare-steps`` on scripts
that report no metrics of their own (standard library only: torch is reached through the
parameters' own methods).

The step counter (:mod:`orchestrate.node.step_counter`) adds it to each step it reports as the
metric ``params`` when the run sets :data:`STEP_DIGEST_ENV`. Two runs of the same job that
computed the same weights by a step give the same digest at it; a resume that restores the
weights but not the optimizer's state (Adam's moments), the random state or the data order
gives another at the first step after it, long before the final weights tell (if they ever do).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

# Set in every node of a run that compares its steps (chaos --compare-steps): the digest is taken
STEP_DIGEST_ENV = "DDP_COMPOSE_STEP_DIGEST"
DIGEST_METRIC = "params"


def digest_wanted() -> bool:
    return os.environ.get(STEP_DIGEST_ENV) == "1"


def params_digest(optimizer: Any) -> Optional[float]:
    """The sum of every parameter the optimizer steps, in float64 (one value read back per
    device, not one per parameter); None where it cannot be taken."""
    torch = sys.modules.get("torch")  # (imported by the script that steps an optimizer)
    if torch is None:
        return None
    try:
        by_device: dict = {}
        for group in getattr(optimizer, "param_groups", None) or []:
            for param in group.get("params", []):
                total = param.detach().sum(dtype=torch.float64)  # (no float64 copy of the parameter)
                device = str(total.device)
                by_device[device] = total if device not in by_device else by_device[device] + total
        if not by_device:
            return None
        return float(sum(float(total.item()) for _, total in sorted(by_device.items())))
    except (AttributeError, TypeError, RuntimeError, ValueError):
        return None  # a parameter of a kind without these methods: no digest, the step still counts

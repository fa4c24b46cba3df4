"""Which torch the node image and the host venv carry, and the torchvision that goes with it.

The pin is a measured decision, not a default taken on trust: ``benchmarks/exit_soundness.py``
runs a plain DDP script (DDP, ``all_gather_object``, ``destroy_process_group``, return) 100+
times per version through the launcher and under ``torchrun --standalone``. Every release tried,
2.9 to 2.15, aborts some workers at interpreter exit on the gloo backend (SIGABRT, "terminate
called without an active exception"); 2.9.1 aborted least (at most 2 in 100 runs in every series,
0 in 100 with the image's exit guard). See docs/exit-soundness.md.
"""
from __future__ import annotations

import re

from orchestrate.errors import UsageError

DEFAULT_TORCH = "2.9.1"

# What installs torch into the host venv (scripts/setup.sh) and into the offline image: uv, the
# same wheels as pip in under half the time (torch and torchvision into the offline base: 21 s
# against pip's 53; into .venv: 19 s against 73). Pinned to the release both were rehearsed with.
# An official base keeps pip: uv does not see a base's own torch through --system-site-packages.
UV_VERSION = "0.13.9"

_VERSION = re.compile(r"^2\.(?P<minor>\d+)\.(?P<patch>\d+)$")


def torchvision_for(torch_version: str) -> str:
    """The torchvision release built against ``torch_version``.

    torchvision 0.(m+15).p pairs with torch 2.m.p (2.9.1 -> 0.24.1, 2.14.1 -> 0.29.1); its
    wheels pin that torch exactly, so pip refuses a wrong pair rather than mixing them.

    Raises:
        UsageError: For a version that is not ``2.MINOR.PATCH`` from 2.0 on.
    """
    match = _VERSION.match(torch_version.strip())
    if not match:
        raise UsageError(
            f"--torch must be a torch release like {DEFAULT_TORCH} (2.MINOR.PATCH), got {torch_version!r}"
        )
    return f"0.{int(match['minor']) + 15}.{match['patch']}"

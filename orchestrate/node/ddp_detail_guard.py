"""DDP on gloo under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, kept from crashing.

Under DETAIL, torch wraps every gloo and nccl process group's backend in its collective
checker (``ProcessGroupWrapper``), which is what ``--debug-collectives`` is for. But DDP's
constructor ends with a log of its settings (``Logger.set_construction_data_and_log``), and
for a group whose backend is named gloo that log takes the group's backend to be gloo's own
to read its thread count: the checker is not, and the worker dies of SIGSEGV before its first
step. Measured with torch 2.9.1 (the image's) and 2.14.1: every DDP script on CPU nodes, so
``--debug-collectives`` could check no DDP job at all, the jobs it is most needed for.

The guard skips that one call, for a DDP whose group would crash it and only then. It fills
DDP's logging data (``DistributedDataParallel._get_ddp_logging_data()``: the module's name,
bucket sizes, the environment) and logs them at the C++ INFO level; the collective checks and
DDP's own work are untouched. A worker that skips it says so once, on rank 0.

Installed by the workers' start-up hook where the run asks for DETAIL (:func:`wanted`), when
the script's ``import torch`` brings DDP's module in. Standard library only until then.
"""
from __future__ import annotations

import contextvars
import os
import sys
from typing import Any, Mapping

DEBUG_ENV = "TORCH_DISTRIBUTED_DEBUG"
SAID = ("[ddp-compose] TORCH_DISTRIBUTED_DEBUG=DETAIL: DDP's settings log is skipped on gloo, where"
        " torch's logger crashes the worker (docs/debugging.md#--debug-collectives)")

# the process group of the DDP being built, from its _ddp_init_helper; None outside one
_building: contextvars.ContextVar[Any] = contextvars.ContextVar("ddp_group_being_built", default=None)
_said = False


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether a worker with this environment runs torch's DETAIL debug level."""
    return environ.get(DEBUG_ENV, "").strip().upper() == "DETAIL"


def would_crash(group: Any) -> bool:
    """Whether DDP's settings log would crash on ``group``: torch's debug level is DETAIL and the
    group's backend is named gloo (the name the log goes by)."""
    import torch.distributed as dist

    return group is not None and dist.get_debug_level() == dist.DebugLevel.DETAIL and group.name() == "gloo"


def say_once() -> None:
    global _said
    if not _said and os.environ.get("RANK", "0") == "0":
        print(SAID, file=sys.stderr, flush=True)
    _said = True


def install() -> None:
    """Give ``torch.distributed`` a DDP logger that skips its settings log where that would crash,
    and let DDP's construction tell it the group. A torch without the two (they are private to
    DDP) is left as it is."""
    import importlib

    import torch.distributed as dist

    # by module name: the hook runs as DDP's module is made, before torch.nn.parallel names it
    ddp = importlib.import_module("torch.nn.parallel.distributed").DistributedDataParallel
    original_logger, original_init = getattr(dist, "Logger", None), getattr(ddp, "_ddp_init_helper", None)
    if original_logger is None or original_init is None or getattr(original_init, "guarded", False):
        return

    class GuardedLogger(original_logger):  # type: ignore[misc, valid-type]
        def set_construction_data_and_log(self, *args: Any, **kwargs: Any) -> Any:
            if would_crash(_building.get()):
                say_once()
                return None
            return super().set_construction_data_and_log(*args, **kwargs)

    def init_helper(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _building.set(getattr(self, "process_group", None))
        try:
            return original_init(self, *args, **kwargs)
        finally:
            _building.reset(token)

    init_helper.guarded = True  # type: ignore[attr-defined]
    dist.Logger = GuardedLogger
    ddp._ddp_init_helper = init_helper

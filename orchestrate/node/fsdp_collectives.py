"""FSDP's collectives, named in the collective record for what they move.

FSDP (``fully_shard``, and ``FullyShardedDataParallel`` before it) calls the Python collectives
that :mod:`orchestrate.node.collective_log` wraps, so they are recorded at the user's line
already; but as ``all_gather_into_tensor(float32[2112], float32[1056])``, flat buffers a user
never made. A rank that waits in one of them from ``validate()`` is clearer as
``all_gather_into_tensor(parameters of FSDP(Linear): ...)``: the forward pass of an FSDP module gathers
its parameters from every rank, so it is a collective every rank must make (the hang diagnosis
says so where only some ranks make it, as for DDP's buffers: :mod:`orchestrate.hangs.diagnosis`).

Named where the call comes from FSDP's own functions that move them:

- a collective inside FSDP's gathering of a module's parameters (FSDP2's ``foreach_all_gather``,
  FSDP1's ``_all_gather_flat_param``) is ``parameters of FSDP(M)``: a forward pass, or a backward
  pass gathering them again;
- one inside its reduction of the gradients (``foreach_reduce``, ``_reduce_grad``) is
  ``gradients of FSDP(M)``: the reduce-scatter, and HSDP's all-reduce across the replicas;

and the record keeps the tensors after the name (``parameters of FSDP(Linear): float32[144],
float32[72]``), so two ranks that gather different modules still differ.

``M`` is the class of the module whose parameters they are (FSDP2's parameter group's first
module, ``Linear`` of the ``FSDPLinear`` that ``fully_shard`` makes of it; FSDP1's wrapped
module), or plain ``FSDP`` where it is not found. Other collectives FSDP makes (its
construction's broadcasts, its optimizer state's gathers, ``clip_grad_norm_``'s all-reduce) keep
their tensors' description.

Installed by the workers' start-up hook when FSDP's package is imported. Standard library only.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from orchestrate.node.collective_log import CollectiveLog, torch_frames

PARAMETERS = "parameters of FSDP"  # what the entry of FSDP's gathering of parameters says it moves
GRADIENTS = "gradients of FSDP"  # a reduction of its gradients' entry
# FSDP's functions that gather a module's parameters (FSDP2's, FSDP1's), and that reduce its
# gradients (a reduce-scatter; HSDP's all-reduce across the replicas, FSDP1's NO_SHARD's)
GATHERING = ("foreach_all_gather", "_all_gather_flat_param")
REDUCING = ("foreach_reduce", "_reduce_grad", "_reduce_grad_no_shard")
FSDP_FILES = os.sep + os.path.join("torch", "distributed", "fsdp") + os.sep
# How far up the stack FSDP's frames are looked for: the collective's caller is at most a few
# frames of torch's own below them.
DEPTH = 24


def describe(op: str, frame: Any) -> Optional[str]:
    """``parameters of FSDP(Linear)`` for a collective FSDP makes gathering a module's parameters
    (``frame``: the collective's caller), ``gradients of FSDP(Linear)`` for one reducing its
    gradients; None for any other call (the user's own, or one FSDP makes for another purpose:
    its optimizer state's, its construction's)."""
    what, model = None, ""
    for torch_frame in torch_frames(frame, DEPTH):  # FSDP, if anywhere, is below the user's frame
        if FSDP_FILES not in torch_frame.f_code.co_filename:
            continue
        name = torch_frame.f_code.co_name
        if what is None:
            what = PARAMETERS if name in GATHERING else GRADIENTS if name in REDUCING else None
        model = model or module_name(torch_frame.f_locals.get("self"))
    if what is None:
        return None
    return f"{what}({model})" if model else what


def module_name(owner: Any) -> str:
    """The class of the module whose parameters ``owner`` (an FSDP frame's ``self``) handles:
    FSDP2's parameter group (``modules``), FSDP1's handle (``_fully_sharded_module``) or FSDP1's
    wrapper (``_fsdp_wrapped_module``); "" for anything else."""
    if owner is None:
        return ""
    try:
        modules = getattr(owner, "modules", None)
        if isinstance(modules, (tuple, list)) and modules:
            return class_name(modules[0])
        for attribute in ("_fully_sharded_module", "_fsdp_wrapped_module"):
            inner = getattr(owner, attribute, None)
            if inner is not None:
                return class_name(inner)
    except Exception:  # an object whose attributes raise: named by nothing
        return ""
    return ""


def class_name(module: Any) -> str:
    """A module's class as its user wrote it: ``fully_shard`` makes each module an instance of a
    class of its own, ``FSDPLinear`` for a ``Linear``, which is named ``Linear``."""
    cls = type(module)
    name = cls.__name__
    if name.startswith("FSDP") and any(base.__name__ == name[4:] for base in cls.__mro__[1:]):
        return name[4:]
    return name


def install(log: CollectiveLog) -> None:
    """Have the record name FSDP's all-gathers and reduce-scatters (see the module's text)."""
    log.add_describer(describe)

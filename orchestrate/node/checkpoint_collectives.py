"""The collectives of ``torch.distributed.checkpoint`` (DCP), named in the collective record.

DCP's ``save`` and ``load`` are collectives: the ranks agree on a plan (``gather_object``,
``scatter_object_list``), each writes or reads its own part, and they agree on the result. They
call the Python collectives :mod:`orchestrate.node.collective_log` wraps, so they are recorded
at the user's line already, but as ``gather_object()``, which says nothing of a save. A rank
that saves alone (``if rank == 0: dcp.save(...)``, the habit ``torch.save`` taught) waits there
for the others; ``gather_object(in dcp.save)`` says where, and the hang diagnosis says that
every rank must call it (:mod:`orchestrate.hangs.diagnosis`).

Named ``in dcp.F`` where the call comes from inside one of DCP's entry points ``F`` (``save``,
``async_save``, ``load``, and the older ``save_state_dict``, ``load_state_dict``): the outermost,
which is the one the user called. Collectives of DCP's other helpers (``get_state_dict``, whose
gathers an FSDP model names as its parameters) keep their own description.

Installed by the workers' start-up hook when DCP's package is imported. Standard library only.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from orchestrate.node.collective_log import CollectiveLog, torch_frames

IN_DCP = "in dcp."  # how the record's entries of DCP's collectives start
ENTRY_POINTS = ("save", "async_save", "load", "save_state_dict", "load_state_dict")
DCP_FILES = os.sep + os.path.join("torch", "distributed", "checkpoint") + os.sep
# How far up the stack DCP's entry point is looked for: a save's planning and writing nest deeper
# than FSDP's collectives do.
DEPTH = 40


def describe(op: str, frame: Any) -> Optional[str]:
    """``in dcp.save`` for a collective made inside DCP's ``save`` (``frame``: the collective's
    caller), and so on for its other entry points; None for any other call."""
    entry = ""
    for torch_frame in torch_frames(frame, DEPTH):  # DCP, if anywhere, is below the user's frame
        if DCP_FILES in torch_frame.f_code.co_filename and torch_frame.f_code.co_name in ENTRY_POINTS:
            entry = torch_frame.f_code.co_name  # the outermost is the one the user called
    return f"{IN_DCP}{entry}" if entry else None


def install(log: CollectiveLog) -> None:
    """Have the record name DCP's collectives (see the module's text)."""
    log.add_describer(describe)

"""The checkpoint directories a worker saves and loads with ``torch.distributed.checkpoint`` (DCP).

DCP's ``save`` (``async_save``, the older ``save_state_dict``) writes a checkpoint into a
directory, each rank its own files and one of them its ``.metadata``; its ``load`` (the older
``load_state_dict``) reads one back. Each is said on the progress channel by that directory (the
call's ``checkpoint_id``, or else the path of the storage writer or reader it was given), relative
to the work directory where it is in it: a save as a checkpoint by its kind, as ``torch.save``'s
file is (:func:`orchestrate.node.progress.report_dcp_saved`), a load as ``torch.load``'s file is
(:func:`orchestrate.node.progress.report_loaded`), so that the chaos check knows whether the
attempt after a fault read back what the job had saved. The ``torch.save`` and ``torch.load`` DCP
makes of each tensor inside its files are its own, not the script's
(:func:`orchestrate.node.shared_writes.called_by_dcp`).

A call is said once it returned (an ``async_save`` once its thread's ``save`` has written: its
thread-based executor calls the module's ``save``); what it returns and raises are DCP's own, and
a report that fails is left unsaid. Installed by the workers' start-up
hook when DCP's package is imported. Standard library only.
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Callable, Optional, Tuple

from orchestrate.node.shared_writes import SHARED_DIRS, loaded_path

# DCP's entry points (in its module) and the keyword of the storage each takes, second where positional.
# (``async_save`` is not among them: it returns once started, and its thread then calls the module's
# ``save``, said once written; said at its start, a fault during the write would date a save never made.)
SAVES = (("state_dict_saver", "save", "storage_writer"), ("state_dict_saver", "save_state_dict", "storage_writer"))
LOADS = (("state_dict_loader", "load", "storage_reader"), ("state_dict_loader", "load_state_dict", "storage_reader"))


def checkpoint_dir(checkpoint_id: Any, storage: Any, shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Optional[str]:
    """The directory a DCP save or load names: its ``checkpoint_id``, else its storage's path (a
    ``FileSystemWriter``'s or ``FileSystemReader``'s), named as a file ``torch.load`` read is
    (:func:`orchestrate.node.shared_writes.loaded_path`); a URL (fsspec's ``s3://...``) as given;
    None where neither is known."""
    target = checkpoint_id if checkpoint_id is not None else getattr(storage, "path", None)
    if not isinstance(target, (str, bytes, os.PathLike)):
        return None
    text = os.fsdecode(target)
    return text if "://" in text else loaded_path(text, shared_dirs)


def watching(original: Callable[..., Any], report: Callable[[str], None], storage_key: str,
             shared_dirs: Tuple[str, ...] = SHARED_DIRS) -> Callable[..., Any]:
    """DCP's ``original`` entry point, which reports the directory it saved or loaded once it returned.
    An entry point DCP deprecated (``load_state_dict``) warns at the script's line, as it did: not at
    this frame's."""
    deprecation = getattr(original, "__deprecated__", None)
    undeprecated = getattr(original, "__wrapped__", None)
    warns = isinstance(deprecation, str) and callable(undeprecated)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if warns:
            warnings.warn(deprecation, FutureWarning, stacklevel=2)
        result = (undeprecated if warns else original)(*args, **kwargs)
        try:
            storage = kwargs.get(storage_key, args[1] if len(args) > 1 else None)
            directory = checkpoint_dir(kwargs.get("checkpoint_id"), storage, shared_dirs)
            if directory is not None:
                report(directory)
        except Exception:  # the record is a help: never let it fail the script's save or load
            pass
        return result

    return call


def install(report_saved: Callable[[str], None], report_loaded: Callable[[str], None]) -> None:
    """Say each directory DCP saves (``report_saved``) and loads (``report_loaded``), however the
    script reaches its entry points (``dcp.save``, ``from torch.distributed.checkpoint import load``)."""
    import importlib

    import torch.distributed.checkpoint as dcp

    for entries, report in ((SAVES, report_saved), (LOADS, report_loaded)):
        for module_name, name, storage_key in entries:
            module = importlib.import_module(f"torch.distributed.checkpoint.{module_name}")
            original = getattr(module, name, None)
            if original is None:  # (an entry point this torch has not, or no longer has)
                continue
            wrapped = watching(original, report, storage_key)
            setattr(module, name, wrapped)
            if getattr(dcp, name, None) is original:
                setattr(dcp, name, wrapped)

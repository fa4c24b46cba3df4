"""A run's progress records: the steps its workers reported, read from its directory
(``progress/rank<R>.jsonl``, written by :mod:`orchestrate.node.progress`)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class ProgressRecord:
    """One line of the channel: ``attempt`` is the worker process's token (an elastic job's
    restarted ranks are new processes), ``counted`` a step the start-up hook counted from the
    optimizer (the script reported none of its own); ``finished``: the worker's script returned
    (or exited 0), ``after_step`` the highest step it had reported; ``wrote``: a file in a
    shared directory the worker wrote whole (relative to the work directory), ``torch_save``: by
    ``torch.save``; ``loaded``: a file the worker loaded with ``torch.load`` (relative to the work
    directory where it is in it; "" a stream with no path; None: no load), ``loaded_by_dcp``: the
    checkpoint directory it loaded with ``torch.distributed.checkpoint`` (DCP); ``dcp_saved``: a
    checkpoint directory it saved with DCP (named as ``loaded``; "" none); ``wrote_locally``: a
    file on its node's own disk the worker wrote (absolute); ``same_shuffle``: the line where the
    worker iterated a shuffling DistributedSampler again with the same epoch (``shuffle_epoch``);
    ``init_call``: how the worker's script called ``init_process_group``, beside what torchrun
    gave it (as :class:`orchestrate.hangs.snapshots.InitCall` reads it), once it made its group;
    ``init_asked``: the same, as the script made the call. ``node``: the node its process ran on;
    ``began``: when its process began (Unix seconds; None from a worker that did not say);
    ``debugger``: what the worker said of its debugger (``{"state": "waits", "call": ..., "file":
    ..., "line": ..., "function": ...}``, ``attached``, ``left``; see
    :mod:`orchestrate.debugger.states`). ``collectives``: with ``finished``, what the worker made
    in each process group by its end (see :func:`orchestrate.node.collective_log.at_end`)."""

    rank: int
    time: float
    step: Optional[int] = None
    resumed: Optional[int] = None
    metrics: dict[str, float] = field(default_factory=dict)
    attempt: str = ""
    counted: bool = False
    finished: bool = False
    after_step: Optional[int] = None
    wrote: str = ""
    torch_save: bool = False
    loaded: Optional[str] = None
    loaded_by_dcp: bool = False
    dcp_saved: str = ""
    wrote_locally: str = ""
    same_shuffle: str = ""
    shuffle_epoch: Optional[int] = None
    init_call: Optional[dict] = None
    init_asked: Optional[dict] = None
    node: str = ""
    began: Optional[float] = None
    debugger: Optional[dict] = None
    collectives: Optional[dict] = None


def parse_record(line: str) -> Optional[ProgressRecord]:
    """Parse one JSON line; None for a torn or foreign line."""
    try:
        data = json.loads(line)
        record = ProgressRecord(int(data.pop("rank")), float(data.pop("time")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if "step" in data:
        record.step = int(data.pop("step"))
    if "resumed" in data:
        record.resumed = int(data.pop("resumed"))
    record.attempt = str(data.pop("attempt", ""))
    record.counted = bool(data.pop("counted", False))
    record.finished = data.pop("finished", False) is True
    wrote = data.pop("wrote", "")
    record.wrote = wrote if isinstance(wrote, str) else ""
    record.torch_save = data.pop("torch_save", False) is True
    if "loaded" in data:
        loaded = data.pop("loaded")
        record.loaded = loaded if isinstance(loaded, str) else ""
        record.loaded_by_dcp = data.pop("dcp", False) is True
    dcp_saved = data.pop("dcp_saved", "")
    record.dcp_saved = dcp_saved if isinstance(dcp_saved, str) else ""
    locally = data.pop("wrote_locally", "")
    record.wrote_locally = locally if isinstance(locally, str) else ""
    same = data.pop("same_shuffle", "")
    record.same_shuffle = same if isinstance(same, str) else ""
    epoch = data.pop("shuffle_epoch", None)
    record.shuffle_epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
    init_call = data.pop("init_call", None)
    record.init_call = init_call if isinstance(init_call, dict) else None
    init_asked = data.pop("init_asked", None)
    record.init_asked = init_asked if isinstance(init_asked, dict) else None
    debugger = data.pop("debugger", None)
    record.debugger = debugger if isinstance(debugger, dict) else None
    collectives = data.pop("collectives", None)
    record.collectives = collectives if isinstance(collectives, dict) else None
    node = data.pop("node", "")
    record.node = node if isinstance(node, str) else ""
    began = data.pop("began", None)
    record.began = float(began) if isinstance(began, (int, float)) and not isinstance(began, bool) else None
    after = data.pop("after_step", None)
    record.after_step = after if isinstance(after, int) and not isinstance(after, bool) else None
    record.metrics = {k: v for k, v in data.items() if isinstance(v, (int, float))}
    return record


def read_all(directory: Path) -> list[ProgressRecord]:
    """Every record of a run's progress directory, each rank's in the order written."""
    return ProgressReader(directory).poll()


class ProgressReader:
    """Reads the new lines of every rank's file since the last call (the launcher polls it)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}

    def poll(self) -> list[ProgressRecord]:
        records: list[ProgressRecord] = []
        for path in sorted(self.directory.glob("rank*.jsonl")):
            try:
                with open(path, encoding="utf-8") as handle:
                    handle.seek(self.offsets.get(path, 0))
                    chunk = handle.read()
                    self.offsets[path] = handle.tell()
            except OSError:
                continue
            text = self.partial.pop(path, "") + chunk
            *lines, rest = text.split("\n")
            if rest:
                self.partial[path] = rest
            records += [r for r in map(parse_record, lines) if r is not None]
        return records

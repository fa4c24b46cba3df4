"""A ``DistributedSampler`` that shuffles every epoch the same way: ``sampler.set_epoch(epoch)``
forgotten.

A shuffling ``DistributedSampler`` draws its order from its seed and its epoch, and its epoch
stays 0 until the script sets it, so every epoch reads the data in the first epoch's order (as
torch's documentation warns). Nothing fails: the model only learns less well. The workers'
start-up hook wraps ``DistributedSampler.__iter__``; a shuffling sampler iterated again from the
line it was iterated from before, with the same seed and epoch (the same sampler, or a new one
each epoch), is reported once per line on the progress channel
(:func:`orchestrate.node.progress.report_same_shuffle`), and the launcher warns of it.

Installed when the script imports ``torch.utils.data.distributed``; standard library only until
then.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from orchestrate.node.collective_log import caller


def watching_iter(original: Callable[[Any], Any], report: Callable[[str, int], None],
                  where: Callable[[], str] = lambda: caller(sys._getframe(2))) -> Callable[[Any], Any]:
    """``DistributedSampler.__iter__`` that reports ``report(line, epoch)`` where a shuffling
    sampler is iterated again from ``line`` (the script's, by ``where``) with a seed and an
    epoch it was iterated with there before; once per line."""
    iterated: set[tuple[str, int, int]] = set()
    reported: set[str] = set()

    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        if getattr(self, "shuffle", False):
            line, epoch = where(), int(getattr(self, "epoch", 0))
            key = (line, int(getattr(self, "seed", 0)), epoch)
            if key in iterated and line not in reported:
                reported.add(line)
                report(line, epoch)
            iterated.add(key)
        return original(self)

    return __iter__


def install(report: Callable[[str, int], None]) -> None:
    """Wrap ``DistributedSampler.__iter__`` (the module has just been imported)."""
    from torch.utils.data.distributed import DistributedSampler

    DistributedSampler.__iter__ = watching_iter(DistributedSampler.__iter__, report)  # type: ignore[method-assign]

"""Why ranks wait in ``init_process_group`` (pure): their scripts' calls against what torchrun
gave them. A script written for one machine names its store itself (``MASTER_ADDR=localhost``),
a file store only one node sees, a world size of its own, or ``LOCAL_RANK`` as its rank; torch
then waits, for 30 minutes by default, for a store or for ranks that never come."""
from __future__ import annotations

from typing import Callable, Optional

from orchestrate.hangs.snapshots import InitCall
from orchestrate.node.shared_writes import SHARED_DIRS, under
from orchestrate.plan.layout import WORKSPACE_DIR
from orchestrate.text import ranks_text

UNDER_TORCHRUN = "under torchrun leave init_method, rank and world_size out: env:// reads what torchrun sets"
# What to do instead of a store of the script's own: an address, or a file.
TORCHRUNS_STORE = "under torchrun leave init_method out, and MASTER_ADDR and MASTER_PORT as torchrun sets them"
SHARED_FILE_STORE = f"under torchrun leave init_method out (env://), or name a file under {WORKSPACE_DIR}"
# How long torch waits for a store, or for the ranks in it, where the script gives no timeout.
TORCH_WAITS = "30 minutes by default"


# Why a wrong call matters, said once the run has ended: ranks that ask for another world size
# make a job of their own (a world of one trains alone; a rank past the size asked for fails), and
# a run of such ranks can exit 0 without being the job torchrun started.
APART = "so the ranks did not form the one job torchrun started"


def init_hints(calls: dict[int, InitCall], nodes: dict[int, str]) -> list[str]:
    """What is wrong with the ``init_process_group`` calls of the ranks that wait in it (their
    ``calls``, on their ``nodes``): each store, world size or rank that is not torchrun's, worst
    first, with why they wait; none where every call asks for what torchrun gave."""
    hints = [(store_facts(calls), f": they wait for a store that is not the job's; {TORCHRUNS_STORE}"),
             (node_local_file_facts(calls, nodes),
              f", so each node's ranks wait there for the others; {SHARED_FILE_STORE}"),
             (world_size_facts(calls), f": they wait for ranks that never come; {UNDER_TORCHRUN}"),
             (rank_facts(calls), ": ranks that take the same rank wait for one that never comes; rank is RANK, the"
                                 " rank across all nodes (LOCAL_RANK is the rank within a node, to pick its GPU);"
                                 f" {UNDER_TORCHRUN}")]
    return [facts + why for facts, why in hints if facts]


# Host names every node resolves to itself: a store there is each node's own.
LOOPBACK_HOSTS = ("localhost", "::1", "[::1]", "0.0.0.0")


def is_loopback_store(store: str) -> bool:
    """Whether a ``host:port`` store is on each rank's own node (localhost, 127.x.x.x, ::1); not
    one without a port, which torch refuses at once."""
    host, _, port = store.rpartition(":")
    return port.isdigit() and (host.lower() in LOOPBACK_HOSTS or host.startswith("127."))


def certain_init_waits(calls: dict[int, InitCall], nodes: dict[int, str]) -> list[str]:
    """The ``init_process_group`` calls that can only wait until torch's timeout (30 minutes by
    default), said as soon as they are made: ranks of two or more nodes (``nodes``: rank -> node)
    that ask for torchrun's whole world, each in a store on its own node (``localhost``, or a
    file only its node has). No other call is taken as certain: a store the script names on a
    node every rank reaches can be where torchrun's is not; a world of each node's own ranks
    makes jobs apart, which do not wait (see :func:`apart_facts`)."""
    whole = {rank: call for rank, call in calls.items() if rank in nodes and asks_for_torchruns_world(call)}
    own = {rank: call for rank, call in whole.items() if call.via in ("env", "tcp") and is_loopback_store(call.store)}
    found = []
    for (store, via), ranks in by_value(own, lambda c: (c.store, c.via)).items():
        if len({nodes[rank] for rank in ranks}) < 2:
            continue
        found.append(f"{ranks_text(ranks)} called init_process_group for a store at {store},"
                     f" {store_named(store, via)}: each node's ranks look for it on their own node and never meet"
                     f" the others' ranks, so they wait in init_process_group until it times out ({TORCH_WAITS});"
                     f" {TORCHRUNS_STORE}")
    files = node_local_file_facts(whole, nodes)
    if files:
        found.append(f"{files}, so each node's ranks wait there for the others until init_process_group times out"
                     f" ({TORCH_WAITS}); {SHARED_FILE_STORE}")
    return found


def apart_facts(calls: dict[int, InitCall]) -> str:
    """For a run that has ended, from the groups the ranks' ``init_process_group`` ``calls`` made:
    the world sizes that are not torchrun's, then the ranks that asked for the same rank within
    torchrun's world, in one line; "" where none. Other stores and other rank numbers are no such
    fact: a group made through another name of torchrun's store, or with the ranks numbered in
    another order, is still the one job."""
    sized = {rank: call for rank, call in calls.items() if known_and_other(call.world_size, call.torchrun_world_size)}
    others = {rank: call for rank, call in calls.items() if rank not in sized}
    return "; ".join(fact for fact in (world_size_facts(calls), same_rank_facts(others)) if fact)


def same_rank_facts(calls: dict[int, InitCall]) -> str:
    """The ranks that asked for the same rank as another ("" for none)."""
    parts = []
    for wanted, ranks in by_value({r: c for r, c in calls.items() if c.rank is not None}, lambda c: c.rank).items():
        if len(ranks) > 1:
            local = " (their LOCAL_RANK)" if wanted and all(calls[r].torchrun_local_rank == wanted for r in ranks) else ""
            parts.append(f"{ranks_text(ranks)} each called init_process_group with rank={wanted}{local}")
    return "; ".join(parts)


def asks_for_torchruns_world(call: InitCall) -> bool:
    """Whether ``call`` asked for the world size and rank torchrun gave (or did not say)."""
    return not known_and_other(call.world_size, call.torchrun_world_size) and not known_and_other(
        call.rank, call.torchrun_rank)


def apart_warning(facts: str) -> str:
    """The warning for a run whose ranks' calls say ``facts`` (:func:`apart_facts`): why they
    matter, and what to do; "" for none."""
    return f"{facts}: {APART}; {UNDER_TORCHRUN}" if facts else ""


def by_value(calls: dict[int, InitCall], value: Callable[[InitCall], object]) -> dict[object, list[int]]:
    """The ranks of ``calls`` by ``value`` of their call, in rank order."""
    found: dict[object, list[int]] = {}
    for rank in sorted(calls):
        found.setdefault(value(calls[rank]), []).append(rank)
    return found


def store_facts(calls: dict[int, InitCall]) -> str:
    """The ranks whose script names a store address that is not torchrun's ("" for none)."""
    elsewhere = {rank: call for rank, call in calls.items()
                 if call.via in ("env", "tcp") and call.torchrun_store and call.store != call.torchrun_store}
    parts = []
    for (store, via, theirs), ranks in by_value(elsewhere, lambda c: (c.store, c.via, c.torchrun_store)).items():
        parts.append(f"{ranks_text(ranks)} called init_process_group for a store at {store},"
                     f" {store_named(store, via)}, where torchrun's store is at {theirs}")
    return "; ".join(parts)


def store_named(store: str, via: str) -> str:
    """How the script named a store's address: by the environment it set, or ``init_method``."""
    return ("from the MASTER_ADDR and MASTER_PORT the script set itself" if via == "env"
            else f"named by init_method='tcp://{store}'")


def node_local_file_facts(calls: dict[int, InitCall], nodes: dict[int, str]) -> str:
    """The ranks that meet in a file store that each of their nodes has its own of ("" for none)."""
    in_files = {rank: call for rank, call in calls.items()
                if call.via == "file" and under(call.store, SHARED_DIRS) is None}
    if len({nodes.get(rank, "") for rank in in_files}) < 2:
        return ""  # on one node a file of its own is seen by all of them
    parts = [f"{ranks_text(ranks)} called init_process_group for a file store, {path}"
             for path, ranks in by_value(in_files, lambda c: c.store).items()]
    return "; ".join(parts) + (f", which each node has its own of (only {' and '.join(SHARED_DIRS)} are shared by"
                               " every node)")


def world_size_facts(calls: dict[int, InitCall]) -> str:
    """The ranks that ask for a world size that is not the number of workers torchrun started."""
    wrong = {rank: call for rank, call in calls.items() if known_and_other(call.world_size, call.torchrun_world_size)}
    return "; ".join(f"{ranks_text(ranks)} called init_process_group with world_size={size}, but torchrun started"
                     f" {started} workers (WORLD_SIZE={started})"
                     for (size, started), ranks in by_value(wrong, lambda c: (c.world_size, c.torchrun_world_size)).items())


def rank_facts(calls: dict[int, InitCall]) -> str:
    """The ranks that ask for a rank that is not the one torchrun gave them (LOCAL_RANK, often)."""
    wrong = {rank: call for rank, call in calls.items() if known_and_other(call.rank, call.torchrun_rank)}
    parts = []
    for rank, call in sorted(wrong.items()):
        local = ", its LOCAL_RANK," if call.rank == call.torchrun_local_rank else ""
        parts.append(f"rank {rank} called init_process_group with rank={call.rank}{local} where torchrun gave it"
                     f" RANK={call.torchrun_rank}")
    return "; ".join(parts)


def known_and_other(asked: Optional[int], given: Optional[int]) -> bool:
    return asked is not None and given is not None and asked != given

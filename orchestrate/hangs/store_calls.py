"""Why ranks wait in their script's own store calls (pure): a ``get`` or ``wait`` for a key no
rank set (a misspelled key), or a ``TCPStore`` the script made on ``localhost`` in a run of more
than one node, which each node's ranks look for on their own node. Read from the ranks' record of
those calls (:mod:`orchestrate.node.store_calls`)."""
from __future__ import annotations

import difflib
from typing import Optional

from orchestrate.hangs.init_calls import LOOPBACK_HOSTS
from orchestrate.hangs.snapshots import RankSnapshot, StoreWait
from orchestrate.text import ranks_text

KEYS_NAMED = 5
# What to do instead of a TCPStore on each node's own localhost.
A_STORE_EVERY_NODE_REACHES = ("give TCPStore a host every node reaches, os.environ['MASTER_ADDR'] (with a port of its"
                              " own), or use the job's store once init_process_group returned"
                              " (torch.distributed.distributed_c10d._get_default_store())")
KEY_WAITS = ("get", "wait", "multi_get")


def store_hints(snapshots: dict[int, RankSnapshot], expected: set[int]) -> list[str]:
    """The hints for ranks blocked in their script's store calls: a TCPStore on each node's own
    localhost first (which explains the keys its ranks wait for too), else the keys waited for
    that no rank set; none where neither is found."""
    local = local_tcp_store_hints(snapshots)
    return local or missing_key_hints(snapshots, expected)


def is_loopback_host(host: str) -> bool:
    return host.lower() in LOOPBACK_HOSTS or host.startswith("127.")


def local_tcp_store_hints(snapshots: dict[int, RankSnapshot]) -> list[str]:
    """For each ``localhost`` address at which ranks of two or more nodes made a TCPStore, while
    one of them is blocked in a store call: that each node's ranks look for it on their own node."""
    made: dict[tuple[str, int], dict[int, tuple[bool, str]]] = {}
    for rank, snapshot in sorted(snapshots.items()):
        for store in snapshot.store.tcp_stores if snapshot.store is not None else ():
            if is_loopback_host(store.host):
                made.setdefault((store.host, store.port), {})[rank] = (store.is_master, store.at)
    hints = []
    for (host, port), ranks in made.items():
        nodes = {rank: snapshots[rank].node for rank in ranks}
        if len(set(nodes.values())) < 2 or not any(snapshots[rank].store.waiting for rank in ranks):  # type: ignore[union-attr]
            continue
        masters = sorted(rank for rank, (is_master, _) in ranks.items() if is_master)
        served = {nodes[rank] for rank in masters}
        unserved = sorted(rank for rank in ranks if nodes[rank] not in served)
        lines = sorted({at for _, at in ranks.values()})
        if masters:
            where = (f"its master ({ranks_text(masters)}, is_master=True) serves it on {' and '.join(sorted(served))}"
                     f" alone, so {ranks_text(unserved)} on {' and '.join(sorted({nodes[r] for r in unserved}))}"
                     f" {'never reaches' if len(unserved) == 1 else 'never reach'} it and the master waits for"
                     " workers that never come")
        else:
            where = "and no rank made it as is_master=True"
        hints.append(f"{ranks_text(sorted(ranks))} made a TCPStore at {host}:{port} ({', '.join(lines)}), on each"
                     f" node's own {host}: each node's ranks look for it on their own node; {where};"
                     f" {A_STORE_EVERY_NODE_REACHES}")
    return hints


def blocked_on(snapshot: RankSnapshot) -> Optional[StoreWait]:
    """The key wait a rank is blocked in (its main thread's first), if any."""
    waits = [w for w in snapshot.store.waiting if w.call in KEY_WAITS] if snapshot.store is not None else []
    return waits[0] if waits else None


def missing_key_hints(snapshots: dict[int, RankSnapshot], expected: set[int]) -> list[str]:
    """For the ranks blocked in a ``get`` or ``wait`` for keys no rank set: those keys, where they
    wait, and the keys set that look like them. None where a rank set more keys than it keeps
    (the key may be among those not kept)."""
    if any(s.store is not None and s.store.more_keys for s in snapshots.values()):
        return []
    setters: dict[str, list[int]] = {}
    for rank, snapshot in sorted(snapshots.items()):
        for key in snapshot.store.keys_set if snapshot.store is not None else ():
            setters.setdefault(key, []).append(rank)
    waiting: dict[tuple[tuple[str, ...], str, str], list[int]] = {}
    for rank, snapshot in sorted(snapshots.items()):
        wait = blocked_on(snapshot)
        missing = tuple(key for key in wait.keys if key not in setters) if wait is not None else ()
        if wait is not None and missing:
            waiting.setdefault((missing, wait.call, wait.at), []).append(rank)
    unheard = sorted(expected - set(snapshots))
    nobody = "no rank" if not unheard else f"no rank that answered ({ranks_text(unheard)} did not)"
    hints = []
    for (missing, call, at), ranks in waiting.items():
        keys = " and ".join(f"'{key}'" for key in missing)
        alike = [key for key in setters if key not in missing
                 and any(difflib.get_close_matches(m, [key], n=1, cutoff=0.6) for m in missing)]
        if alike:
            named = f"keys set that look like it: {keys_by_whom(alike, setters)}; check the key's spelling"
        elif setters:
            named = f"keys set: {keys_by_whom(list(setters)[:KEYS_NAMED], setters)}"
        else:
            named = "no rank set any key through its store's set, add or compare_set"
        verb = "waits" if len(ranks) == 1 else "wait"
        hints.append(f"{ranks_text(ranks)} {verb} in store.{call}() at {at} for store key{'s' * (len(missing) > 1)}"
                     f" {keys}, which {nobody} set ({named}): a store's {call} returns only once the key is set")
    return hints


def keys_by_whom(keys: list[str], setters: dict[str, list[int]]) -> str:
    return ", ".join(f"'{key}' by {ranks_text(setters[key])}" for key in keys)

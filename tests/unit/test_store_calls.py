"""Why ranks wait in their script's own store calls: the workers' record of those calls
(orchestrate/node/store_calls.py) and the hints read from it (orchestrate/hangs/store_calls.py).
The recorded snapshots under data/store_hangs/ are the ranks' own, from two runs of 2 nodes x 2
processes: a ``store.wait`` for a misspelled key, and a script's own ``TCPStore("localhost", ...)``."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrate.hangs.diagnosis import diagnose, timeout_diagnosis
from orchestrate.hangs.snapshots import (Frame, Probe, RankSnapshot, StoreCalls, StoreWait, TcpStoreMade,
                                         last_snapshots)
from orchestrate.hangs.store_calls import store_hints
from orchestrate.node.collective_log import relative
from orchestrate.node.snapshot import STORE_FAILED_REASON
from orchestrate.node.store_calls import KEYS_KEPT, StoreRecord, setter, waiter
from orchestrate.outcome.judge import Failure

RECORDED = Path(__file__).parent / "data" / "store_hangs"


def hung(directory: Path) -> list[str]:
    snapshots = last_snapshots(directory)
    probe = Probe("requested", 10.0, snapshots)
    return diagnose(probe, Probe("requested", 0.0, snapshots), set(range(4)), {}, 20.0).lines()


def test_ranks_waiting_for_a_misspelled_key_are_told_the_key_no_rank_set_and_the_key_that_looks_like_it():
    lines = hung(RECORDED / "misspelled_key")
    assert ("  ranks 1-3 wait in store.wait() at store_wait.py:15 for store key 'datasetready', which no rank set"
            " (keys set that look like it: 'dataset_ready' by rank 0; check the key's spelling): a store's wait"
            " returns only once the key is set") in lines


def test_the_rendezvous_keys_torch_sets_are_not_taken_for_the_scripts_own():
    snapshots = last_snapshots(RECORDED / "misspelled_key")
    assert snapshots[0].store is not None and snapshots[0].store.keys_set == ("dataset_ready",)
    assert snapshots[1].store is not None and snapshots[1].store.waiting == (
        StoreWait("wait", ("datasetready",), "store_wait.py:15"),)


def test_ranks_of_two_nodes_that_made_a_tcp_store_on_localhost_are_told_each_node_looks_on_its_own():
    lines = hung(RECORDED / "own_tcp_store")
    hint = next(line for line in lines if "TCPStore at" in line)
    assert hint.startswith("  ranks 0-3 made a TCPStore at localhost:29700 (own_store.py:9), on each node's own"
                           " localhost")
    assert "its master (rank 0, is_master=True) serves it on node0 alone, so ranks 2, 3 on node1 never reach it" in hint
    assert "os.environ['MASTER_ADDR']" in hint
    # rank 1 waits for a key rank 0 never set, as it is stuck in the constructor: the store is the why
    assert not any("which no rank set" in line for line in lines)


def rank(number: int, node: str, store: StoreCalls) -> RankSnapshot:
    return RankSnapshot(number, node, 100 + number, 0.0, 1.0, (Frame("train.py", 9, "main", "store.get(k)"),), (), 0,
                        store=store)


LOCAL = TcpStoreMade("localhost", 29700, False, "train.py:9")
BLOCKED = (StoreWait("TCPStore", (), "train.py:9"),)


def test_a_tcp_store_on_localhost_is_no_fault_on_one_node_nor_where_no_rank_waits_in_a_store_call():
    one_node = {r: rank(r, "node0", StoreCalls(waiting=BLOCKED, tcp_stores=(LOCAL,))) for r in range(2)}
    assert store_hints(one_node, {0, 1}) == []
    not_waiting = {r: rank(r, f"node{r}", StoreCalls(tcp_stores=(LOCAL,))) for r in range(2)}
    assert store_hints(not_waiting, {0, 1}) == []
    elsewhere = TcpStoreMade("node0", 29700, False, "train.py:9")
    named_host = {r: rank(r, f"node{r}", StoreCalls(waiting=BLOCKED, tcp_stores=(elsewhere,))) for r in range(2)}
    assert store_hints(named_host, {0, 1}) == []
    loopback = TcpStoreMade("127.0.0.1", 29700, False, "train.py:9")
    no_master = {r: rank(r, f"node{r}", StoreCalls(waiting=BLOCKED, tcp_stores=(loopback,))) for r in range(2)}
    assert store_hints(no_master, {0, 1}) == [
        "ranks 0, 1 made a TCPStore at 127.0.0.1:29700 (train.py:9), on each node's own 127.0.0.1: each node's ranks"
        " look for it on their own node; and no rank made it as is_master=True; give TCPStore a host every node"
        " reaches, os.environ['MASTER_ADDR'] (with a port of its own), or use the job's store once"
        " init_process_group returned (torch.distributed.distributed_c10d._get_default_store())"]


def test_a_key_is_said_unset_only_where_every_rank_kept_every_key_it_set():
    waits = StoreCalls(waiting=(StoreWait("get", ("epoch_7",), "train.py:20"),))
    set_it = StoreCalls(keys_set=("epoch_6", "epoch_7"))
    assert store_hints({0: rank(0, "node0", set_it), 1: rank(1, "node1", waits)}, {0, 1}) == []
    too_many = StoreCalls(keys_set=("epoch_6",), more_keys=True)
    assert store_hints({0: rank(0, "node0", too_many), 1: rank(1, "node1", waits)}, {0, 1}) == []
    [hint] = store_hints({0: rank(0, "node0", StoreCalls(keys_set=("epoch_6",))), 1: rank(1, "node1", waits)},
                         {0, 1, 2})
    assert hint.startswith("rank 1 waits in store.get() at train.py:20 for store key 'epoch_7', which no rank that"
                           " answered (rank 2 did not) set (keys set that look like it: 'epoch_6' by rank 0;")
    [nothing_set] = store_hints({1: rank(1, "node1", waits)}, {1})
    assert "(no rank set any key through its store's set, add or compare_set)" in nothing_set


def test_the_recorder_keeps_the_scripts_keys_and_its_blocked_wait_but_not_torchs_own_calls():
    class FakeStore:
        """Stands for torch's pybind Store: its methods are what the recorder wraps."""

        def __init__(self) -> None:
            self.data: dict[str, str] = {}

        def set(self, key: str, value: str) -> None:
            self.data[key] = value

        def get(self, key: str) -> str:
            return self.data[key]

    record = StoreRecord()
    FakeStore.set = setter(FakeStore.set, record, "key")  # type: ignore[method-assign]
    seen: list[dict] = []
    original_get = FakeStore.get
    FakeStore.get = waiter(lambda self, key: seen.append(record.snapshot()) or original_get(self, key),  # type: ignore
                           record, "get", "key")
    store = FakeStore()
    store.set("dataset_ready", "1")
    store.set(key="dataset_ready", value="2")
    # torch's own call (its rendezvous, a barrier of its own) is made from a file under torch/
    exec(compile("store.set('default_pg/0//cpu//0', '1')", "/venv/site-packages/torch/distributed/rendezvous.py",
                 "exec"), {"store": store})
    assert store.get("dataset_ready") == "2"
    assert seen[0]["waiting"] == [{"call": "get", "keys": ["dataset_ready"], "at": f"{relative(__file__)}:{line_of_get()}"}]
    assert record.snapshot() == {"keys_set": ["dataset_ready"], "more_keys": False, "waiting": [], "tcp_stores": []}
    with pytest.raises(KeyError):  # the store's own error reaches the script, and the wait is over
        store.get("datasetready")
    assert record.snapshot()["waiting"] == []
    with pytest.raises(TypeError):  # a call torch refuses is refused as torch would, not by the recorder
        store.set()


def line_of_get() -> int:
    source = Path(__file__).read_text().splitlines()
    return next(i for i, text in enumerate(source, 1) if 'assert store.get("dataset_ready") == "2"' in text)


def test_the_recorder_keeps_so_many_keys_and_then_says_there_were_more():
    record = StoreRecord()
    record.set_keys([f"k{i}" for i in range(KEYS_KEPT + 3)])
    snapshot = record.snapshot()
    assert snapshot is not None and len(snapshot["keys_set"]) == KEYS_KEPT and snapshot["more_keys"] is True


def test_torchs_store_classes_take_the_recorders_wrappers():
    """Measured against the real (pybind) classes, in a process of its own: Store's methods and
    TCPStore's constructor can be replaced from Python, and a HashStore's calls are then recorded."""
    pytest.importorskip("torch.distributed")
    code = textwrap.dedent("""
        import threading, time
        import torch.distributed as dist
        from orchestrate.node.store_calls import StoreRecord, install
        record = StoreRecord()
        install(record)
        install(record)  # once only
        store = dist.HashStore()
        store.set("ready", "1")
        store.add("count", 1)
        waiter = threading.Thread(target=lambda: store.wait(["later"]))
        waiter.start()
        deadline = time.monotonic() + 30  # poll for the wait to be recorded, with a deadline
        while not record.snapshot()["waiting"] and time.monotonic() < deadline:
            time.sleep(0.01)
        print(record.snapshot()["waiting"])
        store.set("later", "1")
        waiter.join()
        print(record.snapshot())
        try:
            dist.TCPStore("localhost", 1, 2, False, timeout=__import__("datetime").timedelta(seconds=0.2))
        except Exception as exc:
            print(type(exc).__name__)
        print(record.snapshot()["tcp_stores"], record.snapshot()["waiting"])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[{'call': 'wait', 'keys': ['later'], 'at': '<string>:11'}]"
    assert lines[1] == "{'keys_set': ['ready', 'count', 'later'], 'more_keys': False, 'waiting': [], 'tcp_stores': []}"
    assert lines[-1] == ("[{'host': 'localhost', 'port': 1, 'world_size': 2, 'is_master': False, 'at': '<string>:21'}]"
                         " []")


def test_a_store_get_that_times_out_is_said_only_where_its_error_ends_the_process():
    """A store call that raised is kept cheaply, and said as the call the rank died in only where
    its error (or one raised from it) ends the script: a script that catches its own short
    timeout and polls again is no dying rank (a review found a caught timeout read, ten minutes
    later, as the cause of an unrelated DataLoader timeout, and a full record written per poll)."""
    class TimingOutStore:
        def get(self, key: str) -> str:
            raise RuntimeError(f"wait timeout after 10ms, keys: /{key}")

    record = StoreRecord()
    TimingOutStore.get = waiter(TimingOutStore.get, record, "get", "key")  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="wait timeout") as raised:  # the script's error, as torch raised it
        TimingOutStore().get("kye")
    assert record.snapshot() is None  # the wait is over, and a caught error says nothing
    assert not record.dying_of(RuntimeError("DataLoader timed out after 30 seconds"))  # another error ends it
    assert record.snapshot() is None
    try:  # the script wraps it: raised from it
        raise ValueError("no config key") from raised.value
    except ValueError as wrapped:
        assert record.dying_of(wrapped)
    assert record.snapshot()["waiting"] == [{"call": "get", "keys": ["kye"], "at": record.snapshot()["waiting"][0]["at"]}]


def write_store_failure(directory: Path, rank: int, node: str, keys_set: list[str], waiting: list[dict]) -> None:
    (directory / f"rank{rank}.json").write_text(json.dumps({
        "request": "failed", "reason": STORE_FAILED_REASON, "rank": rank, "node": node, "stacks": [], "collectives": [],
        "store": {"keys_set": keys_set, "more_keys": False, "waiting": waiting, "tcp_stores": []}}))


def test_a_store_get_that_its_own_timeout_ended_is_a_hang_torch_ended_with_the_stores_hint(tmp_path):
    get = {"call": "get", "keys": ["kye"], "at": "s.py:12"}
    write_store_failure(tmp_path, 0, "node0", ["key"], [get])
    write_store_failure(tmp_path, 1, "node1", [], [get])
    failure = Failure("node0", 0, 1, "torch.distributed.DistStoreError: wait timeout after 10000ms, keys: /kye", ())
    found = timeout_diagnosis(failure, tmp_path, {0, 1})
    assert found is not None and found.hung and found.timed_out
    assert found.cause == "the script's store.get() timed out on node0 rank 0 (wait timeout after 10000ms, keys: /kye)"
    assert ("  ranks 0, 1 wait in store.get() at s.py:12 for store key 'kye', which no rank set (keys set that look"
            " like it: 'key' by rank 0; check the key's spelling): a store's get returns only once the key is set"
            ) in found.lines()


def test_a_tcp_store_on_localhost_that_timed_out_is_told_each_node_looks_on_its_own(tmp_path):
    for rank, master in ((0, True), (1, False)):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({
            "request": "failed", "reason": STORE_FAILED_REASON, "rank": rank, "node": f"node{rank}", "stacks": [],
            "collectives": [], "store": {"keys_set": [], "more_keys": False, "tcp_stores": [
                {"host": "localhost", "port": 29700, "world_size": 2, "is_master": master, "at": "s.py:7"}],
                "waiting": [{"call": "TCPStore", "keys": [], "at": "s.py:7"}]}}))
    failure = Failure("node1", 1, 1, "torch.distributed.DistNetworkError: The client socket has timed out after"
                      " 10000ms while trying to connect to (localhost, 29700).", ())
    found = timeout_diagnosis(failure, tmp_path, {0, 1})
    assert found is not None and found.cause.startswith("the script's TCPStore timed out on node1 rank 1 (The client")
    assert any(line.startswith("  ranks 0, 1 made a TCPStore at localhost:29700 (s.py:7), on each node's own localhost")
               for line in found.lines())
    # one rank left out is said in the singular ("ranks 2, 3 ... never reach it" in the recorded 2x2 job)
    assert any("serves it on node0 alone, so rank 1 on node1 never reaches it and the master waits" in line
               for line in found.lines())


def test_a_store_wait_that_timed_out_while_a_rank_computed_is_told_the_stores_own_timeout(tmp_path):
    """The other side of a hang torch ended: rank 1's store.wait timed out while rank 0 still
    computed (tokenizing before it sets the key). The remedy is that store's own timeout, not the
    process group's, which a review found advised (until 2026-12-07)."""
    from orchestrate.hangs.diagnosis import SHORT_TIMEOUT_HINT, STORE_SHORT_TIMEOUT_HINT

    write_store_failure(tmp_path, 1, "node1", [], [{"call": "wait", "keys": ["ready"], "at": "s.py:20"}])
    (tmp_path / "rank0.json").write_text(json.dumps({
        "request": "r1", "reason": "requested", "rank": 0, "node": "node0", "time": 100.0, "cpu_recent": 0.97,
        "stacks": [{"main": True, "frames": [["s.py", 12, "<module>", "tokens = tokenize(corpus)"]]}],
        "collectives": []}))
    failure = Failure("node1", 1, 1, "torch.distributed.DistStoreError: wait timeout after 30000ms, keys: /ready", ())
    found = timeout_diagnosis(failure, tmp_path, {0, 1}, since=50.0)
    assert found is not None and not found.hung and found.store_timed_out
    assert f"  {STORE_SHORT_TIMEOUT_HINT}" in found.lines() and f"  {SHORT_TIMEOUT_HINT}" not in found.lines()


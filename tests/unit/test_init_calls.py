"""Why ranks wait in init_process_group: the workers' record of how their scripts called it
(orchestrate/node/init_record.py), and the hints read from it against what torchrun gave them
(orchestrate/hangs/init_calls.py), live and after torch's timeout ended the wait."""
from __future__ import annotations

import html
import json
from typing import Any, Optional

import pytest

from orchestrate.hangs.diagnosis import diagnose, timeout_diagnosis
from orchestrate.hangs.init_calls import certain_init_waits, init_hints, is_loopback_store
from orchestrate.hangs.snapshots import Frame, InitCall, Probe, RankSnapshot
from orchestrate.node.init_record import asked_for, recording, torchrun_gave
from orchestrate.outcome.judge import Failure

TORCHRUN_ENV = {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
SITE = "/opt/venv/lib/python3.11/site-packages/torch/distributed"


def test_what_torchrun_gave_is_read_from_its_environment():
    assert torchrun_gave(TORCHRUN_ENV) == {"rank": 1, "local_rank": 0, "world_size": 2, "store": "node0:29500"}
    assert torchrun_gave({}) == {"rank": None, "local_rank": None, "world_size": None, "store": ""}


@pytest.mark.parametrize("init_method, rank, world_size, environ, expected", [
    # env:// (the default) reads the environment as the script left it
    (None, -1, -1, TORCHRUN_ENV, {"rank": 1, "world_size": 2, "store": "node0:29500", "via": "env"}),
    (None, -1, -1, {**TORCHRUN_ENV, "MASTER_ADDR": "localhost", "MASTER_PORT": "12355"},
     {"rank": 1, "world_size": 2, "store": "localhost:12355", "via": "env"}),
    ("env://", 0, 4, TORCHRUN_ENV, {"rank": 0, "world_size": 4, "store": "node0:29500", "via": "env"}),
    # tcp:// names its store; its query gives the rank and world size where the arguments do not
    ("tcp://localhost:23456?rank=3&world_size=8", -1, -1, TORCHRUN_ENV,
     {"rank": 3, "world_size": 8, "store": "localhost:23456", "via": "tcp"}),
    ("tcp://10.0.0.1:23456", 1, 2, {}, {"rank": 1, "world_size": 2, "store": "10.0.0.1:23456", "via": "tcp"}),
    ("file:///tmp/ddp_init", -1, -1, TORCHRUN_ENV, {"rank": 1, "world_size": 2, "store": "/tmp/ddp_init", "via": "file"}),
    # without an environment nothing is known, and nothing is guessed
    (None, -1, -1, {}, {"rank": None, "world_size": None, "store": "", "via": "env"}),
])
def test_a_call_is_resolved_as_torch_resolves_it(init_method, rank, world_size, environ, expected):
    assert asked_for(init_method, rank, world_size, None, environ) == expected


def test_a_store_object_of_the_scripts_own_names_no_address():
    assert asked_for(None, 0, 2, object(), TORCHRUN_ENV) == {"rank": 0, "world_size": 2, "store": "", "via": "store"}


def init_process_group(backend: Optional[str] = None, init_method: Optional[str] = None, timeout: Any = None,
                       world_size: int = -1, rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None) -> str:
    """torch 2.9's signature; returns what it was given, or fails as a timeout does."""
    if init_method == "tcp://fails:1":
        raise RuntimeError("The client socket has timed out after 20000ms while trying to connect to (fails, 1).")
    return f"{backend} {init_method} {world_size} {rank}"


def test_the_recorder_keeps_each_call_beside_torchruns_and_says_when_it_fails():
    kept: list[dict] = []
    made: list[dict] = []
    failures: list[bool] = []
    gave = torchrun_gave(TORCHRUN_ENV)
    wrapped = recording(init_process_group, gave, kept.append, lambda: failures.append(True),
                        environ={**TORCHRUN_ENV, "MASTER_ADDR": "localhost"}, made=made.append)
    assert wrapped.__name__ == "init_process_group"
    assert wrapped("gloo", world_size=4, rank=0) == "gloo None 4 0"  # passed on as given
    assert kept == [{"rank": 0, "world_size": 4, "store": "localhost:29500", "via": "env", "torchrun": gave}]
    assert made == kept and not failures
    with pytest.raises(RuntimeError, match="timed out"):
        wrapped("gloo", "tcp://fails:1", rank=1, world_size=2)
    assert failures == [True] and kept[-1]["store"] == "fails:1"
    assert len(made) == 1  # a call that made no group is no job the rank formed
    # a call the recorder cannot read (a port that is no number) is torch's to refuse: it runs as it is
    assert wrapped("gloo", "tcp://host:port") == "gloo tcp://host:port -1 -1"
    assert len(kept) == 2 and len(made) == 1


def test_the_recorder_reads_torchs_own_signature_and_its_call_makes_the_group(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    kept: list[dict] = []
    wrapped = recording(dist.init_process_group, torchrun_gave(TORCHRUN_ENV), kept.append, lambda: None)
    wrapped("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        assert dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()
    assert kept == [{"rank": 0, "world_size": 1, "store": f"{tmp_path}/store", "via": "file",
                     "torchrun": {"rank": 1, "local_rank": 0, "world_size": 2, "store": "node0:29500"}}]


def call(rank: int, asked_rank: Optional[int] = None, world_size: int = 2, store: str = "node0:29500",
         via: str = "env", local_rank: int = 0, started: int = 2) -> InitCall:
    return InitCall(rank if asked_rank is None else asked_rank, world_size, store, via, torchrun_rank=rank,
                    torchrun_local_rank=local_rank, torchrun_world_size=started, torchrun_store="node0:29500")


NODES = {0: "node0", 1: "node1"}


def test_calls_that_ask_for_what_torchrun_gave_get_no_hint():
    assert init_hints({0: call(0), 1: call(1)}, NODES) == []
    # a store object of the script's own, and a file every node sees, are no mistake of ours to name
    assert init_hints({0: call(0, store="", via="store")}, NODES) == []
    shared = {r: call(r, store="/workspace/init", via="file") for r in (0, 1)}
    assert init_hints(shared, NODES) == []
    assert init_hints({r: call(r, store="/shared/x/init", via="file") for r in (0, 1)}, NODES) == []
    # on one node a file of its own is seen by all of its ranks
    assert init_hints({r: call(r, store="/tmp/init", via="file") for r in (0, 1)}, {0: "node0", 1: "node0"}) == []


def test_a_store_the_script_names_itself_is_named_with_how_and_torchruns():
    set_env = {r: call(r, store="localhost:12355") for r in (0, 1)}
    assert init_hints(set_env, NODES) == [
        "ranks 0, 1 called init_process_group for a store at localhost:12355, from the MASTER_ADDR and MASTER_PORT the"
        " script set itself, where torchrun's store is at node0:29500: they wait for a store that is not the job's; under"
        " torchrun leave init_method out, and MASTER_ADDR and MASTER_PORT as torchrun sets them"]
    named = init_hints({1: call(1, store="localhost:23456", via="tcp")}, NODES)
    assert named[0].startswith("rank 1 called init_process_group for a store at localhost:23456, named by"
                               " init_method='tcp://localhost:23456', where torchrun's store is at node0:29500")


def test_a_file_store_each_node_has_its_own_of_is_named():
    hints = init_hints({r: call(r, store="/tmp/ddp_init", via="file") for r in (0, 1)}, NODES)
    assert hints == ["ranks 0, 1 called init_process_group for a file store, /tmp/ddp_init, which each node has its"
                     " own of (only /workspace and /shared are shared by every node), so each node's ranks wait there"
                     " for the others; under torchrun leave init_method out (env://), or name a file under /workspace"]
    # /workspacefoo is not under /workspace
    assert init_hints({r: call(r, store="/workspacefoo/x", via="file") for r in (0, 1)}, NODES) != []


def test_a_world_size_of_the_scripts_own_is_named_with_how_many_torchrun_started():
    hints = init_hints({r: call(r, world_size=4) for r in (0, 1)}, NODES)
    assert hints == ["ranks 0, 1 called init_process_group with world_size=4, but torchrun started 2 workers"
                     " (WORLD_SIZE=2): they wait for ranks that never come; under torchrun leave init_method, rank"
                     " and world_size out: env:// reads what torchrun sets"]


def test_local_rank_passed_as_the_rank_is_named_as_such():
    hints = init_hints({0: call(0), 1: call(1, asked_rank=0, local_rank=0)}, NODES)
    assert hints == ["rank 1 called init_process_group with rank=0, its LOCAL_RANK, where torchrun gave it RANK=1:"
                     " ranks that take the same rank wait for one that never comes; rank is RANK, the rank across all"
                     " nodes (LOCAL_RANK is the rank within a node, to pick its GPU); under torchrun leave"
                     " init_method, rank and world_size out: env:// reads what torchrun sets"]
    other = init_hints({1: call(1, asked_rank=3, local_rank=0)}, NODES)
    assert other[0].startswith("rank 1 called init_process_group with rank=3 where torchrun gave it RANK=1:")


def test_every_mistake_is_named_the_store_first():
    hints = init_hints({1: call(1, asked_rank=0, world_size=4, store="localhost:12355")}, NODES)
    assert [h.split(": ")[0].split(", ")[0] for h in hints] == [
        "rank 1 called init_process_group for a store at localhost:12355",
        "rank 1 called init_process_group with world_size=4", "rank 1 called init_process_group with rank=0"]


def record(rank: int, init: Optional[dict], frames: list, reason: str = "requested", collectives: tuple = ()) -> dict:
    return {"request": "r1", "reason": reason, "rank": rank, "node": f"node{rank}", "pid": 10 + rank, "time": 1000.0,
            "cpu_s": 1.0, "collectives": list(collectives), "completed": 0, "init": init,
            "stacks": [{"thread": "MainThread", "main": True, "frames": frames}]}


CONNECTING = [["train.py", 8, "setup", "dist.init_process_group(\"gloo\", rank=rank, world_size=world_size)"],
              [f"{SITE}/c10d_logger.py", 95, "wrapper", ""],
              [f"{SITE}/distributed_c10d.py", 1762, "init_process_group", ""],
              [f"{SITE}/rendezvous.py", 189, "_create_c10d_store", ""]]
ELSEWHERE = {"rank": None, "world_size": 2, "store": "localhost:12355", "via": "env",
             "torchrun": {"rank": None, "local_rank": 0, "world_size": 2, "store": "node0:29500"}}


def elsewhere(rank: int) -> dict:
    return {**ELSEWHERE, "rank": rank, "torchrun": {**ELSEWHERE["torchrun"], "rank": rank}}


def test_a_hung_job_whose_ranks_wait_in_init_is_told_why_in_place_of_the_general_hint():
    snapshots = {r: RankSnapshot.from_json(record(r, elsewhere(r), CONNECTING)) for r in (0, 1)}
    found = diagnose(Probe("r1", 5.0, snapshots), Probe("r0", 0.0, snapshots), {0, 1}, {}, 30)
    assert found.hung and found.headline == "no progress for 30 s: ranks 0, 1: init_process_group at train.py:8 in setup"
    assert found.lines() == [
        found.headline, "  ranks 0, 1: init_process_group at train.py:8 in setup",
        '      train.py:8 in setup: dist.init_process_group("gloo", rank=rank, world_size=world_size)',
        "      torch/distributed/c10d_logger.py:95 in wrapper",
        "      torch/distributed/distributed_c10d.py:1762 in init_process_group",
        "      torch/distributed/rendezvous.py:189 in _create_c10d_store",
        "  ranks 0, 1 called init_process_group for a store at localhost:12355, from the MASTER_ADDR and MASTER_PORT"
        " the script set itself, where torchrun's store is at node0:29500: they wait for a store that is not the"
        " job's; under torchrun leave init_method out, and MASTER_ADDR and MASTER_PORT as torchrun sets them"]
    # a file store each node has its own of: the ranks' nodes are the ones their records name
    files = {r: RankSnapshot.from_json(record(r, {**elsewhere(r), "store": "/tmp/ddp_init", "via": "file"}, CONNECTING))
             for r in (0, 1)}
    found = diagnose(Probe("r1", 5.0, files), Probe("r0", 0.0, files), {0, 1}, {}, 30)
    assert found.lines()[-1].startswith("  ranks 0, 1 called init_process_group for a file store, /tmp/ddp_init,"
                                        " which each node has its own of")
    # a rank past init_process_group is not asked about it: its call found the store
    past = {0: snapshots[0], 1: RankSnapshot.from_json(record(1, elsewhere(1), [["train.py", 30, "<module>", ""]]))}
    found = diagnose(Probe("r1", 5.0, past), Probe("r0", 0.0, past), {0, 1}, {}, 30)
    assert found.lines()[-1].startswith("  rank 0 called init_process_group for a store at")
    # a call that asks for what torchrun gave leaves the general hint
    right = {r: RankSnapshot.from_json(record(r, {**elsewhere(r), "store": "node0:29500"}, CONNECTING)) for r in (0, 1)}
    found = diagnose(Probe("r1", 5.0, right), Probe("r0", 0.0, right), {0, 1}, {}, 30)
    assert found.lines()[-1].startswith("  every rank waits in init_process_group, for its store or for the others")
    # nor does a rank whose record holds no call (a hook that could not wrap it)
    unknown = {r: RankSnapshot.from_json(record(r, None, CONNECTING)) for r in (0, 1)}
    found = diagnose(Probe("r1", 5.0, unknown), Probe("r0", 0.0, unknown), {0, 1}, {}, 30)
    assert found.lines()[-1].startswith("  every rank waits in init_process_group, for its store or for the others")


def test_an_init_that_timed_out_is_placed_there_from_the_record_written_as_it_failed(tmp_path):
    # written from the recorder's wrapper as torch raised: the script's frame is the innermost
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(
            record(rank, elsewhere(rank), CONNECTING[:1], reason="collective failed")))
    failure = Failure("node0", 0, 1, "torch.distributed.DistNetworkError: The client socket has timed out after"
                      " 20000ms while trying to connect to (localhost, 12355).", ())
    found = timeout_diagnosis(failure, tmp_path, {0, 1})
    assert found is not None and found.hung
    assert found.headline == ("init_process_group timed out on node0 rank 0 (The client socket has timed out after"
                              " 20000ms while trying to connect to (localhost, 12355).): ranks 0, 1:"
                              " init_process_group at train.py:8 in setup")
    assert found.lines()[-1].startswith("  ranks 0, 1 called init_process_group for a store at localhost:12355")
    # a record written as a collective failed, after init_process_group returned, is no init's
    done = {"seq": 1, "op": "all_reduce", "group": "default", "shapes": "float32[4]", "at": "train.py:12",
            "state": "failed"}
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(
            record(rank, elsewhere(rank), CONNECTING[:1], reason="collective failed", collectives=(done,))))
    found = timeout_diagnosis(failure, tmp_path, {0, 1})
    assert found is not None and found.cause.startswith("a collective timed out on node0 rank 0")
    assert not any("for a store at" in line for line in found.lines())


def test_a_run_whose_ranks_asked_for_another_world_is_warned_whatever_its_end(tmp_path, monkeypatch, make_job):
    """Each rank's call comes on the progress channel once it made its group; the run's end says,
    in one line, what was not torchrun's: a world of one per rank exits 0, and is not the job
    torchrun started, so the run fails, saying so (a run that failed anyway warns of it).
    outcome.json and the page keep the line; a hang whose diagnosis said it is not warned again;
    calls that asked for what torchrun gave, or numbered the ranks in another order, say nothing."""
    from orchestrate.hangs.diagnosis import HangDiagnosis
    from orchestrate.node import progress
    from orchestrate.outcome.model import FaultRecord, RunResult, Timings
    from orchestrate.outcome.node_result import NodeResult
    from orchestrate.outcome.record import outcome_record
    from orchestrate.outcome.states import NodePhase
    from orchestrate.outcome.summary import format_summary
    from orchestrate.report.model import build_model
    from orchestrate.report.page import render_html
    from orchestrate.supervise.progress import ProgressWatch
    from tests.unit.test_report import plan, started

    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    processes = iter(range(10))

    def worker(rank: int, *calls: tuple[int, int], reported_as: int = -1) -> None:
        """A worker process of ``rank`` whose groups asked for these (rank, world size)."""
        monkeypatch.setenv("RANK", str(rank if reported_as < 0 else reported_as))
        monkeypatch.setattr(progress, "_channel", None)  # another worker process: another attempt
        progress._get_channel().attempt = f"process-{next(processes)}"  # (one pid here, and a clock too coarse)
        gave = torchrun_gave({**TORCHRUN_ENV, "RANK": str(rank)})
        for asked, size in calls:
            progress.report_init_call({**asked_for(None, asked, size, None, TORCHRUN_ENV), "torchrun": gave})

    worker(0, (0, 2))  # the first attempt formed the job...
    worker(0, (0, 1))  # ...its restart did not
    worker(1, (1, 2), (0, 1), reported_as=0)  # the job, then a world of one to export the model, RANK changed
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.groups_made() == {0: call(0, asked_rank=0, world_size=1), 1: call(1)}
    assert watch.max_step is None and not watch.seen and not watch.attempts  # no step
    assert RunResult("r", tmp_path, [], Timings(), init_calls=watch.groups_made()).apart == (
        "rank 0 called init_process_group with world_size=1, but torchrun started 2 workers (WORLD_SIZE=2)")
    worker(1, (0, 1))  # rank 1 restarted too
    watch.poll(0.0, None)

    nodes = [NodeResult(node, NodePhase.SUCCEEDED, 0) for node in make_job(nodes=2).nodes]
    result = RunResult("r1", tmp_path, nodes, Timings(), init_calls=watch.groups_made())
    said = ("ranks 0, 1 called init_process_group with world_size=1, but torchrun started 2 workers (WORLD_SIZE=2):"
            " so the ranks did not form the one job torchrun started; under torchrun leave init_method, rank and"
            " world_size out: env:// reads what torchrun sets")
    facts = said.split(": so the ranks")[0]
    lines = format_summary(result).splitlines()
    assert not result.succeeded and result.job_succeeded and result.exit_code == 1
    assert lines[-1] == (f"FAILED: all 2 nodes exited 0, but the ranks did not form the one job torchrun started"
                         f" ({facts}); under torchrun leave init_method, rank and world_size out: env:// reads what"
                         " torchrun sets")
    assert not [ln for ln in lines if ln.startswith("warning:")]  # said once, in the FAILED line
    unfired = RunResult("r1", tmp_path, nodes, Timings(), init_calls=watch.groups_made(),
                        faults=[FaultRecord("kill:node1@step=99", "node1", fired=False)])
    assert format_summary(unfired).splitlines()[-1] == (
        "FAILED: all 2 nodes exited 0, but 1 fault(s) asked for never fired: kill:node1@step=99; and the ranks did"
        f" not form the one job torchrun started ({facts}); under torchrun leave init_method, rank and world_size out:"
        " env:// reads what torchrun sets")
    assert f"FAILED (exit code 1): the ranks did not form the one job torchrun started ({facts})" in repr(result)
    failed = RunResult("r0", tmp_path, [NodeResult(nodes[0].node, NodePhase.FAILED, 1), nodes[1]], Timings(),
                       init_calls=watch.groups_made())
    assert [ln for ln in format_summary(failed).splitlines() if ln.startswith("warning:")] == [f"warning: {said}"]
    record = json.loads(json.dumps(outcome_record(result)))
    assert record["apart"] == said
    assert record["missed"] == [lines[-1].split(", but ", 1)[1]]
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": record}))
    assert f'<p id="apart">Warning: {said}</p>' in page
    assert f"FAILED (exit code 1): every node exited 0, but {record['missed'][0]}" in html.unescape(page)

    hung = RunResult("r2", tmp_path, nodes, Timings(), init_calls=watch.groups_made(),
                     hang=HangDiagnosis(20.0, [], {}, "", init_hints=["ranks 0, 1 called ... world_size=1 ..."]))
    assert hung.apart == "" and "warning:" not in format_summary(hung)
    right = RunResult("r3", tmp_path, nodes, Timings(), init_calls={0: call(0), 1: call(1)})
    assert right.apart == "" and outcome_record(right)["apart"] is None and right.succeeded
    # the ranks numbered in another order, or the store under another name: still the one job
    other_order = {0: call(0, asked_rank=1, store="localhost:29500"), 1: call(1, asked_rank=0)}
    assert RunResult("r4", tmp_path, nodes, Timings(), init_calls=other_order).succeeded
    same_rank = {r: call(r, asked_rank=1, local_rank=1) for r in (0, 1)}
    assert RunResult("r5", tmp_path, nodes, Timings(), init_calls=same_rank).apart == (
        "ranks 0, 1 each called init_process_group with rank=1 (their LOCAL_RANK)")


# --- said at once: the calls that can only wait until torch's timeout --------------------------

@pytest.mark.parametrize("store, loopback", [
    ("localhost:12355", True), ("LOCALHOST:1", True), ("127.0.0.1:29500", True), ("127.1.2.3:1", True),
    ("[::1]:12355", True), ("0.0.0.0:1", True), ("node0:12355", False), ("10.0.0.1:1", False),
    ("localhost.example.com:1", False), ("127node:1", False), ("localhost:None", False), ("localhost", False),
])
def test_a_store_on_each_nodes_own_loopback_is_told_from_one_every_node_reaches(store, loopback):
    assert is_loopback_store(store) is loopback


def test_only_calls_that_can_only_wait_are_said_as_they_are_made():
    local = {r: call(r, store="localhost:12355") for r in (0, 1)}
    assert certain_init_waits(local, NODES) == [
        "ranks 0, 1 called init_process_group for a store at localhost:12355, from the MASTER_ADDR and MASTER_PORT the"
        " script set itself: each node's ranks look for it on their own node and never meet the others' ranks, so"
        " they wait in init_process_group until it times out (30 minutes by default); under torchrun leave"
        " init_method out, and MASTER_ADDR and MASTER_PORT as torchrun sets them"]
    named = certain_init_waits({r: call(r, store="127.0.0.1:23456", via="tcp") for r in (0, 1)}, NODES)
    assert named[0].startswith("ranks 0, 1 called init_process_group for a store at 127.0.0.1:23456, named by"
                               " init_method='tcp://127.0.0.1:23456': each node's ranks")
    files = certain_init_waits({r: call(r, store="/tmp/ddp_init", via="file") for r in (0, 1)}, NODES)
    assert files == ["ranks 0, 1 called init_process_group for a file store, /tmp/ddp_init, which each node has its"
                     " own of (only /workspace and /shared are shared by every node), so each node's ranks wait there"
                     " for the others until init_process_group times out (30 minutes by default); under torchrun"
                     " leave init_method out (env://), or name a file under /workspace"]
    # not certain, so not said before the job hangs: ranks of one node so far (or of a one-node run),
    # a store every node reaches, a world of each node's own ranks (jobs apart), ranks of no known
    # node (an elastic job's), a file every node sees
    assert certain_init_waits({0: local[0]}, NODES) == []
    assert certain_init_waits(local, {0: "node0", 1: "node0"}) == []
    assert certain_init_waits({r: call(r, store="node0:12355") for r in (0, 1)}, NODES) == []
    apart = {r: call(r, asked_rank=0, world_size=1, store="localhost:12355") for r in (0, 1)}
    assert certain_init_waits(apart, NODES) == []
    assert certain_init_waits(local, {}) == []
    assert certain_init_waits({r: call(r, store="/workspace/init", via="file") for r in (0, 1)}, NODES) == []


def test_a_call_is_reported_as_it_is_made_and_read_by_the_launcher(tmp_path, monkeypatch):
    from orchestrate.node import progress
    from orchestrate.supervise.progress import ProgressWatch

    monkeypatch.setenv("DDP_PROGRESS_DIR", str(tmp_path))
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setattr(progress, "_channel", None)
        gave = torchrun_gave({**TORCHRUN_ENV, "RANK": str(rank)})
        progress.report_init_asked({**asked_for(None, -1, -1, None, {**TORCHRUN_ENV, "RANK": str(rank),
                                                                      "MASTER_ADDR": "localhost"}), "torchrun": gave})
    watch = ProgressWatch(tmp_path, lambda *args, **kwargs: None)
    watch.poll(0.0, None)
    assert watch.init_records == 2
    assert watch.init_asked == {r: InitCall(r, 2, "localhost:29500", "env", r, 0, 2, "node0:29500") for r in (0, 1)}
    assert watch.groups_made() == {}  # asked, not made: no group formed yet
    assert not watch.seen and watch.max_step is None

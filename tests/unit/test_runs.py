"""Runs rebuilt from the engine: states, launcher liveness, GPU leases, stop/down/prune."""
from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import threading
import time
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrate.config.fault_spec import parse_fault
from orchestrate.config.gpu_layout import check_lease
from orchestrate.config.run_config import DEFAULT_IMAGE
from orchestrate.engine.client import engine_time
from orchestrate.engine.runs import (
    NodeInfo,
    RunInfo,
    RunState,
    age,
    find_run,
    gpus_in_use,
    launcher_alive,
    launcher_identity,
    list_runs,
    node_plans,
    read_stop_request,
    run_state,
    stop_run,
)
from orchestrate.errors import UsageError
from orchestrate.launch.recorded_runs import runs_as_recorded
from orchestrate.node import rank_signal
from orchestrate.outcome.events import launcher_exit_code, read_events, record_event
from orchestrate.outcome.states import IllegalTransition, NodePhase, advance
from orchestrate.text import in_their_middle, no_run_named, runs_named, several_runs
from tests.fakes import FakeCompose, FakeDockerClient, Script, wait_until


@pytest.mark.parametrize("detached, alive, nodes, state", [
    (False, True, [("running", None), ("running", None)], RunState.RUNNING),
    (True, None, [("running", None), ("exited", 0)], RunState.RUNNING),
    (False, False, [("running", None), ("running", None)], RunState.ORPHANED),
    (True, False, [("running", None)], RunState.RUNNING),  # detached runs need no launcher
    (False, None, [("exited", 0), ("exited", 0)], RunState.SUCCEEDED),
    (False, None, [("exited", 1), ("exited", 137)], RunState.FAILED),
    (False, None, [("exited", 143), ("exited", 143)], RunState.STOPPED),
    (False, None, [("exited", 75), ("exited", 75)], RunState.ORPHANED),
])
def test_a_runs_state_follows_from_its_nodes(detached, alive, nodes, state):
    assert run_state(detached, alive, nodes) is state


@pytest.mark.parametrize("nodes, launcher_exit, state", [
    ([("exited", 0), ("exited", 0)], 1, RunState.FAILED),  # a fault asked for never fired
    ([("exited", 0), ("exited", 137)], 0, RunState.SUCCEEDED),  # the job went on without a lost node
    ([("exited", 143), ("exited", 143)], 130, RunState.STOPPED),  # Ctrl-C
    ([("exited", 1), ("exited", 143)], 1, RunState.FAILED),
    ([("exited", 0), ("exited", 0)], 2, RunState.FAILED),  # a teardown that failed after a good job
    ([("exited", 75), ("exited", 0)], 0, RunState.ORPHANED),  # a node that outlived its launcher says so
    ([("running", None), ("exited", 0)], 1, RunState.RUNNING),  # a node still runs: an older record's word
])
def test_an_ended_runs_state_is_its_launchers_word_where_it_said_one(nodes, launcher_exit, state):
    assert run_state(True, None, nodes, launcher_exit) is state


def test_launcher_liveness_is_known_on_this_host_only():
    assert launcher_alive(launcher_identity()) is True
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert launcher_alive(f"{socket.gethostname()}:{dead.pid}:") is False
    assert launcher_alive(f"some-other-host:{os.getpid()}:1") is None
    assert launcher_alive("") is None


def test_the_node_state_machine_refuses_what_it_does_not_connect():
    assert advance(NodePhase.CREATED, NodePhase.STARTING) is NodePhase.STARTING
    assert advance(NodePhase.RUNNING, NodePhase.RESTARTING) is NodePhase.RESTARTING
    assert advance(NodePhase.RESTARTING, NodePhase.STARTING) is NodePhase.STARTING
    for final in (NodePhase.SUCCEEDED, NodePhase.FAILED, NodePhase.STOPPED, NodePhase.ORPHANED):
        with pytest.raises(IllegalTransition, match=f"from {final.value} to running"):
            advance(final, NodePhase.RUNNING)
    with pytest.raises(IllegalTransition):
        advance(NodePhase.CREATED, NodePhase.RUNNING)


def test_gpu_leases_take_free_gpus_and_name_the_holder():
    held = {"0": "run-a", "1": "run-a"}
    assert check_lease(2, ("0", "1", "2", "3"), held) == ("2", "3")
    with pytest.raises(UsageError, match=r"4 GPU\(s\) wanted but only 2 of 4 are free: GPUs 0,1 are held by run run-a"):
        check_lease(4, ("0", "1", "2", "3"), held)


def test_a_run_on_an_engine_without_gpus_takes_no_gpu_lease(tmp_path, monkeypatch):
    """Neither --cpu nor --gpus-per-node: the engine's count decides, and with none the run is a CPU
    run, which does not wait for another run's bring-up (the trial waited up to 120 s for nothing)."""
    from orchestrate.config.request import RunRequest
    from orchestrate.engine.gpus import GpuInventory
    from orchestrate.engine.locks import host_lock
    from orchestrate.launch.lease import gpu_lease

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    said: list[str] = []
    yielded: list[object] = []

    def lease(inventory: GpuInventory) -> tuple[threading.Thread, threading.Event]:
        entered = threading.Event()

        def take() -> None:
            with gpu_lease(FakeDockerClient(), RunRequest(nodes=2), "run second", said.append, inventory) as free:
                yielded.append(free)
                entered.set()
        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        return thread, entered

    with host_lock("gpu-lease", "run first"):
        thread, entered = lease(GpuInventory())
        assert entered.wait(timeout=10), said
    thread.join(timeout=10)
    assert yielded == [()] and said == []
    with host_lock("gpu-lease", "run first"):  # with GPUs, the lease waits for the other run's bring-up
        thread, entered = lease(GpuInventory("nvidia", ("0", "1")))
        wait_until(lambda: said == ["waiting for run first (gpu-lease), at most 120 s"])
        assert not entered.is_set()
    thread.join(timeout=10)
    assert yielded[1:] == [("0", "1")]


def test_engine_times_parse_with_nanoseconds_and_unset_ones_are_none():
    from datetime import datetime, timezone

    expected = datetime(2026, 11, 21, 13, 5, 54, 123456, tzinfo=timezone.utc).timestamp()
    assert engine_time("2026-11-21T13:05:54.123456789Z") == pytest.approx(expected)
    assert engine_time("0001-01-01T00:00:00Z") is None
    assert engine_time("") is None


def test_ages_read_like_docker_ps():
    from datetime import datetime, timedelta, timezone

    now = datetime(2026, 11, 21, tzinfo=timezone.utc)
    assert [age(now - timedelta(seconds=s), now) for s in (5, 125, 7300, 200000)] == ["5s", "2m", "2h", "2d"]
    assert age(None) == "-"


def started_runs(make_run, client, *specs):
    """Start runs in the fake engine, detached unless its options say ``detach=False`` (then its
    launcher is this process); each spec: (run id, node scripts, options)."""
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    plans = []
    for run_id, scripts, options in specs:
        for node, script in scripts.items():
            client.script(node, script)
        plans.append(make_run(run_id, client=client, **{"detach": True, **options}).start())
    return plans


def printed_lines(out: io.StringIO) -> list[str]:
    """The lines written to ``out``, their label padding squeezed to one space."""
    return [" ".join(ln.split()) for ln in out.getvalue().splitlines()]


def following(client, run_id: str) -> tuple["threading.Thread", io.StringIO, list[int]]:
    """``logs RUN -f`` run in a thread: the thread, what it printed so far, and its exit code once it ended."""
    import threading

    from orchestrate.cli.main import main

    out, codes = io.StringIO(), []
    follower = threading.Thread(target=lambda: codes.append(main(client=client, argv=["logs", run_id, "-f"], out=out)),
                                daemon=True)
    follower.start()
    return follower, out, codes


def test_runs_are_rebuilt_from_labels_and_their_gpus_are_leased(make_run, monkeypatch):
    client = FakeDockerClient()
    client.gpus = ("2", "3")
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: client.gpus)
    started_runs(make_run, client,
                 ("gpu-run", {"node0": Script(hang=True), "node1": Script(hang=True)},
                  dict(nodes=2, gpus_per_node=1, backend="nccl")))
    [run] = list_runs(client)
    assert (run.run_id, run.detached, run.planned_nodes, run.state) == ("gpu-run", True, 2, RunState.RUNNING)
    assert [n.gpus for n in run.nodes] == [("2",), ("3",)]
    assert gpus_in_use([run]) == {"2": "gpu-run", "3": "gpu-run"}


def test_a_shared_gpu_run_rebuilt_from_labels_gives_every_process_its_gpu(make_run, monkeypatch):
    client = FakeDockerClient()
    client.gpus = ("0",)
    monkeypatch.setattr("orchestrate.engine.gpus.host_gpu_indices", lambda: client.gpus)
    [plan] = started_runs(make_run, client, ("shared", {"node0": Script(hang=True), "node1": Script(hang=True)},
                                             dict(nodes=2, nproc_per_node=2, gpus_per_node=1, share_gpus=True,
                                                  backend="nccl")))
    [run] = list_runs(client)
    rebuilt = node_plans(run)
    assert [n.process_gpus for n in rebuilt] == [n.process_gpus for n in plan.nodes] == [(("0",), ("0",))] * 2


def test_ps_and_stop_name_a_run_that_went_on_without_a_lost_node_by_how_it_ended(make_run):
    """The engine sees only node1 killed (137); the run's record says a lose fault took it, and
    the job went on without it: the run succeeded, as its summary says."""
    from orchestrate.cli.main import main
    from orchestrate.config.fault_spec import parse_fault
    from orchestrate.faults.live_notes import note_live_fault

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("went-on", {"node0": Script(["[0|0]:hi"]), "node1": Script(exit_code=137)},
                                             dict(nodes=2)))
    wait_until(lambda: list_runs(client)[0].state.ended)

    def ps_state():
        out = io.StringIO()
        assert main(client=client, argv=["ps"], out=out) == 0
        return out.getvalue().splitlines()[2].split()[2]

    assert ps_state() == "stopped"  # no record of a loss: the engine's word
    assert note_live_fault(plan.run_dir, "e5", parse_fault("lose:node1"), "node1", "done")
    assert ps_state() == "succeeded"
    out = io.StringIO()
    assert main(client=client, argv=["stop", "went-on"], out=out) == 0
    assert out.getvalue() == "run went-on has already ended (succeeded); nothing to stop\n"
    # a launcher that followed it (attach) ended with 1: its word, as its summary said
    record_event(plan.run_dir, "run-ended", exit_code=0, succeeded=True, interrupted=False, error="")
    record_event(plan.run_dir, "teardown-failed", error="network in use", exit_code=2)  # not the job's ending
    assert ps_state() == "succeeded"
    record_event(plan.run_dir, "run-ended", exit_code=1, succeeded=False, interrupted=False, error="")  # its last word
    assert ps_state() == "failed"
    assert [r.state for r in runs_as_recorded(list_runs(client))] == [RunState.FAILED]


def test_the_launchers_exit_code_is_the_number_its_last_run_ended_event_gives():
    from orchestrate.outcome.events import launcher_exit_code

    def ended(code):
        return {"event": "run-ended", "time": 1.0, "exit_code": code}

    assert launcher_exit_code([]) is None  # no launcher said (a detached run nobody attached to)
    assert launcher_exit_code([ended(1), {"event": "teardown-failed", "time": 2.0, "exit_code": 2}]) == 1
    assert launcher_exit_code([ended(0), ended(130)]) == 130
    assert launcher_exit_code([ended(1), ended("0")]) is None  # not a number: not read as one


def test_a_lost_node_does_not_count_in_a_runs_state_unless_every_node_was_lost(tmp_path, monkeypatch):
    def run(codes, lost=()):
        nodes = tuple(NodeInfo(f"node{i}", i, None, "exited", code, False, ()) for i, code in enumerate(codes))
        return RunInfo("r", "ddp-r", nodes, {"io.ddp-compose.detached": "1"}, None, lost=frozenset(lost))

    assert run([0, 137]).state is RunState.STOPPED  # the engine alone sees a node killed
    assert run([0, 137], ["node1"]).state is RunState.SUCCEEDED  # it went on without node1
    assert run([1, 137], ["node1"]).state is RunState.FAILED  # node0 failed after the loss
    assert run([0, 137, 137], ["node1"]).state is RunState.STOPPED  # node2 was killed, not lost
    assert run([137, 137], ["node0", "node1"]).state is RunState.STOPPED  # none went on: killed
    # a run with no directory has no record to read (not one in the working directory): its
    # nodes alone name it
    monkeypatch.chdir(tmp_path)
    record_event(tmp_path, "run-ended", exit_code=1, succeeded=False, interrupted=False, error="")
    [bare] = runs_as_recorded([run([0, 137])])
    assert (bare.lost, bare.launcher_exit, bare.state) == (frozenset(), None, RunState.STOPPED)


def test_runs_are_listed_newest_first_and_those_of_one_second_by_their_ids():
    from orchestrate.engine.labels import CREATED_LABEL, RUN_ID_LABEL

    client = FakeDockerClient()
    # added in an order that is neither: the engine's own order must not decide
    for run_id, created in (("20261204-100000-aaa", "2026-12-04T10:00:00+00:00"),
                            ("20261204-095959-zzz", "2026-12-04T09:59:59+00:00"),
                            ("20261204-100001-mmm", "2026-12-04T10:00:01+00:00"),
                            ("20261204-100000-bbb", "2026-12-04T10:00:00+00:00")):
        client.running(f"ddp-{run_id}-node0-1", {RUN_ID_LABEL: run_id, CREATED_LABEL: created})
    try:
        assert [run.run_id for run in list_runs(client)] == [
            "20261204-100001-mmm", "20261204-100000-bbb", "20261204-100000-aaa", "20261204-095959-zzz"]
    finally:
        for container in list(client.containers_by_name.values()):
            container.remove(force=True)


def test_ps_stop_down_and_prune_act_on_runs_found_in_the_engine(make_run, capsys, monkeypatch):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client,
                 ("done", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)),
                 ("going", {"node0": Script(hang=True, ignore_sigterm=True, processes=("python3 train.py",))},
                  dict(nodes=1, stop_grace=3)))
    wait_until(lambda: {r.run_id: r.state for r in list_runs(client)}["done"] is RunState.SUCCEEDED)
    out = io.StringIO()
    assert main(client=client, argv=["ps"], out=out) == 0
    rows = {line.split()[0]: line.split() for line in out.getvalue().splitlines()[2:]}
    assert rows["done"][2] == "succeeded" and rows["going"][2] == "running"
    # newest first: "going" was asked for after "done", or in the same second with an id that sorts after it
    for argv, listed in ((["ps", "-q"], "going\ndone\n"), (["ps", "-q", "--state", "running"], "going\n"),
                         (["ps", "-aq"], "going\ndone\n"),  # docker's -a: every run, as ps lists them anyway
                         (["ps", "--quiet", "--state", "failed"], ""),  # nothing at all: a script's xargs runs nothing
                         (["ps", "--state", "failed", "--state", "stopped"], "no failed or stopped runs\n")):
        out = io.StringIO()
        assert main(client=client, argv=argv, out=out) == 0
        assert out.getvalue() == listed, argv
    out = io.StringIO()
    assert main(client=client, argv=["ps", "--state", "succeeded"], out=out) == 0
    assert [line.split()[0] for line in out.getvalue().splitlines()[2:]] == ["done"]
    assert find_run(client, "one").run_id == "done"  # the end of its id names it too
    assert main(client=client, argv=["stop", "oin"], out=io.StringIO()) == 2  # the middle of "going"
    assert capsys.readouterr().err.splitlines()[-1] == ("error: no run id in the engine starts or ends with oin (going"
                                                        " has it in its middle: give the whole id or its end)")

    out = io.StringIO()
    graces = []

    def stop_run_in_less_time(run, timeout_s, by, say, **hooks):  # the run's own grace is asked; 2 s of it waited
        graces.append(timeout_s)
        return stop_run(run, 2, by, say, **hooks)
    monkeypatch.setattr("orchestrate.launch.stop.stop_run", stop_run_in_less_time)
    assert main(client=client, argv=["stop", "goi"], out=out) == 0  # a unique start of its id names it
    assert "stopped node0 of run going; logs and state kept" in out.getvalue()
    assert graces == [3]  # the run's own grace
    assert out.getvalue().splitlines()[0] == ("node0 did not stop within its grace after SIGTERM, so it got SIGKILL;"
                                              " what still ran: python3 train.py (sleeping)")
    assert {r.run_id: r.state for r in list_runs(client)} == {"done": RunState.SUCCEEDED, "going": RunState.STOPPED}

    out = io.StringIO()
    assert main(client=client, argv=["prune"], out=out) == 0
    assert "removed run done (succeeded): container ddp-done-node0-1, network ddp-done_ddp, volume ddp-done_shared" in out.getvalue()
    assert "pruned 2 run(s)" in out.getvalue()
    assert list_runs(client) == [] and client.networks_by_name == {} and client.volumes_by_name == {}
    assert main(client=client, argv=["down", "no-such-run"], out=io.StringIO()) == 2
    assert "no run no-such-run in the engine" in capsys.readouterr().err
    assert main(client=client, argv=["down", ""], out=io.StringIO()) == 2  # not the newest run: none
    assert "no run id given" in capsys.readouterr().err


def test_a_run_is_named_by_its_id_or_a_unique_start_or_end_of_it():
    ids = ["20261201-072714-728639", "20261201-072901-a1b2c3", "20261130-235959-728639x"]
    assert runs_named("20261201-072714-728639", ids) == ["20261201-072714-728639"]
    assert runs_named("a1b2c3", ids) == ["20261201-072901-a1b2c3"]  # the random end
    assert runs_named("20261130", ids) == ["20261130-235959-728639x"]  # docker's unique prefix
    assert runs_named("728639", ids) == ["20261201-072714-728639"]  # an end, not a piece in the middle
    assert runs_named("20261201", ids) == ["20261201-072714-728639", "20261201-072901-a1b2c3"]
    assert runs_named("", ids) == [] and runs_named("nope", ids) == []
    # a piece from the middle names none, and is said to be in the middle of the ids that hold it, not no run's
    assert runs_named("072714", ids) == [] and in_their_middle("072714", ids) == ["20261201-072714-728639"]
    assert in_their_middle("728639", ids) == ["20261130-235959-728639x"]  # (the other one ends with it)
    assert in_their_middle("-", ids) == sorted(ids) and in_their_middle("", ids) == []
    assert no_run_named("072714", "in the engine", "see ps", in_their_middle("072714", ids)) == (
        "no run id in the engine starts or ends with 072714 (20261201-072714-728639 has it in its middle: give the"
        " whole id or its end)")
    assert no_run_named("07", "in the engine", "see ps", ids[:2]) == (
        "no run id in the engine starts or ends with 07 (20261201-072714-728639, 20261201-072901-a1b2c3 have it in"
        " their middles: give the whole id or its end)")
    assert no_run_named("nope", "in the engine", "see ps") == "no run nope in the engine (see ps)"
    assert several_runs("20261201", ids[:2], "in the engine") == (
        "'20261201' names 2 runs in the engine: 20261201-072714-728639, 20261201-072901-a1b2c3; give more of the run id")


def test_stop_signals_every_node_at_once_not_one_after_another(make_run, monkeypatch):
    """A node stopped only after another has ended would see its peers gone first."""
    import threading

    client = FakeDockerClient()
    started_runs(make_run, client, ("going", {"node0": Script(hang=True), "node1": Script(hang=True)},
                                    dict(nodes=2)))
    [run] = list_runs(client)
    container_type = type(run.nodes[0].container)
    real_stop, both_asked = container_type.stop, threading.Barrier(2, timeout=5)

    def stop(self, timeout=10):
        both_asked.wait()  # each node's stop goes on only once the other's has been asked too
        real_stop(self, timeout)

    monkeypatch.setattr(container_type, "stop", stop)
    assert stop_run(run, 3) == ["node0", "node1"]
    assert [c.stop_timeouts for c in (n.container for n in run.nodes)] == [[3], [3]]
    assert [c.exit_code for c in (n.container for n in run.nodes)] == [143, 143]  # they took it: no SIGKILL
    assert list_runs(client)[0].state is RunState.STOPPED
    # word left for whoever follows the run: these nodes were stopped on request, not failed
    assert read_stop_request(run.run_dir).nodes == {"node0", "node1"}
    assert read_stop_request(run.run_dir.parent).nodes == frozenset()  # no stop there


def test_a_stop_request_is_readable_by_the_runs_launcher_whoever_wrote_it(make_run, monkeypatch):
    """`stop` run by a user whose umask keeps files private: the run's launcher may be another
    user, and must read that its nodes were stopped, not failed."""
    import os

    from orchestrate.engine.runs import mark_stop_requested
    from orchestrate.plan.layout import STOP_REQUEST_FILE

    client = FakeDockerClient()
    started_runs(make_run, client, ("private", {"node0": Script(hang=True)}, dict(nodes=1)))
    run = list_runs(client)[0]
    old = os.umask(0o077)
    try:
        mark_stop_requested(run.run_dir, ["node0"], grace_s=3)
    finally:
        os.umask(old)
    assert (run.run_dir / STOP_REQUEST_FILE).stat().st_mode & 0o777 == 0o644
    assert read_stop_request(run.run_dir).grace_s == 3.0 and read_stop_request(run.run_dir).time is not None

    def refused(*args) -> None:
        raise PermissionError("refused")
    monkeypatch.setattr(os, "replace", refused)  # the move into place fails: nothing half written is left
    mark_stop_requested(run.run_dir, ["node0"], grace_s=5)
    monkeypatch.undo()
    assert read_stop_request(run.run_dir).grace_s == 3.0
    assert sorted(p.name for p in run.run_dir.iterdir() if p.name.startswith(".")) == []


def test_a_stop_request_with_fields_it_cannot_read_keeps_the_nodes_it_stops(tmp_path):
    """What the stop left running, or its grace, written by another version or cut short, is
    taken as not said: the nodes it stops stay stopped on request, not failed."""
    import json

    from orchestrate.plan.layout import STOP_REQUEST_FILE

    for grace, listed in ((True, ["python a.py"]), ("3", {"node0": "python a.py"}), (None, None)):
        (tmp_path / STOP_REQUEST_FILE).write_text(json.dumps(
            {"nodes": ["node0"], "by": "x", "grace_s": grace, "still_running": listed}))
        request = read_stop_request(tmp_path)
        assert (request.nodes, request.by, request.grace_s, request.left_running("node0")) == ({"node0"}, "x", None, [])
    (tmp_path / STOP_REQUEST_FILE).write_text(json.dumps(
        {"nodes": ["node0", "node1"], "grace_s": 0, "still_running": {"node1": ["python a.py (sleeping)", 3]}}))
    request = read_stop_request(tmp_path)
    assert (request.grace_s, request.left_running("node1"), request.left_running("node0")) == (
        0.0, ["python a.py (sleeping)", "3"], [])


def test_a_stop_whose_run_directory_is_gone_still_stops_the_nodes(make_run):
    import shutil

    client = FakeDockerClient()
    started_runs(make_run, client, ("gone", {"node0": Script(hang=True)}, dict(nodes=1)))
    [run] = list_runs(client)
    shutil.rmtree(run.run_dir)
    assert stop_run(run, 1) == ["node0"] and not run.run_dir.exists()
    assert list_runs(client)[0].state is RunState.STOPPED


def test_prune_with_runs_dir_leaves_other_directories_runs_alone(make_run, tmp_path):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("mine", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)),
                 ("theirs", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1, runs_dir=tmp_path / "elsewhere")))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    out = io.StringIO()
    assert main(client=client, argv=["prune", "--runs-dir", str(tmp_path / "runs")], out=out) == 0
    assert "removed run mine (succeeded)" in out.getvalue()
    assert f"pruned 1 run(s) in {tmp_path / 'runs'}" in out.getvalue()
    assert [r.run_id for r in list_runs(client)] == ["theirs"]


def test_ps_with_runs_dir_lists_that_directorys_runs_alone_and_refuses_one_named_by_none(make_run, tmp_path,
                                                                                           capsys):
    """A shared engine holds other projects' and users' runs: ``ps -q --runs-dir`` gives one
    project's ids alone, to pipe into ``down``; a typo is refused, not an empty list."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("mine", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)),
                 ("theirs", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1, runs_dir=tmp_path / "elsewhere")))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    out = io.StringIO()
    assert main(client=client, argv=["ps", "-q", "--runs-dir", str(tmp_path / "runs")], out=out) == 0
    assert out.getvalue() == "mine\n"
    out = io.StringIO()
    assert main(client=client, argv=["ps", "--runs-dir", str(tmp_path / "elsewhere")], out=out) == 0
    assert "theirs" in out.getvalue() and "mine" not in out.getvalue()
    (tmp_path / "empty").mkdir()
    out = io.StringIO()
    assert main(client=client, argv=["ps", "--runs-dir", str(tmp_path / "empty")], out=out) == 0
    assert out.getvalue() == f"no runs in {tmp_path / 'empty'}\n"
    capsys.readouterr()
    assert main(client=client, argv=["ps", "--runs-dir", str(tmp_path / "typo")], out=io.StringIO()) == 2
    assert capsys.readouterr().err == (f"error: --runs-dir {tmp_path / 'typo'} does not exist, and no run in the"
                                       " engine has its directory there\n")


def test_stop_and_down_with_runs_dir_act_on_that_directorys_run_alone(make_run, tmp_path, capsys):
    """A user who started with ``run -d --runs-dir D`` gives ``down RUN --runs-dir D`` (or stop,
    stacks) as ps and prune take it (until 2026-12-07 argparse refused it): a run elsewhere is
    refused in one line and left running, a part of an id shared with a run elsewhere names the one in D, and a run the
    engine no longer has is pointed at in D."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    runs_dir, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    started_runs(make_run, client, ("mine-a1", {"node0": Script(hang=True)}, dict(nodes=1, stop_grace=1)),
                 ("theirs-a1", {"node0": Script(hang=True)}, dict(nodes=1, runs_dir=elsewhere)))
    wait_until(lambda: all(r.state is RunState.RUNNING for r in list_runs(client)))
    capsys.readouterr()
    for command in ("stop", "down", "stacks"):  # stacks, as the others (until 2026-12-07 argparse refused it)
        assert main(client=client, argv=[command, "theirs-a1", "--runs-dir", str(runs_dir)], out=io.StringIO()) == 2
        assert capsys.readouterr().err == (f"error: run theirs-a1 is not in --runs-dir {runs_dir}: its directory is"
                                           f" {elsewhere / 'theirs-a1'}\n")
    assert main(client=client, argv=["down", "a1", "--runs-dir", str(tmp_path / "typo")], out=io.StringIO()) == 2
    assert capsys.readouterr().err == (f"error: --runs-dir {tmp_path / 'typo'} does not exist, and no run in the"
                                       " engine has its directory there\n")
    assert {r.run_id: r.state for r in list_runs(client)} == {"mine-a1": RunState.RUNNING,
                                                               "theirs-a1": RunState.RUNNING}
    assert main(client=client, argv=["stop", "a1"], out=io.StringIO()) == 2  # the end of both ids
    assert "'a1' names 2 runs in the engine: mine-a1, theirs-a1" in capsys.readouterr().err
    out = io.StringIO()
    assert main(client=client, argv=["stop", "a1", "--runs-dir", str(runs_dir), "--timeout", "0"], out=out) == 0
    assert f"stopped node0 of run mine-a1; logs and state kept" in out.getvalue()
    assert {r.run_id: r.state for r in list_runs(client)} == {"mine-a1": RunState.STOPPED,
                                                               "theirs-a1": RunState.RUNNING}
    out = io.StringIO()
    assert main(client=client, argv=["down", "a1", "--runs-dir", str(runs_dir)], out=out) == 0
    assert out.getvalue().splitlines()[-1] == f"its logs stay in {runs_dir / 'mine-a1'}"
    assert [r.run_id for r in list_runs(client)] == ["theirs-a1"]
    assert main(client=client, argv=["down", "mine-a1", "--runs-dir", str(runs_dir)], out=io.StringIO()) == 2
    assert capsys.readouterr().err == (f"error: no run mine-a1 in the engine (see `python -m orchestrate ps`); it ended"
                                       f" and was removed, and its logs stay in {runs_dir / 'mine-a1'} (python -m"
                                       " orchestrate logs mine-a1, report mine-a1)\n")


def test_a_run_removed_while_runs_are_listed_is_gone_not_an_error(make_run):
    """Another client removes a run between the engine's listing and its inspection of each
    container (docker-py lists ids, then inspects): ps and prune list the others, exit 0."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("stays", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)),
                 ("goes", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    client.containers_by_name["ddp-goes-node0-1"].vanishing = True
    assert [r.run_id for r in list_runs(client)] == ["stays"]
    out = io.StringIO()
    assert main(client=client, argv=["ps"], out=out) == 0
    assert "stays" in out.getvalue() and "goes" not in out.getvalue()
    out = io.StringIO()
    assert main(client=client, argv=["prune"], out=out) == 0
    assert "removed run stays (succeeded)" in out.getvalue()


def test_a_network_or_volume_another_down_removed_first_is_gone_not_an_error(make_run):
    """Two `down`s of one run at once: the network and volume one lists, the other has removed."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("twice", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    client.networks_by_name["ddp-twice_ddp"].removed_elsewhere = True
    client.volumes_by_name["ddp-twice_shared"].removed_elsewhere = True
    out = io.StringIO()
    assert main(client=client, argv=["down", "twice"], out=out) == 0
    assert "removed run twice: container ddp-twice-node0-1\n" in out.getvalue()  # nor network nor volume
    assert list_runs(client) == [] and client.networks_by_name == {} and client.volumes_by_name == {}


def test_a_container_another_down_is_removing_is_waited_for_then_the_network_goes(make_run):
    """Two `down`s of one run at once: a container the other is removing answers 409; this one
    waits for it to go, since the network cannot go before it (measured: 8 of 8 such pairs failed
    before, on the real engine)."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("twice", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    client.containers_by_name["ddp-twice-node0-1"].removing_elsewhere = 2
    out = io.StringIO()
    assert main(client=client, argv=["down", "twice"], out=out) == 0, out.getvalue()
    assert "removed run twice: network ddp-twice_ddp, volume ddp-twice_shared\n" in out.getvalue()
    assert [call for call in client.calls if call[0] == "remove"] == [("remove", "ddp-twice-node0-1")] * 3
    assert list_runs(client) == [] and client.networks_by_name == {} and client.volumes_by_name == {}


def test_a_node_removed_meanwhile_is_stopped_all_the_same(make_run):
    import docker.errors

    from orchestrate.engine.runs import stop_run
    from orchestrate.errors import EngineError

    client = FakeDockerClient()
    started_runs(make_run, client, ("gone", {"node0": Script(hang=True)}, dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]
    client.failures["stop"] = docker.errors.NotFound("No such container: ddp-gone-node0-1")
    assert stop_run(run, 1) == ["node0"]
    client.failures["stop"] = docker.errors.APIError("the engine refused")
    with pytest.raises(EngineError, match="cannot stop node0 of run gone: the engine refused"):
        stop_run(run, 1)


def test_a_stop_names_each_node_the_engine_had_to_kill_with_what_still_ran_in_it_before_its_sigkill(make_run):
    """The engine's stop, 2 s of grace: the nodes that ignored their SIGTERM are listed 1 s before
    the engine's SIGKILL, then named with what ran in them (as the launcher names one); a node
    that took its SIGTERM is neither listed nor named."""
    client = FakeDockerClient()
    started_runs(make_run, client, ("stubborn", {
        "node0": Script(hang=True), "node1": Script(hang=True, ignore_sigterm=True, processes=("python3 a.py",)),
        "node2": Script(hang=True, ignore_sigterm=True, processes=("python3 a.py --b",))}, dict(nodes=3)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]
    said: list[str] = []
    assert stop_run(run, 2, say=said.append) == ["node0", "node1", "node2"]
    assert [n.container.stop_timeouts for n in run.nodes] == [[2], [2], [2]]
    assert {n.name: n.container.exit_code for n in run.nodes} == {"node0": 143, "node1": 137, "node2": 137}
    assert sorted(said) == [
        "node1 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran: python3 a.py (sleeping)",
        "node2 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran: python3 a.py --b"
        " (sleeping)"]
    assert sorted(c[1] for c in client.calls if c[0] == "top") == ["ddp-stubborn-node1-1", "ddp-stubborn-node2-1"]
    # the run's stop request says it too, for whoever follows the run: its grace and the listing
    request = read_stop_request(run.run_dir)
    assert (request.nodes, request.grace_s) == ({"node0", "node1", "node2"}, 2.0)
    assert [request.left_running(n) for n in ("node0", "node1", "node2")] == [
        [], ["python3 a.py (sleeping)"], ["python3 a.py --b (sleeping)"]]
    assert not [p for p in run.run_dir.iterdir() if p.name.startswith(".")]  # no half-written file left


def test_a_node_ending_late_by_itself_is_not_named_and_a_short_grace_lists_nothing(make_run):
    """3 s of grace: node0 ends by its own SIGTERM handler after the listing (143, not named),
    node1 gets the engine's SIGKILL (named). Then a grace of 1 s: its node is named, with nothing
    listed (a listing then would come as the SIGTERM does)."""
    import threading

    client = FakeDockerClient()
    started_runs(make_run, client, ("late", {f"node{n}": Script(hang=True, ignore_sigterm=True) for n in range(2)},
                                    dict(nodes=2)), ("short", {"node0": Script(hang=True, ignore_sigterm=True)},
                                                     dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for r in list_runs(client) for n in r.nodes))
    late, short = list_runs(client, "late")[0], list_runs(client, "short")[0]
    node0 = late.nodes[0].container

    def ends_late() -> None:
        node0.exit(143)  # before its stop wakes, or that would write its SIGKILL's 137
        node0.killed.set()
    timer = threading.Timer(2.4, ends_late)  # after the listing at 2 s
    timer.start()
    said: list[str] = []
    try:
        assert stop_run(late, 3, say=said.append) == ["node0", "node1"]
    finally:
        timer.cancel()
    assert [n.container.exit_code for n in late.nodes] == [143, 137]
    assert [line.split()[0] for line in said] == ["node1"]
    said.clear()
    assert stop_run(short, 1, say=said.append) == ["node0"]
    assert said == ["node0 did not stop within its grace after SIGTERM, so it got SIGKILL"]
    assert ("top", short.nodes[0].container.name) not in client.calls


def test_a_node_its_launcher_removes_as_soon_as_the_sigkill_ended_it_is_still_named(make_run, monkeypatch):
    """The stop of a foreground run: its launcher sees the node end and tears the run down, which
    can come before ``stop`` looks at how the node ended. The node's end is read as its stop
    returns, so the removal right after it does not lose the line."""
    from orchestrate.engine import runs

    client = FakeDockerClient()
    started_runs(make_run, client, ("torn", {"node0": Script(hang=True, ignore_sigterm=True)}, dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    real_stop_node = runs.stop_node

    def then_torn_down(run, node, *args, **kwargs):
        state = real_stop_node(run, node, *args, **kwargs)
        node.container.remove(force=True)  # the launcher's teardown, at once
        return state
    monkeypatch.setattr(runs, "stop_node", then_torn_down)
    said: list[str] = []
    assert stop_run(list_runs(client)[0], 2, say=said.append) == ["node0"]
    assert said == ["node0 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran:"
                    " torchrun ... train.py (sleeping); python train.py (sleeping)"]


def test_a_node_counts_as_killed_by_its_stop_only_for_a_sigkill_at_the_end_of_its_grace():
    """An earlier kill (a fault's, the kernel's OOM kill) in a node whose stop was still going is
    not its stop's; nor is a node that ended by itself, runs on, or is gone."""
    from orchestrate.engine.runs import killed_by_engine

    finished = "2026-11-27T10:00:05.000000000Z"
    at = engine_time(finished)
    state = {"Status": "exited", "ExitCode": 137, "FinishedAt": finished}
    assert killed_by_engine(state, not_before=at) and killed_by_engine(state, not_before=at - 2)
    assert not killed_by_engine(state, not_before=at + 0.001)  # it ended before the grace did
    assert not killed_by_engine({**state, "ExitCode": 143}, not_before=at - 2)
    assert not killed_by_engine({**state, "Status": "running"}, not_before=at - 2)
    assert not killed_by_engine({}, not_before=at - 2)  # gone: the engine could not say


def test_a_stop_with_no_grace_names_a_node_it_killed_as_given_none_and_one_whose_end_is_unknown_is_not_named(
        make_run):
    """A grace of 0 (``stop --timeout 0``) gives none: the engine's SIGKILL comes with the SIGTERM,
    and a node it ended is named as given none, with what ran in it listed as the stop began (no
    later moment comes; until 2026-12-06 it was said of no node). A node whose end the engine
    cannot tell (it does not answer) is not said to have been killed."""
    import docker.errors

    client = FakeDockerClient()
    started_runs(make_run, client, ("now", {"node0": Script(hang=True, ignore_sigterm=True)}, dict(nodes=1)),
                 ("quiet", {"node0": Script(hang=True, ignore_sigterm=True)}, dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for r in list_runs(client) for n in r.nodes))
    said: list[str] = []
    now, quiet = list_runs(client, "now")[0], list_runs(client, "quiet")[0]
    real_stop = now.nodes[0].container.stop

    def engine_takes_a_moment(timeout: int = 10) -> None:  # still going when stop_run looks at its stops
        time.sleep(0.3)
        real_stop(timeout)
    now.nodes[0].container.stop = engine_takes_a_moment
    assert stop_run(now, 0, say=said.append) == ["node0"]
    assert now.nodes[0].container.exit_code == 137 and said == [
        "node0 had no grace (its stop gave 0 s), so it got SIGKILL at once; what still ran:"
        " torchrun ... train.py (sleeping); python train.py (sleeping)"]
    name = now.nodes[0].container.name
    assert [call for call in client.calls if call[0] in ("top", "stop") and call[1] == name] == [("top", name),
                                                                                                  ("stop", name)]
    assert read_stop_request(now.run_dir).left_running("node0") == [
        "torchrun ... train.py (sleeping)", "python train.py (sleeping)"]  # for whoever follows the run
    said.clear()
    client.failures["reload"] = docker.errors.APIError("the engine is busy")
    assert stop_run(quiet, 2, say=said.append) == ["node0"]
    assert quiet.nodes[0].container.exit_code == 137 and said == []


def frozen_run(make_run):
    """A 1-node run "frozen" in the fake engine, listed with its node paused."""
    client = FakeDockerClient()
    started_runs(make_run, client, ("frozen", {"node0": Script(hang=True)}, dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    client.containers_by_name["ddp-frozen-node0-1"].pause()
    return client, list_runs(client)[0]


def test_an_interrupted_stop_is_not_held_by_the_engines_stops_and_says_the_engine_finishes_them(make_run):
    import signal
    import threading

    client = FakeDockerClient()
    started_runs(make_run, client, ("long", {"node0": Script(hang=True, ignore_sigterm=True)}, dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]
    said: list[str] = []
    ctrl_c = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))  # as a terminal's Ctrl-C
    began = time.monotonic()
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            stop_run(run, 60, say=said.append)
    finally:
        ctrl_c.cancel()
    assert time.monotonic() - began < 30  # not the 60 s grace the engine's stop waits out
    assert said == ["interrupted: the engine still sends SIGKILL to the nodes of run long that have not stopped when"
                    " their 60 s of grace end"]
    assert run.nodes[0].container.stop_timeouts == [60]


@pytest.mark.parametrize("asked, grace, sent", [(["--timeout", "1.2"], 5, 2), ([], 2.5, 3), (["--timeout", "0"], 5, 0)])
def test_stop_takes_a_fraction_of_a_second_as_stop_grace_does_and_gives_the_engine_it_rounded_up(
        make_run, asked, grace, sent):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True)}, dict(nodes=1, stop_grace=grace)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    assert main(client=client, argv=["stop", "r", *asked], out=io.StringIO()) == 0
    assert list_runs(client)[0].nodes[0].container.stop_timeouts == [sent]


@pytest.mark.parametrize("command", ["stop", "down"])
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "soon"])
def test_a_stop_timeout_that_is_no_number_of_seconds_is_refused_in_one_line(command, value, capsys):
    from orchestrate.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(client=FakeDockerClient(), argv=[command, "r", "--timeout", value], out=io.StringIO())
    assert exited.value.code == 2
    assert "argument --timeout: expected seconds" in capsys.readouterr().err


def test_every_refused_stop_is_said_in_one_error(make_run):
    import docker.errors

    from orchestrate.errors import EngineError

    client = FakeDockerClient()
    started_runs(make_run, client, ("two", {n: Script(hang=True) for n in ("node0", "node1")}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    client.failures["stop"] = docker.errors.APIError("the engine refused")
    with pytest.raises(EngineError) as refused:
        stop_run(list_runs(client)[0], 0)
    # (with no grace, what ran in each node is listed before its stop: said with the refusal, as it still runs)
    ran = "what still ran: torchrun ... train.py (sleeping); python train.py (sleeping)"
    assert str(refused.value) == (f"cannot stop node0 of run two: the engine refused; {ran}; cannot stop node1 of run"
                                  f" two: the engine refused; {ran}")


def test_a_node_killed_by_something_else_as_its_grace_runs_is_not_named(make_run):
    """node0 is killed (137) as stop_run lists what runs in it, 1 s before its grace ends: a
    fault's kill, not the stop's SIGKILL; node1 gets the stop's, and is named."""
    client = FakeDockerClient()
    started_runs(make_run, client, ("other", {f"node{n}": Script(hang=True, ignore_sigterm=True) for n in range(2)},
                                    dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]
    node0 = run.nodes[0].container
    real_top = node0.top

    def killed_as_listed(ps_args: str = "") -> dict:
        listing = real_top(ps_args)
        node0.exit(137)  # a kill-rank or preempt of its own, just now
        node0.killed.set()
        return listing
    node0.top = killed_as_listed
    said: list[str] = []
    assert stop_run(run, 2, say=said.append) == ["node0", "node1"]
    assert [n.container.exit_code for n in run.nodes] == [137, 137]
    assert [line.split()[0] for line in said] == ["node1"]


def test_a_stop_that_fails_otherwise_is_raised_as_it_is_and_an_engine_gone_is_one_line(make_run):
    import requests

    from orchestrate.errors import EngineError

    client = FakeDockerClient()
    started_runs(make_run, client, ("odd", {"node0": Script(hang=True)}, dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]

    def broken(node) -> None:
        raise RuntimeError("a bug in a hook")
    with pytest.raises(RuntimeError, match="^a bug in a hook$"):
        stop_run(run, 0, before_stop=broken)
    client.failures["stop"] = requests.exceptions.ConnectionError("Connection aborted: the engine went away")
    with pytest.raises(EngineError, match="^cannot stop node0 of run odd: .*the engine went away"):
        stop_run(run, 0)


def test_a_stop_unpauses_a_paused_node_before_its_stop_and_writes_who_asked(make_run):
    from orchestrate.engine.runs import REMOVED_BY

    client, run = frozen_run(make_run)
    assert stop_run(run, 5, by=REMOVED_BY) == ["node0"]
    asked = [call for call in client.calls if call[0] in ("unpause", "stop")]
    assert asked == [("unpause", "ddp-frozen-node0-1"), ("stop", "ddp-frozen-node0-1")]
    assert read_stop_request(run.run_dir).by == REMOVED_BY


def test_a_node_removed_in_its_grace_is_not_named_and_a_refused_stop_is_raised_after_the_others_are_named(make_run):
    """Three stubborn nodes, 2 s of grace: node0 removed in it (a `down` beside the stop), node1
    killed by the engine, node2 stuck in the kernel (the engine's SIGKILL cannot end it: its stop
    is refused after the grace). node1 is named; then node2's refusal is raised with what ran in it."""
    import threading

    import docker.errors

    from orchestrate.errors import EngineError

    client = FakeDockerClient()
    started_runs(make_run, client, ("three", {f"node{n}": Script(hang=True, ignore_sigterm=True, processes=(
        f"python3 n{n}.py",) * (1 + n // 2)) for n in range(3)}, dict(nodes=3)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]
    containers = {n.name: n.container for n in run.nodes}

    def stuck_in_the_kernel(timeout: int = 10) -> None:
        time.sleep(timeout)
        raise docker.errors.APIError("tried to kill container, but did not receive an exit event")
    containers["node2"].stop = stuck_in_the_kernel
    removal = threading.Timer(0.3, lambda: client.containers_by_name.pop(containers["node0"].name))
    removal.start()
    said: list[str] = []
    try:
        with pytest.raises(EngineError) as refused:
            stop_run(run, 2, say=said.append)
    finally:
        removal.cancel()
    assert str(refused.value) == ("cannot stop node2 of run three: tried to kill container, but did not receive an"
                                  " exit event; what still ran: python3 n2.py (sleeping); python3 n2.py (sleeping)")
    assert said == ["node1 did not stop within its grace after SIGTERM, so it got SIGKILL; what still ran: python3"
                    " n1.py (sleeping)"]


@pytest.mark.parametrize("command", ["stop", "down"])
def test_stop_and_down_continue_the_ranks_a_hang_rank_fault_in_effect_stopped_before_the_engines_stop(make_run,
                                                                                                      command):
    """Read from the run's record: rank 1's hang-rank is in effect (continued first, so that its
    worker takes the SIGTERM and its node does not wait out the grace), rank 0's was undone."""
    from orchestrate.cli.main import main
    from orchestrate.outcome.events import record_event

    client = FakeDockerClient()
    started_runs(make_run, client, ("hung", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]
    for event, node, spec in (("fault", "node1", "slow:node1,cpus=0.5"), ("fault", "node1", "hang-rank:3"),
                              ("fault", "node1", "hang-rank:1"), ("fault", "node0", "kill-rank:0"),
                              ("fault", "node0", "hang-rank:0@t=0..5"), ("fault-ended", "node0", "hang-rank:0@t=0..5")):
        record_event(run.run_dir, event, node=node, spec=spec)
    # rank 3 is not on node1 any more (the rank script's "not here"): rank 1 is continued all the same
    client.command_outputs[("ddp-hung-node1-1", "python3")] = lambda cmd: (0, b"") if cmd[-2] == "1" else (
        rank_signal.NOT_HERE, b"")
    run.nodes[1].container.pause()  # paused too: unpaused, then its rank continued
    assert main(client=client, argv=[command, "hung"], out=io.StringIO()) == 0
    asked = {node: [c[2][-3:] if c[0] == "exec_create" else c[0] for c in client.calls
                    if c[0] in ("exec_create", "stop", "unpause") and c[1] == f"ddp-hung-{node}-1"]
             for node in ("node0", "node1")}
    assert asked == {"node0": ["stop"],  # nothing for kill-rank:0, nor the hang-rank undone
                     "node1": ["unpause", ("signal", "3", "SIGCONT"), ("signal", "1", "SIGCONT"), "stop"]}


def test_a_node_listed_paused_but_unpaused_meanwhile_is_stopped_not_an_error(make_run):
    """Two `down`s (or `stop`s) of a paused run: the other unpaused the node after this one listed it."""
    from orchestrate.engine.runs import stop_run

    client, run = frozen_run(make_run)
    assert run.nodes[0].status == "paused"
    client.containers_by_name["ddp-frozen-node0-1"].unpause()  # the other command, meanwhile
    assert stop_run(run, 1) == ["node0"]
    assert client.containers_by_name["ddp-frozen-node0-1"].status == "exited"
    assert [call[0] for call in client.calls if call[0] in ("unpause", "stop")][-2:] == ["unpause", "stop"]


def test_down_waits_for_a_live_launchers_teardown_not_for_a_dead_one_and_not_forever(make_run, monkeypatch):
    import dataclasses

    from orchestrate.engine.labels import LAUNCHER_LABEL
    from orchestrate.launch import stop

    monkeypatch.setattr(stop, "TEARDOWN_POLL_S", 0.0)
    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True)}, dict(nodes=1)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    run = list_runs(client)[0]
    alive = dataclasses.replace(run, labels={**run.labels, LAUNCHER_LABEL: launcher_identity()})
    dead = dataclasses.replace(run, labels={**run.labels, LAUNCHER_LABEL: f"{socket.gethostname()}:999999999:"})
    assert stop.wait_for_launchers_teardown(client, dead) == "its launcher ended without tearing it down"
    assert stop.wait_for_launchers_teardown(client, alive) == "its launcher did not tear it down within 0 s"
    assert len([c for c in client.calls if c[0] == "containers_by_name.list"]) >= stop.TEARDOWN_POLLS
    FakeCompose(f"ddp-{run.run_id}", Path("unused")).down()  # the launcher's teardown
    assert stop.wait_for_launchers_teardown(client, alive) == ""


def test_a_down_that_another_down_left_nothing_to_says_so(make_run):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("both", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    client.containers_by_name["ddp-both-node0-1"].removing_elsewhere = 0
    client.networks_by_name["ddp-both_ddp"].removed_elsewhere = True
    client.volumes_by_name["ddp-both_shared"].removed_elsewhere = True
    out = io.StringIO()
    assert main(client=client, argv=["down", "both"], out=out) == 0
    assert "removed run both: nothing left: another command removed it meanwhile\n" in out.getvalue()


def test_a_container_whose_other_removal_never_ends_fails_down_saying_so(make_run, monkeypatch, capsys):
    from orchestrate.cli.main import main
    from orchestrate.engine import runs

    monkeypatch.setattr(runs, "REMOVAL_POLL_S", 0.0)
    client = FakeDockerClient()
    started_runs(make_run, client, ("stuck", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    client.containers_by_name["ddp-stuck-node0-1"].removing_elsewhere = runs.REMOVAL_POLLS + 10
    assert main(client=client, argv=["down", "stuck"], out=io.StringIO()) != 0
    err = capsys.readouterr().err
    assert "container ddp-stuck-node0-1 is being removed by another command, and is not gone after 0 s" in err, err
    assert len([call for call in client.calls if call[0] == "remove"]) == runs.REMOVAL_POLLS
    assert "ddp-stuck_ddp" in client.networks_by_name  # nothing removed around a container still there


def test_prune_says_what_it_left_running_and_refuses_a_runs_dir_that_is_not_there(make_run, tmp_path, capsys):
    import shutil

    from orchestrate.cli.main import main

    from orchestrate.config.request import HostFacts

    client = FakeDockerClient()
    mine = HostFacts(run_as=f"{os.getuid()}:{os.getgid()}")  # (its owner label: its directory goes below)
    started_runs(make_run, client, ("going", {"node0": Script(hang=True)}, dict(nodes=1, host=mine)))
    wait_until(lambda: list_runs(client)[0].state is RunState.RUNNING)
    runs_dir = list_runs(client)[0].run_dir.parent
    for argv, said in ((["prune"], "nothing to prune in the engine: no run of yours there has ended (1 still"
                                   " running)\n"),
                       (["prune", "--runs-dir", str(runs_dir)],
                        f"nothing to prune in {runs_dir}: no run of yours there has ended (1 still running)\n")):
        out = io.StringIO()
        assert main(client=client, argv=argv, out=out) == 0
        assert out.getvalue() == said
    empty = tmp_path / "empty"
    empty.mkdir()
    out = io.StringIO()
    assert main(client=client, argv=["prune", "--runs-dir", str(empty)], out=out) == 0
    assert out.getvalue() == f"nothing to prune in {empty}: no run of yours there\n"  # not that one has not ended
    capsys.readouterr()
    for runs_dir_given, refused in ((tmp_path / "rusn", "does not exist"),  # a typo
                                    (runs_dir / "going" / "run.json", "is not a directory")):  # a file
        out = io.StringIO()
        assert main(client=client, argv=["prune", "--runs-dir", str(runs_dir_given)], out=out) == 2
        assert out.getvalue() == ""
        assert capsys.readouterr().err == (f"error: --runs-dir {runs_dir_given} {refused}, and no run in the engine"
                                           f" has its directory there\n")
    shutil.rmtree(runs_dir)  # deleted while its runs are in the engine: they are its runs all the same
    out = io.StringIO()
    assert main(client=client, argv=["prune", "--runs-dir", str(runs_dir)], out=out) == 0
    assert out.getvalue() == (f"nothing to prune in {runs_dir} (no such directory here): no run of yours there has"
                              f" ended (1 still running)\n")
    assert [r.run_id for r in list_runs(client)] == ["going"]


def test_fault_and_stacks_on_a_run_that_ended_say_how_it_ended(make_run, capsys):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("done", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    capsys.readouterr()
    for argv, doing in ((["fault", "done", "kill:node0"], "inject a fault into"), (["stacks", "done"], "look at")):
        assert main(client=client, argv=argv, out=io.StringIO()) == 2
        assert capsys.readouterr().err == (f"error: run done has ended (succeeded): no node to {doing}; its output:"
                                           " python -m orchestrate logs done\n")


def test_fault_checks_every_target_first_and_undoes_what_it_held_when_a_later_one_fails(make_run, capsys):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    assert main(client=client, argv=["fault", "r", "pause:node1@t=0..30", "kill:node9"], out=io.StringIO()) == 2
    assert "no running node9 in run r" in capsys.readouterr().err
    assert ("pause", "ddp-r-node1-1") not in client.calls  # nothing was done

    import docker.errors
    client.failures["kill"] = docker.errors.APIError("the engine refused")
    out = io.StringIO()
    assert main(client=client, argv=["fault", "r", "pause:node1@t=0..30", "kill:node0"], out=out) == 2
    assert "cannot kill node0 of run r: the engine refused" in capsys.readouterr().err
    assert client.calls[-2:] == [("kill", "ddp-r-node0-1"), ("unpause", "ddp-r-node1-1")]  # the pause undone
    assert "ended pause:node1@t=0..30 on node1 of run r" in out.getvalue()


def test_fault_does_its_faults_with_the_runs_own_settings(make_run):
    """`fault RUN` hands its faults what the run recorded: its project's network (a disconnect),
    its CPUs and link (what a slow and a degrade are undone to), its elastic range and restarts
    (a lost node it can go on without), its stop grace (a preempt's SIGKILL)."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)},
                                    dict(nodes=2, rdzv="c10d", nnodes="1:2", max_restarts=1, cpus_per_node=0.5,
                                         link="rate=1gbit", stop_grace=7)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    node0, node1 = "ddp-r-node0-1", "ddp-r-node1-1"
    before = len(client.calls)
    out = io.StringIO()
    assert main(client=client, argv=["fault", "r", "slow:node0,cpus=0.2@t=0..0.1", "degrade:node0,rate=10mbit@t=0..0.1",
                                     "disconnect:node1@t=0..0.1"], out=out) == 0, out.getvalue()
    done = client.calls[before:]
    [network] = [name for name in client.networks_by_name if name.startswith("ddp-r_")]
    assert [c for c in done if c[0] in ("disconnect", "connect")] == [
        ("disconnect", node1, network), ("connect", node1, network, ("node1",))]
    updates = [dict(c[2]) for c in done if c[:2] == ("update", node0)]
    assert [u["cpu_quota"] for u in updates] == [20_000, 50_000]  # slowed to 0.2, then the run's 0.5 again
    shaped = [c[2] for c in done if c[:2] == ("exec_create", node0) and c[2][0] == "tc"]
    assert shaped[1] == ("tc", "qdisc", "del", "dev", "eth0", "root")
    assert shaped[2][:8] == ("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate") and shaped[2][8] == "1gbit"

    # nnodes 1:2 and a restart left: node0 goes on without node1
    assert main(client=client, argv=["fault", "r", "lose:node1"], out=io.StringIO()) == 0
    assert ("kill", node1) in client.calls
    assert main(client=client, argv=["fault", "r", "preempt:node0"], out=io.StringIO()) == 0
    assert client.containers_by_name[node0].stop_timeouts == [7]


def test_logs_merge_every_nodes_lines_in_time_with_rank_prefixes(make_run, capsys):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:a", "[0|0]:c"]),
                                          "node1": Script(["[1|0]:b", "[1|0]:d"])}, dict(nodes=2)))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    # The engine's own timestamps decide the order, not the order the nodes are read in.
    node0, node1 = (client.containers_by_name[f"ddp-r-node{i}-1"] for i in range(2))
    node0.log = [(1000.0, "[0|0]:a"), (1002.0, "[0|0]:c")]
    node1.log = [(1001.0, "[1|0]:b"), (1003.0, "[1|0]:d")]
    out = io.StringIO()
    assert main(client=client, argv=["logs", "r"], out=out) == 0
    assert out.getvalue().splitlines()[:2] == ["[node0/rank0]  a", "[node1/rank1]  b"]  # the labels padded alike
    lines = printed_lines(out)
    assert lines == ["[node0/rank0] a", "[node1/rank1] b", "[node0/rank0] c", "[node1/rank1] d"]
    out = io.StringIO()
    assert main(client=client, argv=["logs", "r", "--node", "node1"], out=out) == 0
    assert printed_lines(out) == ["[node1/rank1] b", "[node1/rank1] d"]
    capsys.readouterr()
    assert main(client=client, argv=["logs", "r", "--node", "node7"], out=io.StringIO()) == 2
    assert capsys.readouterr().err == "error: --node node7: run r has no such node (nodes: node0, node1)\n"
    # --rank: that rank's lines alone, not its node's own (torchrun's)
    node1.log.insert(0, (1000.5, "W1130 23:38:55.773000 8 torch/distributed/elastic/agent/server/api.py:725] hi"))
    for argv, shown in ((["--rank", "1"], ["[node1/rank1] b", "[node1/rank1] d"]),
                        (["--rank", "0", "--rank", "1"], lines),
                        (["--node", "node1", "--rank", "1", "-f"], ["[node1/rank1] b", "[node1/rank1] d"]),
                        # --tail: the last N of what was printed (of the lines kept), then (-f) what comes
                        (["--tail", "2"], ["[node0/rank0] c", "[node1/rank1] d"]), (["-n", "0"], []),
                        (["--tail", "3", "--rank", "1"], ["[node1/rank1] b", "[node1/rank1] d"]),
                        (["--tail", "1", "-f"], ["[node1/rank1] d"]), (["--tail", "0", "-f"], [])):
        out = io.StringIO()
        assert main(client=client, argv=["logs", "r", *argv], out=out) == 0
        assert printed_lines(out) == shown, argv
    for argv, said in ((["--rank", "5"], "error: --rank 5: run r has no such rank (ranks 0-1)\n"),
                       (["--node", "node0", "--rank", "1"], "error: --rank 1 is on node1, not on --node node0\n")):
        assert main(client=client, argv=["logs", "r", *argv], out=io.StringIO()) == 2
        assert capsys.readouterr().err == said


def test_logs_of_a_run_that_printed_nothing_yet_says_so_on_stderr_and_prints_nothing_on_stdout(make_run, capsys):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("quiet", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    capsys.readouterr()
    out = io.StringIO()
    assert main(client=client, argv=["logs", "quiet"], out=out) == 0
    assert out.getvalue() == ""  # (a pipe of logs stays the logs)
    assert capsys.readouterr().err == ("[orchestrate] run quiet has printed no output yet (its nodes may still be"
                                       " starting: torchrun and the workers' imports take a while); follow it with:"
                                       " python -m orchestrate logs quiet -f\n")
    assert main(client=client, argv=["logs", "quiet", "--rank", "1"], out=out) == 0
    assert capsys.readouterr().err.startswith("[orchestrate] rank 1 of run quiet has printed no output yet (")
    assert main(client=client, argv=["logs", "quiet", "-n", "0"], out=out) == 0  # none asked for: nothing to say
    assert capsys.readouterr().err == "" and out.getvalue() == ""
    for node in client.containers_by_name.values():
        node.exit(0)
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    assert main(client=client, argv=["logs", "quiet", "--node", "node1"], out=out) == 0
    assert capsys.readouterr().err == "[orchestrate] node node1 of run quiet printed no output\n"


def test_logs_follow_shows_what_a_running_node_prints_next_and_ends_when_it_stops(make_run):
    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:before"], hang=True)}, dict(nodes=1)))
    node0 = client.containers_by_name["ddp-r-node0-1"]
    wait_until(lambda: bool(node0.log))  # its first line
    follower, out, codes = following(client, "r")
    wait_until(lambda: "before" in out.getvalue())  # what was printed so far
    node0.write("[0|0]:after")  # printed while logs -f follows
    wait_until(lambda: "after" in out.getvalue())  # the line printed next
    assert follower.is_alive()  # still following: the node runs
    node0.kill()
    follower.join(10)
    assert not follower.is_alive() and codes == [0]
    assert printed_lines(out) == ["[node0/rank0] before", "[node0/rank0] after"]


def test_logs_follow_of_a_run_quiet_for_its_diagnose_after_says_so_once_on_stderr_with_the_stacks_command(
        make_run, capsys):
    """A hung detached run left `logs -f` silent for ever (trial of 2026-12-07): once the run has
    been quiet for its --hang-diagnose-after, it says so on standard error, as `ps` names it, once
    per quiet spell; the lines a user pipes stay the run's own."""
    client = FakeDockerClient()
    started_runs(make_run, client, ("hung", {"node0": Script(["[0|0]:step 1"], hang=True)}, dict(nodes=1)))
    node0 = client.containers_by_name["ddp-hung-node0-1"]
    wait_until(lambda: bool(node0.log))
    node0.log[:] = [(time.time() - 150, "[0|0]:step 1")]  # quiet for 150 s, past the default 120 s
    capsys.readouterr()  # (what the run's start said)
    follower, out, codes = following(client, "hung")
    note = ("[orchestrate] run hung: no worker has printed for 2m; where every rank is (waiting or computing):"
            " python -m orchestrate stacks hung")
    said = []
    wait_until(lambda: said.append(capsys.readouterr().err) or note in "".join(said))
    node0.kill()
    follower.join(10)
    assert not follower.is_alive() and codes == [0]
    said.append(capsys.readouterr().err)
    assert "".join(said).splitlines() == [note]  # once, whatever the looks every 0.5 s
    assert printed_lines(out) == ["[node0/rank0] step 1"]


def test_the_quiet_notice_looks_as_often_as_a_spell_could_reach_diagnose_after_and_says_each_spell_once(make_run):
    from orchestrate.supervise.worker_quiet import QuietNotice

    client = FakeDockerClient()
    started_runs(make_run, client, ("spells", {"node0": Script(["[0|0]:step 1"], hang=True)},
                                    dict(nodes=1, hang_diagnose_after=100)))
    node0 = client.containers_by_name["ddp-spells-node0-1"]
    wait_until(lambda: bool(node0.log))
    last = 1796500800.0
    node0.log[:] = [(last, "[0|0]:step 1")]
    clock, engine, said, looks = [0.0], [last + 60], [], []

    def engine_now() -> float:
        looks.append(clock[0])
        return engine[0]
    notice = QuietNotice(find_run(client, "spells"), engine_now, said.append, clock=lambda: clock[0])

    def at(seconds: float, engine_s: float) -> None:
        clock[0], engine[0] = seconds, engine_s
        notice()
    at(0, last + 60)  # quiet 60 s: nothing yet, the next look in 40 s
    at(39, last + 200)  # not looked at before then
    assert looks == [0] and said == []
    at(40, last + 100)  # quiet for exactly its --hang-diagnose-after
    assert said == ["run spells: no worker has printed for 1m; where every rank is (waiting or computing):"
                    " python -m orchestrate stacks spells"]
    at(140, last + 200)  # the same spell: said once
    assert looks == [0, 40, 140] and len(said) == 1
    node0.log.append((last + 250, "[0|0]:step 2"))  # a new spell begins
    at(300, last + 270)
    at(379, last + 400)
    assert looks[-1] == 300 and len(said) == 1  # 20 s of it at 300: looked at again 80 s later
    at(380, last + 350)
    assert looks[-1] == 380 and said[-1].startswith("run spells: no worker has printed for 1m;") and len(said) == 2


def test_logs_follow_goes_on_with_a_node_restarted_while_another_runs(make_run, capsys):
    import threading

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:zero"], hang=True),
                                          "node1": Script(["[1|0]:one"], hang=True)}, dict(nodes=2)))
    node0, node1 = (client.containers_by_name[f"ddp-r-node{i}-1"] for i in range(2))
    wait_until(lambda: bool(node0.log and node1.log))
    capsys.readouterr()
    follower, out, codes = following(client, "r")
    wait_until(lambda: "one" in out.getvalue() and "zero" in out.getvalue())
    ticking = threading.Event()

    def tick() -> None:  # node0 prints all along, faster than a node whose log ended is looked at
        while not ticking.wait(0.05):
            node0.write("[0|0]:tick")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    node1.kill()  # a restart (a preempted node's return, an elastic recovery) while node0 runs on
    client.script("node1", Script(["[1|0]:one again"], hang=True))
    node1.start()
    wait_until(lambda: "one again" in out.getvalue())
    ticking.set()
    ticker.join(5)
    node0.write("[0|0]:zero goes on")
    wait_until(lambda: "zero goes on" in out.getvalue())
    assert follower.is_alive()
    node0.kill()
    node1.kill()
    follower.join(10)
    assert not follower.is_alive() and codes == [0]
    assert sorted(ln for ln in printed_lines(out) if not ln.endswith("tick")) == [
        "[node0/rank0] zero", "[node0/rank0] zero goes on", "[node1/rank1] one", "[node1/rank1] one again"]
    assert capsys.readouterr().err == "[orchestrate] node1 started again: its new run follows\n"


def test_logs_follow_waits_through_every_node_down_while_the_launcher_runs_and_shows_each_line_once(make_run):
    """Every node down at once (a restart of the whole job) ends no follow while the run's launcher
    runs and has not said how the run ended; a node started again is followed from where its
    lines were read, two lines of one time included, and the run's end then ends the follow."""
    from orchestrate.engine.labels import LAUNCHER_LABEL
    from orchestrate.supervise.logs import LOOK_AGAIN_S

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:zero"], hang=True), "node1": Script(hang=True)},
                                    dict(nodes=2)))
    node0, node1 = (client.containers_by_name[f"ddp-r-node{i}-1"] for i in range(2))
    for node in (node0, node1):  # a run whose launcher stays: this process
        node.labels[LAUNCHER_LABEL] = launcher_identity()
    stamp = float(int(time.time()))  # (a whole second: the time the fake prints reads back as the same float)
    with node1.changed:  # two lines the engine stamped alike
        node1.log += [(stamp, "[1|0]:one"), (stamp, "[1|0]:two")]
        node1.changed.notify_all()
    wait_until(lambda: bool(node0.log))
    follower, out, codes = following(client, "r")
    wait_until(lambda: "two" in out.getvalue() and "zero" in out.getvalue())
    node0.kill()
    node1.kill()
    follower.join(4 * LOOK_AGAIN_S)  # every log ended, and looked at again and again
    assert follower.is_alive()  # the launcher may start them again
    client.script("node1", Script(["[1|0]:three"], hang=True))
    node1.start()
    wait_until(lambda: "three" in out.getvalue())
    record_event(list_runs(client)[0].run_dir, "run-ended", exit_code=0)
    node1.kill()
    follower.join(10)
    assert not follower.is_alive() and codes == [0]
    assert [ln for ln in printed_lines(out) if "node1" in ln] == [
        "[node1/rank1] one", "[node1/rank1] two", "[node1/rank1] three"]


def test_a_run_may_start_its_nodes_again_while_its_launcher_runs_and_has_not_said_how_it_ended(tmp_path):
    from orchestrate.engine.labels import LAUNCHER_LABEL, RUN_DIR_LABEL
    from orchestrate.supervise.logs import may_start_nodes_again

    def run(launcher: str) -> RunInfo:
        return RunInfo("r", "ddp-r", (), {LAUNCHER_LABEL: launcher, RUN_DIR_LABEL: str(tmp_path)}, None)

    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait(10)
    ours = may_start_nodes_again(run(launcher_identity()))
    assert ours()  # this process runs, and has not said how the run ended
    for launcher in ("", f"{socket.gethostname()}:{gone.pid}:1", f"another-host:{os.getpid()}:1"):
        assert not may_start_nodes_again(run(launcher))(), launcher  # detached, gone, or not to be seen from here
    record_event(tmp_path, "run-ended", exit_code=1)
    assert not ours()


def test_logs_of_a_rank_the_run_does_not_have_names_the_runs_whole_range(make_run, capsys):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("q", {"node0": Script(["[0|0]:a"]), "node1": Script(["[2|0]:b"])},
                                    dict(nodes=2, nproc_per_node=2)))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    capsys.readouterr()
    assert main(client=client, argv=["logs", "q", "--rank", "9"], out=io.StringIO()) == 2
    assert capsys.readouterr().err == "error: --rank 9: run q has no such rank (ranks 0-3)\n"


def test_logs_rank_of_an_elastic_run_says_the_rank_is_not_checked(make_run, capsys):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("e", {"node0": Script(["[0|0]:a"]), "node1": Script(["[1|0]:b"])},
                                    dict(nodes=2, rdzv="c10d")))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    capsys.readouterr()
    out = io.StringIO()
    assert main(client=client, argv=["logs", "e", "--rank", "1"], out=out) == 0
    assert printed_lines(out) == ["[node1/rank1] b"]
    assert capsys.readouterr().err == ("[orchestrate] run e is elastic: its rendezvous gives the ranks out, so --rank 1"
                                       " is not checked against it (a rank that never ran shows no line)\n")


def test_attach_after_the_end_reports_what_the_run_did(make_run):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:hello"]), "node1": Script(["[1|0]:hello"])},
                                    dict(nodes=2)))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    out = io.StringIO()
    assert main(client=client, argv=["attach", "r"], out=out) == 0
    text = out.getvalue()
    assert "[node1/rank1] hello" in " ".join(text.split())
    assert "SUCCEEDED: all 2 nodes exited 0" in text
    assert "remove it with: python -m orchestrate down r" in text


def test_attaches_after_the_end_record_each_event_once_at_the_engines_time_and_a_watcher_records_none(make_run):
    """The first attach to a detached run that ended unfollowed writes its record: its nodes'
    exits at the engine's time of them, its ranks' starts at their first lines' (not when it read
    the log, after the exits); a later attach only watches, and writes nothing."""
    from orchestrate.cli.main import main
    from orchestrate.outcome.events import read_events

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:hello"], delay_s=0.3),
                                          "node1": Script(["[1|0]:hello"], delay_s=0.3, exit_code=1)}, dict(nodes=2)))
    wait_until(lambda: list_runs(client)[0].state.ended)
    time.sleep(0.5)  # a judge that comes later: its reading time is apart from the run's own times
    assert main(client=client, argv=["attach", "r"], out=io.StringIO()) == 1
    judged = read_events(make_run("r").run_dir)
    kinds = [e["event"] for e in judged]
    assert sorted(k for k in kinds if k in ("node-exited", "rank-started", "node-running", "node-failed")) == sorted(
        ["node-exited"] * 2 + ["rank-started"] * 2 + ["node-running"] * 2 + ["node-failed"]), kinds
    at = {(e["event"], e.get("node")): e["time"] for e in judged}
    ended = [e["time"] for e in judged if e["event"] == "run-ended"][0]
    for node in ("node0", "node1"):
        assert at[("rank-started", node)] <= at[("node-exited", node)] < ended - 0.3, judged
    assert at[("node-failed", "node1")] == at[("node-exited", "node1")]  # its end, not the judge's reading of it
    assert main(client=client, argv=["attach", "r"], out=io.StringIO()) == 1
    assert read_events(make_run("r").run_dir) == judged


@pytest.mark.timeout(60)
def test_attach_to_a_run_its_launcher_follows_leaves_its_removal_to_the_launcher(make_run):
    """A foreground run (its launcher, here this process, tears it down): attach reports its end
    but does not tell the user to remove it."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("fg", {"node0": Script(["[0|0]:hello"])}, dict(nodes=1, detach=False)))
    wait_until(lambda: list_runs(client)[0].nodes[0].status == "exited")
    out = io.StringIO()
    assert main(client=client, argv=["attach", "fg"], out=out) == 0
    assert out.getvalue().splitlines()[-1] == "SUCCEEDED: its 1 node exited 0", out.getvalue()
    assert "remove it with" not in out.getvalue()


def test_an_engine_error_is_one_line_and_exit_2(capsys):
    import docker.errors

    from orchestrate.cli.main import main

    client = FakeDockerClient()
    client.failures["containers.list"] = docker.errors.APIError("500 Server Error", explanation="daemon is busy")
    assert main(client=client, argv=["ps"], out=io.StringIO()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: cannot list runs: daemon is busy"]


def test_a_fault_done_from_another_terminal_is_named_by_whoever_follows_the_run(make_run):
    """`fault r kill:node1` notes what it did in the run's directory; `attach` (here after the
    end, so it reads the notes whole) says it, and the summary blames the fault, not a bare exit
    code 137. A fault the engine refused is said by `fault` alone, never counted as one asked for."""
    import docker.errors

    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:training"], hang=True),
                                          "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    client.failures["pause"] = docker.errors.APIError("the engine refused")
    assert main(client=client, argv=["fault", "r", "pause:node0"], out=io.StringIO()) == 2
    del client.failures["pause"]
    out = io.StringIO()
    assert main(client=client, argv=["fault", "r", "kill:node1"], out=out) == 0
    assert "injected kill into node1 of run r" in out.getvalue()
    wait_until(lambda: list_runs(client)[0].nodes[1].status == "exited")
    node0 = client.containers_by_name["ddp-r-node0-1"]
    node0.killed.set()
    node0.exit(1)  # its peer lost, as gloo ends it

    out = io.StringIO()
    assert main(client=client, argv=["attach", "r"], out=out) == 1
    text = out.getvalue()
    assert "fault injected by `python -m orchestrate fault`: kill:node1" in text
    assert "fault from `python -m orchestrate fault` not done: pause:node0: the engine refused" in text
    assert "FAILED: node1 failed (injected fault kill:node1)" in text
    assert "never fired" not in text and "fault not fired" not in text
    from orchestrate.outcome.events import read_events

    [event] = [e for e in read_events(make_run("r").run_dir) if e["event"] == "fault"]
    assert (event["spec"], event["node"], event["by"]) == ("kill:node1", "node1", "fault")


def test_fault_says_once_when_the_runs_summary_cannot_name_what_it_did(make_run):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)},
                                             dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    (make_run("r").run_dir / "live-faults.jsonl").mkdir()  # the notes cannot be appended
    out = io.StringIO()
    assert main(client=client, argv=["fault", "r", "pause:node0@t=0..0.1", "kill:node1"], out=out) == 0
    said = out.getvalue()
    assert said.count("run r's directory cannot be written from here: its summary will not name the faults") == 1
    assert "injected kill into node1 of run r" in said


def test_a_refused_repeat_of_a_live_fault_leaves_the_first_standing(make_run):
    """`fault r pause:node0` done, then the same refused (node0 is paused already): the first
    is still the run's fault, and the node that then dies is blamed on it."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    assert main(client=client, argv=["fault", "r", "pause:node0"], out=io.StringIO()) == 0
    assert main(client=client, argv=["fault", "r", "pause:node0"], out=io.StringIO()) == 2  # already paused
    for name in ("ddp-r-node0-1", "ddp-r-node1-1"):
        client.containers_by_name[name].kill()  # SIGKILL reaches a paused container too
    out = io.StringIO()
    assert main(client=client, argv=["attach", "r"], out=out) == 1
    text = out.getvalue()
    assert "fault from `python -m orchestrate fault` not done: pause:node0: Container" in text
    assert "FAILED: node0 stopped answering" not in text
    assert "(injected fault pause:node0)" in text.split("summary ===")[1], text[-1500:]


def test_a_store_killed_by_fault_run_is_named_with_it_by_the_runs_summary(make_run):
    """`fault r kill:store` kills the run's own store container, no node; `attach` then names
    that fault as what ended the job."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    store_gone = lambda: client.containers_by_name["ddp-r-rdzv-store-1"].status == "exited"  # noqa: E731
    lost = "RendezvousConnectionError: The connection to the C10d store has failed."
    nodes = {f"node{i}": Script([f"[{i}|0]:step 1"], exit_code=1, after=[f"[{i}|0]:{lost}"], after_when=store_gone)
             for i in range(2)}
    started_runs(make_run, client, ("r", {"rdzv-store": Script(["serving"], hang=True), **nodes},
                                    dict(nodes=2, rdzv="c10d", rdzv_store="container")))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    out = io.StringIO()
    assert main(client=client, argv=["fault", "r", "kill:store"], out=out) == 0, out.getvalue()
    assert "injected kill into the rendezvous store of run r" in out.getvalue()
    out = io.StringIO()
    assert main(client=client, argv=["attach", "r"], out=out) == 1
    said = ("FAILED: the run's rendezvous store (its container rdzv-store) died (exit code 137), killed by injected"
            " fault kill:store: every node's torchrun agent lost the rendezvous; then node")
    summary = out.getvalue().split("summary ===")[1]
    assert said in summary, summary
    out = io.StringIO()  # attached again, to the run that ended: it only watches, and says the same
    assert main(client=client, argv=["attach", "r"], out=out) == 1
    assert "(failed, watching)" in out.getvalue() and said in out.getvalue().split("summary ===")[1], out.getvalue()


def test_a_live_fault_the_node_refuses_itself_is_noted_as_not_done(make_run, monkeypatch):
    """A partition a node refuses in its own words (an EngineError, not the engine's): its note
    says refused, so the launcher never blames it. (A run whose nodes lack NET_ADMIN is refused
    before that: the test after this one; this run's --link gives them NET_ADMIN.)"""
    from orchestrate.cli.main import main
    from orchestrate.errors import EngineError
    from orchestrate.faults.live_notes import LiveFaultReader

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)},
                                             dict(nodes=2, link="rate=1gbit")))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))

    def refuse(*args, **kwargs):
        raise EngineError("ip route: RTNETLINK answers: File exists")

    monkeypatch.setattr("orchestrate.faults.live.do_fault", refuse)
    assert main(client=client, argv=["fault", "r", "partition:node0|node1"], out=io.StringIO()) == 2
    notes = LiveFaultReader(make_run("r").run_dir).take()
    assert [(n.phase, n.error) for n in notes] == [
        ("doing", ""), ("failed", "ip route: RTNETLINK answers: File exists")]
    assert notes[0].id == notes[1].id


def test_fault_run_refuses_a_lossy_link_in_a_run_started_without_net_admin_in_one_line(make_run, capsys):
    """A note (session 112) left alone: `fault RUN lossy:...` on a run started without --link said
    iptables' refusal ("Could not fetch rule set generation id: Permission denied (you must be
    root)") under the command it ran in the node. It does nothing, and says why and what to do in
    one line, exit 2."""
    from orchestrate.cli.main import main
    from orchestrate.faults.live_notes import LiveFaultReader

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    capsys.readouterr()
    assert main(client=client, argv=["fault", "r", "lossy:node1,p=30%@t=0..5"], out=io.StringIO()) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: lossy:node1,p=30%@t=0..5: run r's nodes lack NET_ADMIN, which a lossy fault needs (iptables as root"
        " in node1); a run's nodes have it only when it starts with --link or a degrade, lossy or partition --fault:"
        " start it again with --link SPEC (e.g. --link 100gbe), or give this fault to run --fault (not with"
        " --detach)"]
    assert not [c for c in client.calls if c[0] == "exec_create"]
    assert LiveFaultReader(make_run("r").run_dir).take() == []


def test_a_live_fault_from_before_a_nodes_latest_start_is_not_blamed_on_it(make_run):
    """`attach` reads every note from the first: a kill of node1's earlier container (an elastic
    run restarted it since) is said, but node1's own failure now is not blamed on it."""
    import json

    from orchestrate.cli.main import main
    from orchestrate.plan.layout import LIVE_FAULTS_FILE

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    earlier = time.time() - 60
    with open(make_run("r").run_dir / LIVE_FAULTS_FILE, "a") as notes:
        for phase in ("doing", "done"):
            notes.write(json.dumps({"id": "x1", "time": earlier, "spec": "kill:node1", "node": "node1",
                                    "phase": phase}) + "\n")
    for name, code in (("ddp-r-node1-1", 1), ("ddp-r-node0-1", 1)):
        container = client.containers_by_name[name]
        container.killed.set()
        container.exit(code)
    out = io.StringIO()
    assert main(client=client, argv=["attach", "r"], out=out) == 1
    text = out.getvalue()
    assert "fault injected by `python -m orchestrate fault`: kill:node1" in text
    assert "injected fault kill:node1" not in text.split("summary ===")[1], text[-1500:]


def test_ps_says_when_there_is_no_run_and_shows_each_runs_nodes_state_mode_age_and_workdir(make_run, tmp_path):
    import re

    from orchestrate.cli.main import main

    client = FakeDockerClient()
    for argv, said in ((["ps"], "no runs\n"), (["ps", "--state", "running"], "no running runs\n")):
        out = io.StringIO()
        assert main(argv, out=out, client=client) == 0 and out.getvalue() == said
    started_runs(make_run, client, ("pair", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)),
                 ("solo", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    client.script("node0", Script(hang=True))
    make_run("fg", client=client, nodes=1).start()  # a foreground run: its launcher is this process
    wait_until(lambda: {r.run_id: r.state for r in list_runs(client)}["solo"] is RunState.SUCCEEDED)
    client.containers_by_name["ddp-pair-node1-1"].remove(force=True)  # a node gone: 1 of its 2 nodes is left
    out = io.StringIO()
    assert main(["ps"], out=out, client=client) == 0
    header, rule, *rows = [line.split() for line in out.getvalue().splitlines()]
    assert header == ["RUN", "ID", "NODES", "STATE", "MODE", "AGE", "QUIET", "WORKDIR"] and set("".join(rule)) == {"-"}
    by_id = {row[0]: row for row in rows}
    assert sorted(by_id) == ["fg", "pair", "solo"]
    assert [by_id[run_id][1:4] for run_id in ("pair", "solo", "fg")] == [
        ["1/2", "running", "detached"], ["1", "succeeded", "detached"], ["1", "running", "foreground"]]
    assert all(re.fullmatch(r"\d+s", row[4]) and row[6] == str(tmp_path) for row in rows), rows
    # quiet since their start (no worker printed); an ended run has no quiet time
    assert [by_id[run_id][5] for run_id in ("pair", "fg")] == ["0s", "0s"] and by_id["solo"][5] == "-"


def test_ps_lists_how_long_a_running_run_has_been_quiet_and_names_one_quiet_past_its_diagnose_after(make_run):
    from datetime import datetime, timezone

    from orchestrate.engine.labels import CREATED_LABEL, RUN_ID_LABEL, SCHEDULER_LABEL
    """QUIET runs from a worker's latest line (torch's own log lines do not count); a run quiet
    for its --hang-diagnose-after or longer is named under the list with the command that shows
    where its ranks wait; one that asked never to be diagnosed (0), or that printed a moment
    ago, is not."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client,
                 ("stuck", {f"node{n}": Script([f"[{n}|0]:step 1"], hang=True) for n in range(2)}, dict(nodes=2)),
                 ("busy", {"node0": Script(["[0|0]:step 1"], hang=True)}, dict(nodes=1, hang_diagnose_after=600)),
                 ("never", {"node0": Script(["[0|0]:step 1"], hang=True)}, dict(nodes=1, hang_diagnose_after=0)))
    wait_until(lambda: all(len(c.log) == 1 for c in client.containers_by_name.values() if "node" in c.name))
    now = time.time()
    slurm = client.running("ddp-slurm-node0-1", {RUN_ID_LABEL: "slurm", SCHEDULER_LABEL: "slurm", CREATED_LABEL:
                                                 datetime.fromtimestamp(now - 400, timezone.utc).isoformat()})
    slurm.log[:] = [(now - 300, "[0|0]:step 1")]  # a Slurm job's workers print through Slurm: no quiet time
    for name in ("ddp-stuck-node0-1", "ddp-busy-node0-1", "ddp-never-node0-1"):
        client.containers_by_name[name].log[:] = [(now - 300, "[0|0]:step 1")]
    client.containers_by_name["ddp-stuck-node1-1"].log[:] = [
        (now - 200, "[1|0]:step 1"), (now - 10, "W1205 20:35:02.738000 8 torch/distributed/c10d.py:1] a warning")]
    out = io.StringIO()
    assert main(["ps"], out=out, client=client) == 0
    lines = out.getvalue().splitlines()
    quiet = {line.split()[0]: line.split()[5] for line in lines[2:6]}
    assert quiet == {"stuck": "3m", "busy": "5m", "never": "5m", "slurm": "-"}, lines  # node1's line 200 s ago, not its warning
    assert lines[6:] == ["run stuck: no worker has printed for 3m; where every rank is (waiting or computing):"
                         " python -m orchestrate stacks stuck"], lines
    client.containers_by_name["ddp-stuck-node0-1"].log.append((time.time(), "[0|0]:step 2"))
    out = io.StringIO()
    assert main(["ps"], out=out, client=client) == 0
    assert {line.split()[0]: line.split()[5] for line in out.getvalue().splitlines()[2:]} == {
        "stuck": "0s", "busy": "5m", "never": "5m", "slurm": "-"}
    assert len(out.getvalue().splitlines()) == 6  # no run named: "busy" is under its 600 s
    out = io.StringIO()
    assert main(["ps", "-q"], out=out, client=client) == 0 and sorted(out.getvalue().split()) == ["busy", "never", "slurm", "stuck"]

    # the engine's clock, not the host's, against its stamps: a remote engine an hour ahead
    client.clock_offset_s = 3600.0
    for container in client.containers_by_name.values():
        container.log[:] = [(stamp + 3600, text) for stamp, text in container.log]
    out = io.StringIO()
    assert main(["ps"], out=out, client=client) == 0
    assert {line.split()[0]: line.split()[5] for line in out.getvalue().splitlines()[2:6]} == {
        "stuck": "0s", "busy": "5m", "never": "5m", "slurm": "-"}
    # a run whose logs the engine cannot give (it went while listed) has no quiet time, and no error
    client.failures["logs"] = __import__("docker").errors.NotFound("No such container")
    out = io.StringIO()
    assert main(["ps"], out=out, client=client) == 0
    assert {line.split()[5] for line in out.getvalue().splitlines()[2:]} == {"-"}



def test_ps_names_a_run_quiet_for_exactly_its_diagnose_after(make_run, monkeypatch):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("edge", {"node0": Script(["[0|0]:step 1"], hang=True)},
                                    dict(nodes=1, hang_diagnose_after=120)),
                 ("under", {"node0": Script(["[0|0]:step 1"], hang=True)}, dict(nodes=1, hang_diagnose_after=121)))
    wait_until(lambda: all(len(c.log) == 1 for c in client.containers_by_name.values()))
    now = 1796500800.0
    monkeypatch.setattr("orchestrate.cli.ps.engine_now", lambda engine: now)
    for container in client.containers_by_name.values():
        container.log[:] = [(now - 120, "[0|0]:step 1")]
    out = io.StringIO()
    assert main(["ps"], out=out, client=client) == 0
    assert out.getvalue().splitlines()[4:] == ["run edge: no worker has printed for 2m; where every rank is (waiting or"
                                               " computing): python -m orchestrate stacks edge"], out.getvalue()

def test_ps_names_no_quiet_run_that_stacks_would_refuse(make_run):
    """A run that names no directory of its own (started by another tool) is refused by
    ``stacks``: ps lists its quiet time but names no command that fails."""
    from orchestrate.cli.main import main
    from orchestrate.engine.labels import RUN_DIR_LABEL

    client = FakeDockerClient()
    started_runs(make_run, client, ("bare", {"node0": Script(["[0|0]:step 1"], hang=True)}, dict(nodes=1)))
    wait_until(lambda: len(client.containers_by_name["ddp-bare-node0-1"].log) == 1)
    container = client.containers_by_name["ddp-bare-node0-1"]
    container.labels[RUN_DIR_LABEL] = ""
    container.log[:] = [(time.time() - 300, "[0|0]:step 1")]
    out = io.StringIO()
    assert main(["ps"], out=out, client=client) == 0
    lines = out.getvalue().splitlines()
    assert lines[2].split()[5] == "5m" and len(lines) == 3, lines


def test_stop_of_a_foreground_run_leaves_the_end_to_its_launcher_and_takes_the_timeout_given(make_run, monkeypatch):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    client.script("node0", Script(hang=True))
    client.script("node1", Script(hang=True))
    plan = make_run("fg", client=client, nodes=2, stop_grace=30).start()  # its launcher: this process
    graces = []

    def stop_run_recorded(run, timeout_s, by, say, **hooks):
        graces.append(timeout_s)
        return stop_run(run, timeout_s, by, say, **hooks)
    monkeypatch.setattr("orchestrate.launch.stop.stop_run", stop_run_recorded)
    out = io.StringIO()
    assert main(["stop", "fg", "--timeout", "1"], out=out, client=client) == 0
    assert graces == [1]  # --timeout, not the run's own 30 s
    assert out.getvalue() == (f"stopped node0, node1 of run fg; its launcher says how it ended (logs stay in"
                              f" {plan.run_dir})\n")


def test_prune_removes_the_ended_runs_whatever_order_and_counts_those_still_running(make_run):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    plans = started_runs(make_run, client, ("b-done", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)),
                 ("c-going", {"node0": Script(hang=True)}, dict(nodes=1)),
                 ("d-going", {"node0": Script(hang=True)}, dict(nodes=1)))
    wait_until(lambda: {r.run_id: r.state for r in list_runs(client)}["b-done"] is RunState.SUCCEEDED)
    assert [r.run_id for r in list_runs(client)][-1] == "b-done"  # listed after both running ones
    out = io.StringIO()
    assert main(["prune"], out=out, client=client) == 0
    assert out.getvalue().splitlines() == [
        "run b-done: no one followed it to its end; writing its node logs, summary and report page from the engine"
        " first",
        "removed run b-done (succeeded): container ddp-b-done-node0-1, network ddp-b-done_ddp, volume"
        " ddp-b-done_shared",
        "pruned 1 run(s) in the engine (2 still running)"]
    assert sorted(r.run_id for r in list_runs(client)) == ["c-going", "d-going"]
    # what only the engine had is kept: the node's lines, and how the run ended
    done_dir = plans[0].run_dir
    assert (done_dir / "node0.log").read_text().splitlines() == ["[node0/rank0] hi"]
    assert launcher_exit_code(read_events(done_dir)) == 0 and json.loads((done_dir / "outcome.json").read_text())["succeeded"]


def test_down_stops_a_live_run_first_says_what_needed_sigkill_and_what_it_removed(make_run, monkeypatch):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    monkeypatch.setattr("orchestrate.launch.stop.TEARDOWN_POLLS", 2)  # its launcher (this process) never tears down
    [detached] = started_runs(make_run, client, ("away", {"node0": Script(hang=True, ignore_sigterm=True)},
                                                 dict(nodes=1, stop_grace=1)))
    out = io.StringIO()
    assert main(["down", "away"], out=out, client=client) == 0
    assert out.getvalue().splitlines() == [
        "node0 did not stop within its grace after SIGTERM, so it got SIGKILL",  # (a grace of 1 s lists nothing)
        "stopped node0 of run away first (SIGTERM, SIGKILL after 1 s)",
        "run away: no one followed it to its end; writing its node logs, summary and report page from the engine"
        " first",
        "removed run away: container ddp-away-node0-1, network ddp-away_ddp, volume ddp-away_shared",
        f"its logs stay in {detached.run_dir}"]
    outcome = json.loads((detached.run_dir / "outcome.json").read_text())
    assert outcome["stopped_by"] == "python -m orchestrate down" and outcome["exit_code"] == 143, outcome
    assert (detached.run_dir / "node0.log").exists()
    client.script("node0", Script(hang=True))
    foreground = make_run("here", client=client, nodes=1, stop_grace=1).start()
    out = io.StringIO()
    assert main(["down", "here"], out=out, client=client) == 0
    assert out.getvalue().splitlines() == [
        "stopped node0 of run here first (SIGTERM, SIGKILL after 1 s)",
        "its launcher says how it ended and tears it down",
        "its launcher did not tear it down within 1 s: removing it here",
        "removed run here: container ddp-here-node0-1, network ddp-here_ddp, volume ddp-here_shared",
        f"its logs stay in {foreground.run_dir}"]
    assert list_runs(client) == []


@pytest.mark.timeout(60)  # an attach that never ended, or a Ctrl-C it missed, would follow a node that never ends
@pytest.mark.parametrize("verbose", [False, True])
def test_attach_follows_a_detached_run_to_its_summary_and_verbose_shows_torchruns_records(make_run, when, verbose):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    agent_record = "I1204 10:00:00.000000 321 api.py:890] rendezvous round 1"
    started_runs(make_run, client, ("away", {"node0": Script([agent_record, "[0|0]:hi"], hang=True)}, dict(nodes=1)))
    out = io.StringIO()
    when(lambda: "hi" in out.getvalue(), lambda: client.containers_by_name["ddp-away-node0-1"].exit(0))
    assert main(["-v"] * verbose + ["attach", "away"], out=out, client=client) == 0
    lines = out.getvalue().splitlines()
    assert (agent_record in out.getvalue()) is verbose and "[node0/rank0]  hi" in lines
    assert lines[-2:] == ["SUCCEEDED: its 1 node exited 0", "remove it with: python -m orchestrate down away"]


@pytest.mark.timeout(60)
def test_an_attachs_hang_watchdog_counts_from_the_runs_last_output_not_from_the_attach(make_run, when, monkeypatch):
    """`ps` said QUIET 48s, and the attach then waited another 20 s and said `no progress for 20 s`
    (trial of 2026-12-07): the lines and progress records read again from the start are the run's
    history, and its quiet counts from the last of them, so that --hang-timeout means what it says."""
    from orchestrate.cli.main import main
    from orchestrate.supervise import supervisor

    watches = []

    class SeenHangWatch(supervisor.HangWatch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            watches.append(self)
    monkeypatch.setattr(supervisor, "HangWatch", SeenHangWatch)
    polls = []  # each poll of the attach's progress watch: how many records it had read by its end

    class SeenProgressWatch(supervisor.ProgressWatch):
        def poll(self, *args, **kwargs):
            super().poll(*args, **kwargs)
            polls.append(self.records)
    monkeypatch.setattr(supervisor, "ProgressWatch", SeenProgressWatch)
    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("away", {"node0": Script(["[0|0]:step 1"], hang=True)},
                                             dict(nodes=1, hang_diagnose_after=20, hang_timeout=40)))
    node0 = client.containers_by_name["ddp-away-node0-1"]
    wait_until(lambda: bool(node0.log))
    node0.log[:] = [(time.time() - 48, "[0|0]:step 1")]
    (plan.run_dir / "progress").mkdir(exist_ok=True)
    (plan.run_dir / "progress" / "rank0.jsonl").write_text(json.dumps(
        {"rank": 0, "time": time.time() - 50, "step": 1, "attempt": "1-1", "node": "node0"}) + "\n")
    out, quiet = io.StringIO(), []

    def quiet_once_the_history_is_read() -> None:
        wait_until(lambda: any(polls))  # the record read, then a whole tick after it (the watchdog told)
        read = len(polls)
        wait_until(lambda: len(polls) > read)
        quiet.append(time.monotonic() - watches[0].last_progress)
        node0.exit(0)
    when(lambda: "step 1" in out.getvalue() and watches, quiet_once_the_history_is_read)
    assert main(["attach", "away"], out=out, client=client) == 0
    assert 47 <= quiet[0] < 60, quiet  # 48 s before the attach, and the second it waited


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_ctrl_c_or_a_kill_detaches_attach_from_a_run_that_keeps_running(make_run, when, signum, code):
    import _thread

    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("away", {"node0": Script(["[0|0]:step 1"], hang=True)}, dict(nodes=1)))
    out = io.StringIO()
    # as the signal would, through the handler attach installed
    when(lambda: "step 1" in out.getvalue(), lambda: _thread.interrupt_main(signum))
    assert main(["attach", "away"], out=out, client=client) == code
    assert out.getvalue().endswith("\n[orchestrate] detached from run away; it keeps running (stop it with:"
                                   " python -m orchestrate stop away)\n")
    assert {r.run_id: r.state for r in list_runs(client)} == {"away": RunState.RUNNING}


@pytest.mark.timeout(60)
def test_attaches_that_detach_and_come_back_record_each_start_once_and_the_report_draws_one_bar(make_run, when):
    """Each attach to a detached run replays its log from the start: its nodes' and ranks'
    first lines, stamped as they were, are events the attach before it already recorded."""
    import _thread

    from orchestrate.cli.main import main
    from orchestrate.report.model import build_model, load_run

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:step 1"], hang=True),
                                                   "node1": Script(["[1|0]:step 1"], hang=True)}, dict(nodes=2)))
    for signum, code in [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)]:
        out = io.StringIO()
        when(lambda: "[node1/rank1]  step 1" in out.getvalue(), lambda: _thread.interrupt_main(signum))
        assert main(["attach", "r"], out=out, client=client) == code
        assert "detached from run r; it keeps running" in out.getvalue()
    out = io.StringIO()
    when(lambda: "[node1/rank1]  step 1" in out.getvalue(),
         lambda: [client.containers_by_name[f"ddp-r-node{n}-1"].exit(0) for n in (0, 1)])
    assert main(["attach", "r"], out=out, client=client) == 0
    starts = [(e["event"], e["node"], e.get("rank")) for e in read_events(plan.run_dir)
              if e["event"] in ("node-running", "rank-started")]
    assert sorted(starts, key=str) == [("node-running", "node0", None), ("node-running", "node1", None),
                                       ("rank-started", "node0", 0), ("rank-started", "node1", 1)], starts
    model = build_model(load_run(plan.run_dir))
    assert [p.name for p in model.lane("node0").phases].count("running") == 1, model.lane("node0").phases


@pytest.mark.timeout(60)
@pytest.mark.parametrize("replayed", [False, True], ids=["long-ago", "events-replayed"])
def test_an_attach_after_a_restart_marks_the_node_running_again_by_its_new_runs_first_line(make_run, when, replayed):
    """node0's container was restarted after an attach had recorded it running (the follower that
    restarted it detached before the new run's first line): the next attach reads the log from
    the start, and the old run's first line is no start of the new run (taken for one, it was the
    start recorded before, and the new run's was never recorded). An attach within a second of
    the restart replays the engine's events of it: the old run's die is no end of the new run
    (taken for one, node0 ended as failed 137 while it ran on)."""
    import _thread

    from orchestrate.cli.main import main

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:step 1"], hang=True)}, dict(nodes=1)))
    out = io.StringIO()

    def recorded_running() -> bool:  # (the line is shown before its starts are recorded: a CI under load cut between)
        return {"node-running", "rank-started"} <= {e["event"] for e in read_events(plan.run_dir)}
    when(lambda: "[node0/rank0]  step 1" in out.getvalue() and recorded_running(),
         lambda: _thread.interrupt_main(signal.SIGINT))
    assert main(["attach", "r"], out=out, client=client) == 130
    node0 = client.containers_by_name["ddp-r-node0-1"]
    client.script("node0", Script(["[0|0]:step 2"], hang=True))
    restarted = time.time()
    node0.restart(timeout=0)
    if not replayed:
        client.history.clear()  # long enough ago that the next attach's replay of the events (a second back) misses them
    out = io.StringIO()
    when(lambda: "[node0/rank0]  step 2" in out.getvalue(), lambda: node0.exit(0))
    assert main(["attach", "r"], out=out, client=client) == 0, out.getvalue()
    starts = [(e["event"], e.get("rank"), e["time"] > restarted) for e in read_events(plan.run_dir)
              if e["event"] in ("node-running", "rank-started")]
    assert sorted(starts, key=str) == [("node-running", None, False), ("node-running", None, True),
                                       ("rank-started", 0, False), ("rank-started", 0, True)], (starts, out.getvalue())


@pytest.mark.timeout(60)
def test_an_attach_records_no_exit_of_a_node_that_an_earlier_attach_saw_end(make_run, when):
    """node0 ended while an attach followed (its die event recorded it); the next attach finds
    it exited: the same exit of the same container, not recorded again."""
    import _thread

    from orchestrate.cli.main import main

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:step 1"], hang=True),
                                                   "node1": Script(["[1|0]:step 1"], hang=True)}, dict(nodes=2)))

    def exits() -> list[str]:
        return [e["node"] for e in read_events(plan.run_dir) if e["event"] == "node-exited"]

    out = io.StringIO()
    when(lambda: "[node1/rank1]  step 1" in out.getvalue(), lambda: client.containers_by_name["ddp-r-node0-1"].exit(0))
    when(lambda: exits() == ["node0"], lambda: _thread.interrupt_main(signal.SIGINT))
    assert main(["attach", "r"], out=out, client=client) == 130
    out = io.StringIO()
    when(lambda: "[node1/rank1]  step 1" in out.getvalue(), lambda: client.containers_by_name["ddp-r-node1-1"].exit(0))
    assert main(["attach", "r"], out=out, client=client) == 0
    assert exits() == ["node0", "node1"]


@pytest.mark.timeout(60)
def test_an_attach_records_no_failure_of_a_node_that_an_earlier_attach_saw_fail(make_run, when):
    """node0 failed while an attach followed (node-failed recorded at that attach's time of its die
    event); the next attach finds it exited 1, at the engine's time of it: the same end, not
    recorded again as a second failure."""
    import _thread

    from orchestrate.cli.main import main

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:step 1"], hang=True),
                                                   "node1": Script(["[1|0]:step 1"], hang=True)}, dict(nodes=2)))

    def recorded(kind: str) -> list[str]:
        return [e["node"] for e in read_events(plan.run_dir) if e["event"] == kind]

    out = io.StringIO()
    when(lambda: "[node1/rank1]  step 1" in out.getvalue(), lambda: client.containers_by_name["ddp-r-node0-1"].exit(1))
    when(lambda: recorded("node-failed") == ["node0"], lambda: _thread.interrupt_main(signal.SIGINT))
    assert main(["attach", "r"], out=out, client=client) == 130
    assert main(["attach", "r"], out=io.StringIO(), client=client) == 1
    assert recorded("node-failed") == ["node0"] and recorded("node-exited").count("node0") == 1


@pytest.mark.timeout(60)
def test_an_attach_following_a_run_that_down_removes_says_it_was_stopped_by_down_and_does_not_advise_down(
        make_run, when):
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    started_runs(make_run, client, ("away", {"node0": Script(["[0|0]:step 1"], hang=True)},
                                    dict(nodes=1, stop_grace=1)))
    out, removed = io.StringIO(), io.StringIO()
    when(lambda: "step 1" in out.getvalue(), lambda: main(["down", "away"], out=removed, client=client))
    assert main(["attach", "away"], out=out, client=client) == 143
    assert "STOPPED by python -m orchestrate down (SIGTERM)" in out.getvalue(), out.getvalue()
    assert "remove it with" not in out.getvalue()
    wait_until(lambda: "removed run away" in removed.getvalue())


@pytest.mark.timeout(60)
def test_a_node_that_fault_run_killed_after_its_torn_write_is_blamed_on_the_fault_by_the_attach_that_judges_it(
        make_run):
    """Nobody followed the run: `fault RUN torn-write` killed the node after its worker cut the
    write; the first attach after the end names that fault as the node's failure, as a follower
    that killed it itself would."""
    import json

    from orchestrate.cli.main import main
    from orchestrate.faults.storage import armed
    from orchestrate.node.storage_faults import EVENTS_FILE
    from orchestrate.plan.layout import PROGRESS_SUBDIR

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    progress = make_run("r").run_dir / PROGRESS_SUBDIR
    out = io.StringIO()
    injecting = threading.Thread(target=main, kwargs=dict(client=client, argv=["fault", "r", "torn-write:node1"],
                                                          out=out))
    injecting.start()
    wait_until(lambda: armed(progress))
    [listed] = armed(progress)
    with open(progress / EVENTS_FILE, "a") as events:
        events.write(json.dumps({"kind": "torn-write", "key": listed["key"], "node": "node1", "file": "ckpt.pt",
                                 "rank": 1, "byte": 10, "size": 100}) + "\n")
    injecting.join(30)
    assert "killing node1" in out.getvalue(), out.getvalue()
    client.containers_by_name["ddp-r-node0-1"].exit(0)
    out = io.StringIO()
    assert main(client=client, argv=["attach", "r"], out=out) == 1
    summary = out.getvalue().split("summary ===")[1]
    assert "FAILED: node1 failed (injected fault torn-write:node1)" in summary, summary


@pytest.mark.timeout(60)
def test_an_attach_times_a_fault_from_another_terminal_from_when_the_nodes_came_up_not_from_its_own_start(make_run):
    """The run's nodes came up long before the attach: `fault RUN` done once it follows is said
    that far into the job, as the run's own launcher would have said it."""
    import json

    from orchestrate.cli.main import main
    from orchestrate.outcome.events import EVENTS_FILE, NODES_UP

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    events = make_run("r").run_dir / EVENTS_FILE
    kept = [json.loads(line) for line in events.read_text().splitlines()]
    [up] = [e for e in kept if e["event"] == NODES_UP]
    up["time"] -= 100.0  # its nodes came up 100 s ago
    events.write_text("".join(json.dumps(e) + "\n" for e in kept))
    out = io.StringIO()
    attaching = threading.Thread(target=main, kwargs=dict(client=client, argv=["attach", "r"], out=out))
    attaching.start()
    wait_until(lambda: "attached to run r" in out.getvalue())
    assert main(client=client, argv=["fault", "r", "pause:node1"], out=io.StringIO()) == 0
    wait_until(lambda: "fault injected by" in out.getvalue())
    for node in ("node0", "node1"):
        client.containers_by_name[f"ddp-r-{node}-1"].exit(0)
    attaching.join(30)
    said = next(line for line in out.getvalue().splitlines() if "fault injected by" in line)
    seconds = float(re.search(r"\(([\d.]+) s into the job", said).group(1))
    assert 100.0 <= seconds < 130.0, said


def test_the_first_follow_of_a_foreground_run_whose_launcher_died_records_its_nodes_ends(make_run):
    """No launcher is left to record how its nodes ended: the first to follow the run after (an
    attach, or down's quiet follow) writes those events, as a detached run's first judge does."""
    from orchestrate.cli.main import main
    from orchestrate.engine.labels import LAUNCHER_LABEL
    from orchestrate.outcome.events import read_events

    client = FakeDockerClient()
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    for node in ("node0", "node1"):
        client.script(node, Script(["[0|0]:hi"], hang=True))
    make_run("orphan", client=client, nodes=2, stop_grace=1).start()
    for container in client.containers_by_name.values():  # its launcher was killed: none follows the run now
        container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
        container.exit(0)
    main(["attach", "orphan"], out=io.StringIO(), client=client)
    exits = [e["node"] for e in read_events(make_run("orphan").run_dir) if e["event"] == "node-exited"]
    assert sorted(exits) == ["node0", "node1"]


def test_the_first_attach_of_an_orphaned_run_writes_its_outcome_and_a_second_writes_nothing_again(make_run):
    """Session 115 (h2): a foreground run whose launcher died, followed later by attach, had its
    events recorded but no outcome.json, so report and ps lacked how it ended; a second attach
    then recorded its nodes' ends again."""
    from orchestrate.cli.main import main
    from orchestrate.engine.labels import LAUNCHER_LABEL
    from orchestrate.outcome.record import OUTCOME_FILE

    client = FakeDockerClient()
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    client.script("node0", Script(["[0|0]:one"], exit_code=3))
    plan = make_run("orphan", client=client, nodes=1).start()
    for container in client.containers_by_name.values():  # its launcher was killed
        container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
    wait_until(lambda: not list_runs(client, "orphan")[0].live_nodes)
    assert main(["attach", "orphan"], out=io.StringIO(), client=client) == 1
    outcome = json.loads((plan.run_dir / OUTCOME_FILE).read_text())
    assert outcome["exit_code"] == 1 and outcome["failure"]["node"] == "node0"
    events = read_events(plan.run_dir)
    assert launcher_exit_code(events) == 1 and (plan.run_dir / "report.html").is_file()
    written = (plan.run_dir / OUTCOME_FILE).stat().st_mtime_ns
    assert main(["attach", "orphan"], out=io.StringIO(), client=client) == 1
    assert read_events(plan.run_dir) == events  # nothing recorded again: no node's end, no second run-ended
    assert (plan.run_dir / OUTCOME_FILE).stat().st_mtime_ns == written


def test_stop_of_a_foreground_run_whose_launcher_is_gone_keeps_its_logs_and_state(make_run):
    from orchestrate.cli.main import main
    from orchestrate.engine.labels import LAUNCHER_LABEL

    client = FakeDockerClient()
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    for node in ("node0", "node1"):
        client.script(node, Script(hang=True))
    make_run("orphan", client=client, nodes=2, stop_grace=1).start()
    for container in client.containers_by_name.values():  # its launcher was killed: none follows the run now
        container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
    out = io.StringIO()
    assert main(["stop", "orphan"], out=out, client=client) == 0
    assert out.getvalue() == ("stopped node0, node1 of run orphan; logs and state kept (remove it with: python -m"
                              " orchestrate down orphan)\n")


@pytest.mark.parametrize("met", [True, False])
def test_a_full_disk_from_another_terminal_fired_only_where_a_worker_met_it(make_run, met):
    """`fault r disk-full:node1` arms it: the run's summary lists it fired only where a worker's
    write met it (the events read from the first, though `attach` came after), else not fired,
    with why, and the run fails as for its own."""
    import json

    from orchestrate.cli.main import main
    from orchestrate.faults.storage import armed
    from orchestrate.node.storage_faults import EVENTS_FILE
    from orchestrate.plan.layout import PROGRESS_SUBDIR

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True), "node1": Script(hang=True)}, dict(nodes=2)))
    wait_until(lambda: all(n.status == "running" for n in list_runs(client)[0].nodes))
    out = io.StringIO()
    assert main(client=client, argv=["fault", "r", "disk-full:node1,path=*.pt"], out=out) == 0, out.getvalue()
    progress = make_run("r").run_dir / PROGRESS_SUBDIR
    [listed] = armed(progress)
    if met:
        with open(progress / EVENTS_FILE, "a") as events:
            events.write(json.dumps({"kind": "disk-full", "key": listed["key"], "node": "node1", "file": "ckpt.pt",
                                     "rank": 1}) + "\n")
    for name in ("ddp-r-node1-1", "ddp-r-node0-1"):
        client.containers_by_name[name].exit(0)
    import filelock

    from orchestrate.launch.compose_backend import SUPERVISOR_LOCK
    from orchestrate.outcome.events import read_events

    with filelock.FileLock(str(make_run("r").run_dir / SUPERVISOR_LOCK)):  # another attach judges it meanwhile
        assert main(client=client, argv=["attach", "r"], out=io.StringIO()) == (0 if met else 1)
    assert not [e for e in read_events(make_run("r").run_dir) if e["event"] == "run-ended"]  # that one's to write
    out = io.StringIO()
    code = main(client=client, argv=["attach", "r"], out=out)
    summary = out.getvalue().split("summary ===")[1]
    if met:
        assert code == 0, summary
        assert "rank 1's write to ckpt.pt failed: no space left on device (ENOSPC)" in summary
        assert "fault not fired" not in summary
    else:
        assert code == 1, summary
        # `attach` came later: timed from when the nodes came up, as the run's launcher would have
        assert re.search(r"fault not fired: disk-full:node1,path=\*\.pt did not fire: it was armed \d+\.\d s into the"
                         r" job, but no worker of node1 wrote a file it reaches after that", summary), summary
        assert "1 fault(s) asked for never fired: disk-full:node1,path=*.pt" in summary
    out = io.StringIO()  # `ps` names the run's state as its summary said it
    assert main(client=client, argv=["ps"], out=out) == 0
    [row] = [line.split() for line in out.getvalue().splitlines() if line.startswith("r ")]
    assert row[2] == ("succeeded" if met else "failed"), out.getvalue()
    # the first attach after its end judged it (no launcher had said how it ended); the next only watches
    assert main(client=client, argv=["attach", "r"], out=io.StringIO()) == code
    ended = [e for e in read_events(make_run("r").run_dir) if e["event"] == "run-ended"]
    assert [e["exit_code"] for e in ended] == [code]
    assert json.loads((make_run("r").run_dir / "outcome.json").read_text())["faults"][0]["fired"] is met


def test_an_attach_to_a_foreground_run_that_ended_leaves_its_record_to_its_launcher(make_run):
    """The run's launcher (here, this process, which has not finished it yet) says how it ended:
    an `attach` meanwhile only watches, and writes no end of its own."""
    from orchestrate.cli.main import main
    from orchestrate.outcome.events import read_events

    client = FakeDockerClient()
    started_runs(make_run, client, ("fg", {"node0": Script(["[0|0]:done"])}, dict(nodes=1, detach=False)))
    wait_until(lambda: list_runs(client)[0].state.ended)
    out = io.StringIO()
    assert main(client=client, argv=["attach", "fg"], out=out) == 0, out.getvalue()
    assert "watching" in out.getvalue()
    assert not [e for e in read_events(make_run("fg").run_dir) if e["event"] == "run-ended"]
    assert not (make_run("fg").run_dir / "outcome.json").exists()


def test_an_attach_to_a_run_with_no_directory_is_refused_writing_nothing_into_the_working_directory(
        make_run, tmp_path, monkeypatch):
    from orchestrate.cli.main import main
    from orchestrate.engine.labels import RUN_DIR_LABEL

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(["[0|0]:done"])}, dict(nodes=1)))
    wait_until(lambda: list_runs(client)[0].state.ended)
    client.containers_by_name["ddp-r-node0-1"].labels[RUN_DIR_LABEL] = ""  # no directory (an empty label)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(client=client, argv=["attach", "r"], out=io.StringIO()) == 2
    assert list(here.iterdir()) == []  # before 2026-12-04: its node log and events, here
    assert (f"run r names no directory of its own (an empty {RUN_DIR_LABEL} label: started by another tool or"
            " version), which is needed to attach to it; its output: python -m orchestrate logs r") in err.getvalue()


@pytest.mark.parametrize("command", [["stacks", "r", "--interval", "0"], ["debug", "r"]])
def test_stacks_and_debug_of_a_running_run_with_no_directory_are_refused_writing_nothing(make_run, tmp_path,
                                                                                         monkeypatch, command):
    from orchestrate.cli.main import main
    from orchestrate.engine.labels import RUN_DIR_LABEL

    client = FakeDockerClient()
    started_runs(make_run, client, ("r", {"node0": Script(hang=True)}, dict(nodes=1)))
    wait_until(lambda: list_runs(client)[0].state is RunState.RUNNING)
    client.containers_by_name["ddp-r-node0-1"].labels[RUN_DIR_LABEL] = ""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(client=client, argv=command, out=io.StringIO()) == 2
    assert list(here.iterdir()) == [] and "run r names no directory of its own" in err.getvalue()


def test_down_and_prune_keep_what_only_the_engine_had_and_leave_a_followed_runs_record_alone(make_run, monkeypatch):
    """A run nobody followed to its end is followed once before it goes (its node logs, its summary);
    one whose record an attach finished, one an attach follows now (waited for while it finishes),
    and an orphaned run whose nodes still run (a follow would wait for their end) are not."""
    from orchestrate.cli.main import main
    from orchestrate.engine.labels import LAUNCHER_LABEL
    from orchestrate.engine.locks import try_lock
    from orchestrate.launch.compose_backend import SUPERVISOR_LOCK

    client = FakeDockerClient()
    judged, finishing, followed = started_runs(
        make_run, client, ("judged", {"node0": Script(["[0|0]:first"])}, dict(nodes=1)),
        ("finishing", {"node0": Script(["[0|0]:second"])}, dict(nodes=1)),
        ("followed", {"node0": Script(["[0|0]:third"])}, dict(nodes=1)))
    wait_until(lambda: all(r.state is RunState.SUCCEEDED for r in list_runs(client)))
    assert main(["attach", "judged"], out=io.StringIO(), client=client) == 0  # the first attach records its end
    record = (judged.run_dir / "events.jsonl").read_text()
    out = io.StringIO()
    assert main(["down", "judged"], out=out, client=client) == 0
    assert (judged.run_dir / "events.jsonl").read_text() == record  # not judged twice

    # an attach in another terminal records the end while down waits for it: down records nothing more
    holding, release = threading.Event(), threading.Event()

    def attach_that_finishes() -> None:
        with try_lock(finishing.run_dir / SUPERVISOR_LOCK) as held:
            assert held
            holding.set()
            release.wait(timeout=10)
            record_event(finishing.run_dir, "run-ended", exit_code=0, succeeded=True)
    follower = threading.Thread(target=attach_that_finishes, daemon=True)
    follower.start()
    assert holding.wait(timeout=10)
    threading.Timer(1.0, release.set).start()
    assert main(["down", "finishing"], out=out, client=client) == 0
    follower.join(timeout=10)
    assert (finishing.run_dir / "events.jsonl").read_text().count('"run-ended"') == 1
    assert "run finishing: another command follows it; waiting for it to keep its lines" in out.getvalue().splitlines()

    # one followed for longer than down waits: its follower keeps what it reads
    monkeypatch.setattr("orchestrate.launch.unfollowed.FOLLOWER_POLLS", 2)
    with try_lock(followed.run_dir / SUPERVISOR_LOCK) as held:
        assert held
        assert main(["down", "followed"], out=out, client=client) == 0
    assert not (followed.run_dir / "outcome.json").exists()  # (its follower's to write)
    assert [line for line in out.getvalue().splitlines() if "no one followed it" in line] == [], out.getvalue()

    # an orphaned run whose node still runs: removed at once, nothing followed
    client.script("node0", Script(["[0|0]:going"], hang=True))
    orphan = make_run("orphan", client=client, nodes=1, stop_grace=1).start()
    for container in client.containers_by_name.values():  # its launcher was killed
        container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
    wait_until(lambda: len(client.containers_by_name["ddp-orphan-node0-1"].log) == 1)
    out, codes = io.StringIO(), []
    pruning = threading.Thread(target=lambda: codes.append(main(["prune"], out=out, client=client)), daemon=True)
    pruning.start()
    pruning.join(timeout=10)
    assert codes == [0], "prune waited for the orphaned run's end"
    assert out.getvalue().splitlines()[0].startswith("removed run orphan (orphaned): "), out.getvalue()
    assert not (orphan.run_dir / "outcome.json").exists()


def test_down_of_an_orphaned_run_writes_its_node_logs_whole_but_no_summary_where_it_asked_for_faults(make_run):
    """Session 115 (h2): the summary of an orphaned run that asked for no fault is written too."""
    from orchestrate.cli.main import main
    from orchestrate.config.fault_spec import parse_fault
    from orchestrate.engine.labels import LAUNCHER_LABEL

    client = FakeDockerClient()
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    for run_id, faults in (("gone", (parse_fault("kill:node0@step=99"),)), ("plain", ())):
        client.script("node0", Script(["[0|0]:one", "[0|0]:two"]))
        # its launcher (this process) never follows it
        plan = make_run(run_id, client=client, nodes=1, faults=faults).start()
        for container in client.containers_by_name.values():  # ... and is killed
            container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
        wait_until(lambda: not list_runs(client, run_id)[0].live_nodes)
        out = io.StringIO()
        assert main(["down", run_id], out=out, client=client) == 0
        what = "node logs" if faults else "node logs, summary and report page"
        assert out.getvalue().splitlines()[0] == (f"run {run_id}: no one followed it to its end; writing its {what}"
                                                  " from the engine first")
        assert (plan.run_dir / "node0.log").read_text().splitlines() == ["[node0/rank0] one", "[node0/rank0] two"]
        # the faults' records, and whether each fired, were its launcher's alone: no summary judges it without them
        assert (plan.run_dir / "outcome.json").exists() is not bool(faults)


def test_an_orphaned_run_kept_once_is_not_followed_again_by_a_second_removal(make_run):
    from orchestrate.engine.labels import LAUNCHER_LABEL
    from orchestrate.launch.unfollowed import record_before_removal

    client = FakeDockerClient()
    FakeCompose.engine = client
    client.images.add(DEFAULT_IMAGE)
    client.script("node0", Script(["[0|0]:one"]))
    # (a fault asked for: its first follow records no outcome, and lines-kept alone says it was followed)
    plan = make_run("gone", client=client, nodes=1, faults=(parse_fault("kill:node0@step=99"),)).start()
    for container in client.containers_by_name.values():
        container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
    wait_until(lambda: not list_runs(client, "gone")[0].live_nodes)
    said: list[str] = []
    assert record_before_removal(client, list_runs(client, "gone")[0], said.append) is not None
    kept = (plan.run_dir / "node0.log").read_text()
    assert record_before_removal(client, list_runs(client, "gone")[0], said.append) is None  # (a down and a prune at once)
    assert (plan.run_dir / "node0.log").read_text() == kept == "[node0/rank0] one\n"
    assert said == ["run gone: no one followed it to its end; writing its node logs from the engine first"]


def test_a_run_whose_lines_cannot_be_kept_is_removed_all_the_same_saying_why(make_run, monkeypatch):
    from orchestrate.cli.main import main
    from orchestrate.errors import EngineError

    client = FakeDockerClient()
    started_runs(make_run, client, ("lost", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)

    def engine_fails(client, run, say):
        raise EngineError("the engine stopped answering")
    monkeypatch.setattr("orchestrate.cli.down.record_before_removal", engine_fails)
    out = io.StringIO()
    assert main(["down", "lost"], out=out, client=client) == 0
    assert out.getvalue().splitlines()[:2] == [
        "run lost: could not keep its lines from the engine (the engine stopped answering); removing it all the same",
        "removed run lost: container ddp-lost-node0-1, network ddp-lost_ddp, volume ddp-lost_shared"]


def test_another_users_run_and_a_launcher_on_another_host_are_not_followed_before_removal(make_run, monkeypatch):
    import dataclasses

    from orchestrate.engine.labels import DETACHED_LABEL
    from orchestrate.launch.unfollowed import unrecorded

    client = FakeDockerClient()
    started_runs(make_run, client, ("theirs", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    run = list_runs(client)[0]
    assert unrecorded(run)
    # a foreground run whose launcher lives on another host (None: this host cannot tell) may still be followed
    assert not unrecorded(dataclasses.replace(run, labels={**run.labels, DETACHED_LABEL: ""}, launcher_alive=None))
    assert unrecorded(dataclasses.replace(run, labels={**run.labels, DETACHED_LABEL: ""}, launcher_alive=False))
    # a directory this user may not write (another user's run, which prune may remove): theirs to keep
    monkeypatch.setattr("orchestrate.launch.unfollowed.os.access", lambda path, mode: False)
    assert not unrecorded(run)


def test_only_a_compose_run_with_a_directory_of_its_own_is_followed_before_it_goes(make_run, tmp_path, monkeypatch):
    import dataclasses

    from orchestrate.engine.labels import RUN_DIR_LABEL, SCHEDULER_LABEL
    from orchestrate.launch.unfollowed import unrecorded

    client = FakeDockerClient()
    started_runs(make_run, client, ("ended", {"node0": Script(["[0|0]:hi"])}, dict(nodes=1)))
    wait_until(lambda: list_runs(client)[0].state is RunState.SUCCEEDED)
    run = list_runs(client)[0]
    assert unrecorded(run)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # (a run with no directory must not read or lock the current one either)
    assert not unrecorded(dataclasses.replace(run, labels={**run.labels, RUN_DIR_LABEL: ""}))
    # a Slurm job's lines are Slurm's, in its directory already: a Compose follower would misread its nodes
    assert not unrecorded(dataclasses.replace(run, labels={**run.labels, SCHEDULER_LABEL: "slurm"}))
    assert list(elsewhere.iterdir()) == []


def test_an_attach_once_the_nodes_are_down_names_peers_by_the_addresses_they_came_up_with(make_run):
    import os

    from orchestrate.launch.run import Run
    from orchestrate.supervise.supervisor import recorded_addresses

    client = FakeDockerClient()
    # (both run until their addresses are recorded: a node that ended before the bring-up read it has none)
    [plan] = started_runs(make_run, client, ("gone", {"node0": Script(["[0|0]:hi"], hang=True),
                                                      "node1": Script(["[1|0]:hi"], hang=True)}, dict(nodes=2)))
    recorded = recorded_addresses(plan.run_dir)
    assert sorted(recorded.values()) == ["node0", "node1"] and all(address.startswith("172.30.0.") for address in recorded)
    client.containers_by_name["ddp-gone-node0-1"].exit(1)
    client.containers_by_name["ddp-gone-node1-1"].exit(0)
    wait_until(lambda: not list_runs(client, "gone")[0].live_nodes)  # (the engine no longer gives their addresses)
    with open(os.devnull, "w") as nowhere:
        result = Run.attach("gone", out=nowhere, client=client).follow()
    assert result.node_addresses == recorded


def report_says(client, plan, tmp_path, capsys) -> str:
    """``report RUN`` against ``client``: the page's ending line (what it says in place of "running")."""
    import html
    import re

    from orchestrate.cli.main import main

    out = io.StringIO()
    assert main(["report", plan.run_id, "--runs-dir", str(plan.run_dir.parent)], out=out, client=client) == 0
    assert out.getvalue() == f"{(plan.run_dir / 'report.html').resolve()}\n"  # the path alone on stdout
    page = (plan.run_dir / "report.html").read_text()
    return html.unescape(re.search(r'<p id="outcome" class="outcome \w+">([^<]*)</p>', page).group(1))


def test_report_asks_the_engine_how_a_run_with_no_recorded_outcome_stands(make_run, tmp_path, capsys):
    """A run's files alone cannot tell one that runs from one whose end nobody recorded: a detached
    run that ended unfollowed (its lines kept first, its record finished), an orphaned one, one
    whose nodes ended after its launcher died, one the engine no longer has, and one that runs."""
    from orchestrate.engine.labels import LAUNCHER_LABEL

    client = FakeDockerClient()
    detached, running = started_runs(make_run, client,
                                     ("ended", {"node0": Script(["[0|0]:one"], exit_code=3)}, {"nodes": 1}),
                                     ("runs", {"node0": Script(["[0|0]:on"], hang=True)}, {"nodes": 1}))
    wait_until(lambda: not list_runs(client, "ended")[0].live_nodes)
    capsys.readouterr()  # (their starts' lines)
    assert report_says(client, detached, tmp_path, capsys) == "FAILED (exit code 1): node0 failed (exit code 3)"
    assert capsys.readouterr().err == ("run ended: no one followed it to its end; writing its node logs, summary and"
                                       " report page from the engine first\n")
    assert (detached.run_dir / "outcome.json").is_file() and (detached.run_dir / "node0.log").is_file()
    assert report_says(client, running, tmp_path, capsys) == "running" and capsys.readouterr().err == ""

    client.script("node0", Script(["[0|0]:done"]))
    # (a fault it asked for: its launcher alone could judge it)
    [foreground] = started_runs(make_run, client, ("killed", {}, {"nodes": 1, "detach": False,
                                                                  "faults": (parse_fault("kill:node0@step=99"),)}))
    wait_until(lambda: not list_runs(client, "killed")[0].live_nodes)
    capsys.readouterr()
    # its launcher (this process) lives: how the run ended is its to record, about to be
    assert report_says(client, foreground, tmp_path, capsys) == "running" and capsys.readouterr().err == ""
    for container in client.containers_by_name.values():  # its launcher (this process, never following) is gone
        if container.labels.get("io.ddp-compose.run-id") == "killed":
            container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
    wait_until(lambda: not list_runs(client, "killed")[0].live_nodes)
    capsys.readouterr()
    assert report_says(client, foreground, tmp_path, capsys) == (
        "ENDED: succeeded, as its nodes' exit codes say; its launcher did not record its summary")
    assert not (foreground.run_dir / "outcome.json").exists()  # (a run with faults: its summary is its launcher's)
    assert "writing its node logs from the engine first" in capsys.readouterr().err

    client.script("node0", Script(["[0|0]:going"], hang=True))
    [orphan] = started_runs(make_run, client, ("orphan", {}, {"nodes": 1, "detach": False}))
    for container in client.containers_by_name.values():
        if container.labels.get("io.ddp-compose.run-id") == "orphan":
            container.labels[LAUNCHER_LABEL] = f"{socket.gethostname()}:999999999:1"
    assert report_says(client, orphan, tmp_path, capsys).startswith(
        "ORPHANED: its launcher died before it said how the run ended")

    for container in list(client.containers_by_name.values()):
        if container.labels.get("io.ddp-compose.run-id") == "killed":
            container.remove(force=True)
    assert report_says(client, foreground, tmp_path, capsys).startswith(
        "ENDED, with no record of how: the engine no longer has the run")


def test_report_without_an_engine_says_the_page_holds_what_the_files_say(make_run, tmp_path, capsys):
    import requests

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("r1", {"node0": Script(["[0|0]:on"], hang=True)}, {"nodes": 1}))

    class Unreachable:
        @property
        def containers(self):
            raise requests.exceptions.ConnectionError("connection refused")

    assert report_says(Unreachable(), plan, tmp_path, capsys) == (
        "running, as far as its files say (the engine could not be asked)")


def test_a_runs_plan_says_the_faults_it_asked_for_or_none_where_it_does_not_say(tmp_path):
    from orchestrate.outcome.run_dirs import recorded_faults

    assert recorded_faults(tmp_path) is None  # no plan
    for plan, faults in (({"faults": ["kill:node0@step=3"]}, ("kill:node0@step=3",)), ({"faults": []}, ()),
                         ({}, None), ([], None)):
        (tmp_path / "run.json").write_text(json.dumps(plan))
        assert recorded_faults(tmp_path) == faults


def test_the_first_attach_to_a_detached_run_says_what_its_job_loaded_from_before(make_run, tmp_path):
    """A detached run's first attach records its summary, as its launcher would have: the file its job
    loaded, which its work directory held before the run, was not said (the attach had no work directory)."""
    import json
    import os

    from orchestrate.launch.run import Run

    (tmp_path / "ckpt.pt").write_bytes(b"an earlier run's save")
    os.utime(tmp_path / "ckpt.pt", (1000.0, 1000.0))
    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("detached", {"node0": Script(["[0|0]:resuming after step 9"])},
                                             dict(nodes=1)))
    wait_until(lambda: list_runs(client, "detached")[0].state is RunState.SUCCEEDED)
    (plan.run_dir / "progress").mkdir(exist_ok=True)
    with open(plan.run_dir / "progress" / "rank0.jsonl", "a") as records:  # as the worker's torch.load hook says it
        records.write(json.dumps({"rank": 0, "loaded": "ckpt.pt", "time": time.time()}) + "\n")
    with open(os.devnull, "w") as nowhere:
        result = Run.attach("detached", out=nowhere, client=client).follow()
    assert result.loaded_from_before == ("ckpt.pt",)
    assert json.loads((plan.run_dir / "outcome.json").read_text())["loaded_from_before"] == ["ckpt.pt"]


def test_an_attach_to_a_recorded_run_says_what_its_job_loaded_from_before_as_its_launcher_did(make_run):
    """A watcher judges the run again from the engine, and cannot tell what the work directory held
    as the run began: the summary it printed lost the launcher's note. outcome.json keeps it."""
    import json
    import os

    from orchestrate.launch.run import Run
    from orchestrate.outcome.summary import format_summary

    client = FakeDockerClient()
    [plan] = started_runs(make_run, client, ("held", {"node0": Script(["[0|0]:resuming after step 9"])},
                                             dict(nodes=1, detach=False)))
    wait_until(lambda: list_runs(client, "held")[0].state is RunState.SUCCEEDED)
    (plan.run_dir / "outcome.json").write_text(json.dumps({"run_id": "held", "loaded_from_before": ["ckpt.pt",
                                                                                                   "ckpt/step_9/"]}))
    with open(os.devnull, "w") as nowhere:
        result = Run.attach("held", out=nowhere, client=client).follow()
    assert result.loaded_from_before == ("ckpt.pt", "ckpt/step_9/")
    assert ("note: the job loaded ckpt.pt with torch.load and ckpt/step_9/ with dcp.load, which its work directory held"
            " before this run") in format_summary(result)

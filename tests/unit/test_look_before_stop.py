"""``stop RUN`` of a quiet job looks where every rank waits first (``look_before_stop``): how
long the job has been quiet, by the engine's log (a worker's line moves it; torch's own log lines
do not), when it looks and when not, what it says, and what the stop request keeps of it for
the run's summary."""
from __future__ import annotations

import io
import json
import time

from orchestrate.engine.runs import find_run, read_stop_request, stop_run
from orchestrate.supervise.look_before_stop import QUIET_BEFORE_LOOK_S, look_before_stop, recorded_look
from orchestrate.supervise.worker_quiet import LOG_TAIL_LINES, seconds_quiet
from tests.fakes import FakeDockerClient, Script, wait_until
from tests.unit.test_rank_probe import INTERVAL_S, AnsweringWorkers
from tests.unit.test_runs import started_runs

TORCH_WARNING = ("W1205 20:35:02.738000 8 torch/distributed/elastic/multiprocessing/api.py:908] Sending process 9"
                 " closing signal SIGTERM")


def quiet_run(make_run, client: FakeDockerClient, nodes: int = 2):
    """A detached run whose every node printed one worker line and then waits (its scripts hang)."""
    started_runs(make_run, client, ("quiet", {f"node{n}": Script([f"[{n}|0]:step 1"], hang=True) for n in range(nodes)},
                                    dict(nodes=nodes)))
    wait_until(lambda: all(len(c.log) == 1 for c in client.containers_by_name.values() if "node" in c.name))
    return find_run(client, "quiet")


def a_minute_after_the_last_line(client: FakeDockerClient):
    """A clock 60 s after the latest line any node printed (a loaded machine's delays left out)."""
    return lambda: max(stamp for c in client.containers_by_name.values() for stamp, _ in c.log) + 60


def node_log(client: FakeDockerClient, node: str) -> list:
    return client.containers_by_name[f"ddp-quiet-{node}-1"].log


def test_quiet_time_runs_from_the_latest_workers_line_of_any_node_not_torchs_own_log_lines(make_run):
    client = FakeDockerClient()
    run = quiet_run(make_run, client)
    node_log(client, "node0")[:] = [(1000.0, "[0|0]:step 1"), (1030.0, f"[0|0]:{TORCH_WARNING}"),
                                    (1031.0, "Exception raised from recvBytes at c10d.cpp:1 (most recent call first):")]
    node_log(client, "node1")[:] = [(1010.0, "[1|0]:step 1"), (1040.0, TORCH_WARNING)]
    assert seconds_quiet(run, 1100.0) == 90.0  # node1's line at 1010; the warnings after it are no progress
    node_log(client, "node0").append((1095.0, "[0|0]:loss 0.5"))
    assert seconds_quiet(run, 1100.0) == 5.0


def test_a_node_with_no_workers_line_is_quiet_since_its_start_or_its_logs_oldest_line_kept(make_run):
    """No worker printed yet: quiet since the node started; where its last LOG_TAIL_LINES lines
    hold none (torch repeating a warning), since the oldest of them, the others being out of reach."""
    client = FakeDockerClient()
    run = quiet_run(make_run, client, nodes=1)
    container = run.nodes[0].container
    container.started = "2026-12-05T20:00:00.000000000Z"
    started = 1796500800.0  # 20:00:00
    container.log[:] = []
    assert seconds_quiet(run, started + 42) == 42.0
    container.log[:] = [(started + 100 + i, TORCH_WARNING) for i in range(LOG_TAIL_LINES)]
    assert seconds_quiet(run, started + 1000) == 900.0  # since the oldest of the lines read
    container.log.insert(0, (started + 50, "[0|0]:step 1"))  # beyond the lines read: not seen
    assert seconds_quiet(run, started + 1000) == 900.0
    container.log.append((started + 990, "[0|0]:step 2"))
    assert seconds_quiet(run, started + 1000) == 10.0



def test_a_node_with_no_workers_line_takes_no_later_line_of_another_node_back(make_run):
    """The run's quiet time is the least of its nodes': a node that printed no worker line (since
    its start) leaves another node's later line counted, and its torch warnings count for nothing."""
    client = FakeDockerClient()
    run = quiet_run(make_run, client)
    started = 1796500800.0  # 20:00:00
    for node in run.nodes:
        node.container.started = "2026-12-05T20:00:00.000000000Z"
    node_log(client, "node0")[:] = [(started + 400, "[0|0]:step 7")]
    node_log(client, "node1")[:] = [(started + 450, TORCH_WARNING)]  # after its start, and no worker's
    assert seconds_quiet(run, started + 500) == 100.0  # node0's line, not node1's start (500) nor its warning (50)


def test_a_workers_line_on_stderr_is_progress_too(make_run):
    # (Python's logging module writes to stderr by default: a job that logs its steps prints nothing on stdout)
    client = FakeDockerClient()
    run = quiet_run(make_run, client, nodes=1)
    container = run.nodes[0].container
    container.log[:] = [(1000.0, "[0|0]:step 1")]
    container.stderr_log[:] = [(1080.0, "[0|0]:INFO:train:step 2 loss 0.5")]
    assert seconds_quiet(run, 1100.0) == 20.0


def test_a_run_with_no_live_node_has_no_quiet_time(make_run):
    client = FakeDockerClient()
    run = quiet_run(make_run, client, nodes=1)
    run.nodes[0].container.stop(timeout=0)
    assert not find_run(client, "quiet").live_nodes
    assert seconds_quiet(find_run(client, "quiet"), 1e10) is None

def test_a_quiet_job_is_looked_at_said_and_kept_in_the_stop_request(make_run):
    client = FakeDockerClient()
    run = quiet_run(make_run, client)
    workers = AnsweringWorkers(run.run_dir, (0, 1), {0: 20, 1: 20})
    (run.run_dir / "debug" / "rank0.crash").write_text("")  # the workers' hook began
    said: list[str] = []
    found = look_before_stop(client, run, said.append, interval_s=INTERVAL_S, now=a_minute_after_the_last_line(client),
                             sleep=workers.sleep, clock=workers.clock)
    assert found is not None and found.hung
    assert said[0] == ("no output for 60 s: looking where every rank waits before they stop (a few seconds; up to"
                       f" {INTERVAL_S + 2 * 3:g} s where a rank does not answer)")
    assert said[1] == "at the stop, hung: no progress for 60 s: ranks 0, 1: all_reduce at train.py:20 in <module>"
    assert said[2:] == found.lines()[1:] and "  ranks 0, 1: all_reduce at train.py:20 in <module>" in said
    assert (run.run_dir / "stacks.json").is_file()  # as `stacks` writes it: the report page shows it

    stop_run(run, 1, "python -m orchestrate stop", said.append, look=recorded_look(found))
    request = read_stop_request(run.run_dir)
    assert request.look == tuple(found.lines()) and request.look_hung
    assert json.loads((run.run_dir / "stop-requested").read_text())["look"]["lines"][0] == found.headline


def test_a_computing_rank_makes_the_look_say_working_not_hung(make_run):
    client = FakeDockerClient()
    run = quiet_run(make_run, client)
    workers = AnsweringWorkers(run.run_dir, (0, 1), {0: 20})  # rank 1 at line 30, not in a collective

    def rank_1_computes() -> None:
        workers.cpu_s[1] = 8.0
    workers.between_looks = rank_1_computes
    (run.run_dir / "debug" / "rank1.crash").write_text("")
    said: list[str] = []
    found = look_before_stop(client, run, said.append, interval_s=INTERVAL_S, now=a_minute_after_the_last_line(client),
                             sleep=workers.sleep, clock=workers.clock)
    assert found is not None and not found.hung
    assert said[1] == "at the stop, working: no output for 60 s, but the job is working: rank 1 computing"
    assert recorded_look(found) == {"hung": False, "lines": found.lines()}


def test_no_look_at_a_job_that_printed_a_moment_ago_or_has_no_hooked_worker_and_none_answering_is_said(make_run):
    client = FakeDockerClient()
    run = quiet_run(make_run, client)
    workers = AnsweringWorkers(run.run_dir, (0, 1), {0: 20, 1: 20})
    said: list[str] = []
    options = dict(interval_s=INTERVAL_S, sleep=workers.sleep, clock=workers.clock)
    # no worker began under the hook (a script that starts its own workers): none would answer
    assert look_before_stop(client, run, said.append, now=a_minute_after_the_last_line(client), **options) is None
    assert said == [] and workers.slept == []
    (run.run_dir / "progress").mkdir(exist_ok=True)
    (run.run_dir / "progress" / "rank0.jsonl").write_text("")  # a worker began, faulthandler its own
    assert look_before_stop(client, run, said.append, now=lambda: a_minute_after_the_last_line(client)() - 60
                            + QUIET_BEFORE_LOOK_S - 1, **options) is None
    assert said == [] and workers.slept == []  # it printed a moment ago: stopped at once
    workers.answering = {0}  # rank 1 busy in C code, say, or answering the watchdog's own request
    assert look_before_stop(client, run, said.append, now=a_minute_after_the_last_line(client), answer_timeout_s=1,
                            **options) is None
    assert said[-1] == "rank 1 did not answer the look (busy, perhaps): no verdict"
    workers.answering = set()  # every rank busy
    assert look_before_stop(client, run, said.append, now=a_minute_after_the_last_line(client), answer_timeout_s=1,
                            **options) is None
    assert said[-1] == ("no rank answered the look (stopped, paused, or started without the workers' hook):"
                        " no verdict")
    assert recorded_look(None) is None


def test_an_interrupt_during_the_look_cuts_the_look_short_not_the_stop(make_run, monkeypatch):
    """Ctrl-C on `stop`, or its reader gone (`stop RUN | head -1`): the stop was asked all the same."""
    from orchestrate.interrupts import SignalInterrupt
    from orchestrate.launch.stop import stop_nodes

    client = FakeDockerClient()
    run = quiet_run(make_run, client)

    def interrupted(client, run, say):
        say("no output for 60 s: looking where every rank waits before they stop (3 s)")
        raise SignalInterrupt(13)
    monkeypatch.setattr("orchestrate.launch.stop.look_before_stop", interrupted)
    said: list[str] = []
    assert stop_nodes(client, run, 1, said.append) == ["node0", "node1"]
    assert said[1] == "interrupted: the look is cut short, and the nodes are stopped now"
    assert all(c.status == "exited" for c in client.containers_by_name.values() if "node" in c.name)
    assert read_stop_request(run.run_dir).look == ()


def test_an_error_during_the_look_leaves_the_stop_to_go_on_and_nodes_ended_meanwhile_are_not_stopped(
        make_run, monkeypatch):
    """A run directory another user's launcher made, not writable here: the look cannot ask the
    ranks, and the stop was asked all the same. A node that ended during the look is not said to be
    stopped (the run is read again after it)."""
    from orchestrate.launch.stop import stop_nodes

    client = FakeDockerClient()
    run = quiet_run(make_run, client)

    def not_writable(client, run, say):
        client.containers_by_name["ddp-quiet-node0-1"].kill()  # it ended meanwhile
        raise PermissionError(13, "Permission denied", str(run.run_dir / "debug" / "request.json"))
    monkeypatch.setattr("orchestrate.launch.stop.look_before_stop", not_writable)
    said: list[str] = []
    assert stop_nodes(client, run, 1, said.append) == ["node1"]
    assert said[0] == (f"could not look where the ranks wait ([Errno 13] Permission denied:"
                       f" '{run.run_dir / 'debug' / 'request.json'}'): the nodes are stopped without it")
    assert read_stop_request(run.run_dir).nodes == {"node1"}


def test_a_second_stop_in_the_grace_takes_no_look_and_keeps_the_first_ones(make_run):
    client = FakeDockerClient()
    run = quiet_run(make_run, client)
    look = {"hung": True, "lines": ["no progress for 60 s: ranks 0, 1: all_reduce at train.py:20 in <module>"]}
    from orchestrate.engine.runs import mark_stop_requested
    mark_stop_requested(run.run_dir, ["node0", "node1"], grace_s=30, look=look)
    (run.run_dir / "debug").mkdir(exist_ok=True)
    (run.run_dir / "debug" / "rank0.crash").write_text("")
    said: list[str] = []
    assert look_before_stop(client, run, said.append, now=a_minute_after_the_last_line(client)) is None
    assert said == []  # no rank would answer in the grace: no 7 s of waiting for none
    # `down` hurries it
    mark_stop_requested(run.run_dir, ["node0", "node1"], by="python -m orchestrate down", grace_s=1)
    request = read_stop_request(run.run_dir)
    assert (request.look, request.look_hung, request.grace_s) == (tuple(look["lines"]), True, 1)
    assert request.by == "python -m orchestrate stop"  # the stop whose look it is ended the job, not down
    from orchestrate.engine.runs import stop_request_data, write_stop_request
    # a stop of long ago
    write_stop_request(run.run_dir, {**stop_request_data(run.run_dir), "time": time.time() - 3600})
    mark_stop_requested(run.run_dir, ["node0", "node1"], by="python -m orchestrate down", grace_s=10)
    assert read_stop_request(run.run_dir).by == "python -m orchestrate down"  # not that old stop's


def test_down_of_a_quiet_detached_run_looks_first_as_stop_does_and_its_record_and_page_keep_the_look(
        make_run, monkeypatch):
    """`down RUN` of a live run stops it as `stop` does, the look included: a hung detached run that
    nobody followed, removed without a look, kept no word of where it hung (trial of 2026-12-07)."""
    from orchestrate.cli.main import main

    client = FakeDockerClient()
    run = quiet_run(make_run, client)
    workers = AnsweringWorkers(run.run_dir, (0, 1), {0: 20, 1: 20})
    (run.run_dir / "debug" / "rank0.crash").write_text("")  # the workers' hook began
    real_look = look_before_stop
    monkeypatch.setattr("orchestrate.launch.stop.look_before_stop", lambda client, run, say: real_look(
        client, run, say, INTERVAL_S, now=a_minute_after_the_last_line(client), sleep=workers.sleep,
        clock=workers.clock))
    out = io.StringIO()
    assert main(["down", "quiet", "--timeout", "1"], out=out, client=client) == 0
    said = out.getvalue().splitlines()
    assert said[1] == "at the stop, hung: no progress for 60 s: ranks 0, 1: all_reduce at train.py:20 in <module>"
    assert "stopped node0, node1 of run quiet first (SIGTERM, SIGKILL after 1 s)" in said
    outcome = json.loads((run.run_dir / "outcome.json").read_text())
    assert outcome["stopped_by"] == "python -m orchestrate down" and outcome["stop_look"]["hung"] is True
    assert outcome["stop_look"]["lines"][0] == said[1].removeprefix("at the stop, hung: ")
    assert "all_reduce at train.py:20" in (run.run_dir / "report.html").read_text()

"""The report: a run's records (plan, events, progress, outcome) -> lanes, phases, markers; the page."""
from __future__ import annotations

import dataclasses
import html

import io
import json
import re

import pytest

from orchestrate.cli.main import main
from orchestrate.outcome.events import read_events, record_event
from orchestrate.outcome.progress import ProgressRecord
from orchestrate.report.model import build_model, load_run
from orchestrate.outcome.run_dirs import find_run_dir
from orchestrate.report.page import render_html, write_report

T0 = 1_800_000_000.0


def plan(nodes: int = 2, nproc: int = 2, elastic: bool = False) -> dict:
    return {"run_id": "r1", "command": "python -m orchestrate run --nodes 2", "image": "ddp-compose-node:latest",
            "nodes": [{"name": f"node{i}", "node_rank": i,
                       "global_ranks": [] if elastic else list(range(i * nproc, (i + 1) * nproc)), "gpus": []}
                      for i in range(nodes)]}


def ev(at: float, kind: str, **fields) -> dict:
    return {"time": T0 + at, "event": kind, **fields}


def started(nodes: int = 2, nproc: int = 2, at: float = 3.0) -> list[dict]:
    events = [ev(0.0, "bring-up", nodes=[f"node{i}" for i in range(nodes)]), ev(1.0, "nodes-up")]
    for node in range(nodes):
        events.append(ev(at + node * 0.1, "node-running", node=f"node{node}"))
        events += [ev(at + node * 0.1, "rank-started", node=f"node{node}", rank=node * nproc + r) for r in range(nproc)]
    return events


def steps(rank: int, first: float, count: int, every: float = 0.5, loss: bool = True) -> list[ProgressRecord]:
    return [ProgressRecord(rank, T0 + first + s * every, step=s + 1, metrics={"loss": 2.0 / (s + 1)} if loss else {})
            for s in range(count)]


def phases(model, key: str) -> list[tuple[str, float, float]]:
    return [(p.name, round(p.start, 3), round(p.end, 3)) for p in model.lane(key).phases]


def test_a_successful_run_has_a_lane_per_node_and_rank_through_its_phases():
    events = started() + [ev(10.0, "node-exited", node="node0", exit_code=0),
                          ev(10.2, "node-exited", node="node1", exit_code=0),
                          ev(10.5, "run-ended", exit_code=0, succeeded=True)]
    progress = [r for rank in range(4) for r in steps(rank, 4.0, 10)]
    model = build_model({"run": plan(), "events": events, "progress": progress,
                         "outcome": {"succeeded": True, "exit_code": 0, "image_torch": "2.9.1"}})
    assert [lane.key for lane in model.lanes] == ["node0", "node0-rank0", "node0-rank1", "node1", "node1-rank2",
                                                  "node1-rank3"]
    assert phases(model, "node0") == [("bring-up", 0.0, 1.0), ("rendezvous", 1.0, 3.0), ("running", 3.0, 10.0)]
    assert phases(model, "node1-rank3") == [("running", 3.1, 10.2)]
    assert [(m.kind, m.lane, round(m.time, 1)) for m in model.markers] == [("exit", "node0", 10.0), ("exit", "node1", 10.2)]
    assert model.outcome == "SUCCEEDED" and model.torch == "2.9.1"
    assert [s for _, s, _ in model.progress[2]] == list(range(1, 11))
    assert model.end == pytest.approx(10.5)
    restarted = {"succeeded": True, "exit_code": 0, "nodes": [{"name": "node0", "restarts_in_place": 0},
                                                              {"name": "node1", "restarts_in_place": 2}]}
    model = build_model({"run": plan(), "events": events, "progress": progress, "outcome": restarted})
    assert model.outcome == "SUCCEEDED, after torchrun restarted the workers in place (node1 2 times)"
    # a Slurm run has no node results: its restarts are by node under "slurm"
    slurm = {"succeeded": True, "exit_code": 0, "nodes": [], "slurm": {"restarts_in_place": {"node0": 1}}}
    model = build_model({"run": plan(), "events": events, "progress": progress, "outcome": slurm})
    assert model.outcome == "SUCCEEDED, after torchrun restarted the workers in place (node0 once)"



def test_an_event_recorded_again_exactly_is_drawn_and_listed_once():
    """A run that attaches of an older version recorded again (each replayed the log from the
    start): the same start, at the same time, is one event; an elastic restart's later start is
    another."""
    events = started(nproc=1) + [ev(10.0, "node-exited", node="node0", exit_code=0),
                                 ev(10.2, "node-exited", node="node1", exit_code=0)]
    again = [e for e in events if e["event"] in ("node-running", "rank-started")] * 3
    model = build_model({"run": plan(nproc=1), "events": sorted(events + again, key=lambda e: e["time"])})
    assert model.events == build_model({"run": plan(nproc=1), "events": events}).events
    assert phases(model, "node0") == [("bring-up", 0.0, 1.0), ("rendezvous", 1.0, 3.0), ("running", 3.0, 10.0)]
    assert phases(model, "node1-rank1") == [("running", 3.1, 10.2)]
    restarted = build_model({"run": plan(nproc=1), "events": events + [ev(6.0, "node-running", node="node0")]})
    assert [p[0] for p in phases(restarted, "node0")].count("running") == 2

def test_a_node_lost_for_good_is_marked_and_named_in_the_ending():
    events = started() + [ev(5.0, "node-exited", node="node1", exit_code=137),
                          ev(5.0, "node-lost", node="node1", exit_code=137, fault="lose:node1@step=3"),
                          ev(10.0, "node-exited", node="node0", exit_code=0),
                          ev(10.5, "run-ended", exit_code=0, succeeded=True)]
    outcome = {"succeeded": True, "exit_code": 0, "nodes": [
        {"name": "node0", "state": "succeeded", "restarts_in_place": 1},
        {"name": "node1", "state": "lost", "lost": "lose:node1@step=3", "restarts_in_place": 0}]}
    model = build_model({"run": plan(), "events": events, "progress": [], "outcome": outcome})
    assert [(m.kind, m.lane) for m in model.markers if m.kind == "lost"] == [("lost", "node1")]
    assert model.outcome == ("SUCCEEDED without node1 (lose:node1@step=3), lost for good, after torchrun restarted"
                             " the workers in place (node0 once)")


def test_a_run_stopped_by_stop_says_who_stopped_it_and_a_ctrl_c_is_an_interrupt():
    stopped = {"succeeded": False, "exit_code": 143, "interrupted": True, "stopped_by": "python -m orchestrate stop"}
    model = build_model({"run": plan(), "events": started(), "progress": [], "outcome": stopped})
    assert model.outcome == "STOPPED by python -m orchestrate stop (exit code 143)"
    interrupted = {"succeeded": False, "exit_code": 130, "interrupted": True, "stopped_by": ""}
    model = build_model({"run": plan(), "events": started(), "progress": [], "outcome": interrupted})
    assert model.outcome == "INTERRUPTED (exit code 130)"


def test_a_node_stop_had_to_kill_is_marked_killed_and_one_that_took_its_sigterm_is_not():
    events = started() + [ev(7.0, "node-exited", node="node0", exit_code=137),
                          ev(9.5, "node-stopped", node="node0", exit_code=137, by="python -m orchestrate stop",
                             grace_ran_out=True, still_running=["python a.py (sleeping)"]),
                          ev(5.0, "node-exited", node="node1", exit_code=143),
                          ev(5.01, "node-stopped", node="node1", exit_code=143, by="python -m orchestrate stop")]
    stopped = {"succeeded": False, "exit_code": 143, "interrupted": True, "stopped_by": "python -m orchestrate stop"}
    model = build_model({"run": plan(), "events": events, "progress": [], "outcome": stopped})
    assert [(m.lane, m.label) for m in model.markers if m.kind == "killed"] == [
        ("node0", "node0 killed at 7.0 s: its grace after python -m orchestrate stop's SIGTERM ran out")]
    assert model.graces_run_out == []  # outcome.json said nothing of it
    # outcome.json's nodes say which a SIGKILL ended when its grace ran out: the ending names them
    stopped["nodes"] = [{"name": "node0", "grace_ran_out": True, "still_running": ["python a.py <x> (sleeping)"]},
                        {"name": "node1", "grace_ran_out": False, "still_running": []}]
    page = render_html(build_model({"run": plan(), "events": events, "progress": [], "outcome": stopped}))
    assert ('<ul id="grace-ran-out"><li>node0 did not stop within its grace after SIGTERM, so it got SIGKILL; what still'
            " ran: python a.py &lt;x&gt; (sleeping)</li></ul>") in page
    assert "node1 did not stop" not in page
    # one whose ranks had finished waited at its exit barrier: said as the summary says it
    stopped["nodes"][0]["at_exit_barrier"] = True
    page = render_html(build_model({"run": plan(), "events": events, "progress": [], "outcome": stopped}))
    assert ("ran: python a.py &lt;x&gt; (sleeping); its ranks had finished their scripts, and its torchrun waited for the"
            " other nodes at its exit barrier") in page


def test_a_failure_names_its_root_cause_on_the_failing_rank():
    events = started() + [ev(6.0, "node-exited", node="node1", exit_code=1),
                          ev(6.01, "node-failed", node="node1", exit_code=1, rank=3),
                          ev(9.0, "node-killed", node="node0"), ev(9.05, "node-exited", node="node0", exit_code=137)]
    failure = {"node": "node1", "rank": 3, "describe": "node1 rank 3 failed (exit code 1): RuntimeError: boom",
               "traceback": "Traceback (most recent call last):\n  ...\nRuntimeError: boom", "reason": "",
               "then": [{"node": "node0", "rank": 0, "exception": "RuntimeError: Connection closed by peer"}],
               "last_lines": ["step 5", "RuntimeError: boom"]}
    model = build_model({"run": plan(), "events": events, "progress": [],
                         "outcome": {"succeeded": False, "exit_code": 1, "failure": failure}})
    failed = [m for m in model.markers if m.kind == "failed"]
    assert [(m.lane, round(m.time, 2)) for m in failed] == [("node1-rank3", 6.01)]
    assert failed[0].label == "node1 failed at 6.0 s (rank 3): the root cause"
    assert [m.label for m in model.markers if m.kind == "killed"] == ["node0 killed by the launcher at 9.0 s"]
    assert "exit code 137 (SIGKILL)" in [m.label for m in model.markers if m.lane == "node0" and m.kind == "exit"][0]
    assert model.outcome.startswith("FAILED (exit code 1): node1 rank 3 failed")
    page = render_html(model)
    assert re.search(r'id="root-cause"><b>Root cause:</b> node1 rank 3 failed \(exit code 1\): RuntimeError: boom',
                     page)
    assert "node0 rank 0: RuntimeError: Connection closed by peer" in page
    assert '<pre id="last-lines">step 5\nRuntimeError: boom</pre>' in page
    assert "<p>Last lines of node1 rank 3:</p>" in page


def test_the_root_cause_is_marked_among_failures_listed_by_time():
    # a trial: node1's rank 2 only lost its peer, and failed before node0's rank 1, the root cause
    events = started() + [ev(6.0, "node-failed", node="node1", exit_code=1, rank=2),
                          ev(6.6, "node-failed", node="node0", exit_code=1, rank=1)]
    failure = {"node": "node0", "rank": 1, "describe": "node0 rank 1 failed (exit code 1): RuntimeError: boom"}
    model = build_model({"run": plan(), "events": events, "progress": [],
                         "outcome": {"succeeded": False, "exit_code": 1, "failure": failure}})
    assert [m.label for m in model.markers if m.kind == "failed"] == [
        "node1 failed at 6.0 s (rank 2)", "node0 failed at 6.6 s (rank 1): the root cause"]


def test_a_crash_and_a_caught_mismatch_say_where_on_the_page():
    failure = {"node": "node1", "rank": 1, "describe": "node1 rank 1 failed (exit code -11, SIGSEGV)", "reason": "",
               "crashed": "Segmentation fault in read at train.py:9; every thread's stack: /r/debug/rank1.crash",
               "divergence": "collective #4: rank 0 entered all_reduce(float32[1]) at a.py:3; rank 1 entered"
                             " barrier() at a.py:5", "users_frame": "a.py:3 in <module>: dist.all_reduce(x)"}
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                    "outcome": {"succeeded": False, "exit_code": 1, "failure": failure}}))
    assert ('<p id="crashed"><b>Where it crashed:</b> Segmentation fault in read at train.py:9; every thread&#x27;s'
            ' stack: /r/debug/rank1.crash</p>') in page
    assert "<b>Where, by the ranks' collective records:</b> collective #4: rank 0 entered" in page
    assert '<p id="users-frame"><b>In your code:</b> <code>a.py:3 in &lt;module&gt;: dist.all_reduce(x)</code></p>' in page
    plain = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": False, "exit_code": 1,
        "failure": {**failure, "crashed": None, "divergence": None, "users_frame": None}}}))
    assert 'id="crashed"' not in plain and 'id="divergence"' not in plain and 'id="users-frame"' not in plain


def test_the_exceptions_a_failure_was_raised_from_are_listed_on_the_page_under_where_in_your_code():
    failure = {"node": "node1", "rank": 3, "describe": "node1 rank 3 failed (exit code 1): RuntimeError: DataLoader"
               " worker (pid(s) 43) exited unexpectedly", "reason": "", "users_frame": "l.py:18 in <module>: for x in dl:",
               "chain": ["caused by: RuntimeError: DataLoader worker (pid 43) is killed by signal: Killed.",
                         "raised while handling: KeyError: '<k>'"]}
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                    "outcome": {"succeeded": False, "exit_code": 1, "failure": failure}}))
    assert ('<ul id="chain"><li>caused by: RuntimeError: DataLoader worker (pid 43) is killed by signal: Killed.</li>'
            "<li>raised while handling: KeyError: &#x27;&lt;k&gt;&#x27;</li></ul>") in page
    assert page.index('id="users-frame"') < page.index('id="chain"')
    for alone in ([], None):  # raised alone, or an outcome.json written before chains were
        plain = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
            "succeeded": False, "exit_code": 1, "failure": {**failure, "chain": alone}}}))
        assert 'id="chain"' not in plain


def test_the_hint_an_earlier_attempts_error_and_ranks_absent_from_a_barrier_are_on_the_page():
    failure = {"node": "node1", "rank": 1, "describe": "node1 rank 1 failed (exit code 1): RuntimeError: closed",
               "reason": "", "not_at_barrier": ["rank 2 did not pass the barrier in time: it was in f at t.py:5"
                                                " when torchrun ended it"],
               "earlier": {"attempt": 3, "local_rank": 0, "describe": "attempt 3 of node1's workers failed by an"
                           " error of its own: local rank 0: OSError: bad", "last_lines": ["x < y", "OSError: bad"],
                           "users_frame": "r.py:4 in load: torch.load(p)"},
               "repeated": "the same error ended attempts 1 and 3 of node1's workers: OSError: bad; a restart ..."}
    hint = "node1 died by SIGABRT after its peers finished: the job's work was done.\ncause: gloo's <threads>"
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": False, "exit_code": 1, "failure": failure, "hint": hint}}))
    assert ('<p id="hint"><b>Hint:</b> node1 died by SIGABRT after its peers finished: the job&#x27;s work was'
            ' done.<br>cause: gloo&#x27;s &lt;threads&gt;</p>') in page
    assert page.index('id="root-cause"') < page.index('id="hint"')
    assert ('<ul id="not-at-barrier"><li>rank 2 did not pass the barrier in time: it was in f at t.py:5 when'
            ' torchrun ended it</li></ul>') in page
    assert ('<p id="earlier"><b>Before that:</b> attempt 3 of node1&#x27;s workers failed by an error of its own:'
            ' local rank 0: OSError: bad</p>') in page
    assert '<p id="earlier-users-frame"><b>In your code:</b> <code>r.py:4 in load: torch.load(p)</code></p>' in page
    assert page.index('id="earlier"') < page.index('id="earlier-users-frame"') < page.index('id="repeated"')
    assert ('<p id="repeated">the same error ended attempts 1 and 3 of node1&#x27;s workers: OSError: bad; a restart'
            " ...</p>") in page
    assert ("<p>Last lines of node1's attempt 3, local rank 0:</p>"
            '<pre id="earlier-lines">x &lt; y\nOSError: bad</pre>') in page
    # "hint: " as the summary begins it is not said twice; a hang's hint shows without a failure
    hung = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": False, "exit_code": 1, "failure": None, "hint": "hint: rank 1 (node0) waits"}}))
    assert '<p id="hint"><b>Hint:</b> rank 1 (node0) waits</p>' in hung
    plain = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": False, "exit_code": 1, "failure": {**failure, "earlier": None, "not_at_barrier": [],
                                                        "repeated": None}}}))
    assert not any(f'id="{name}"' in plain for name in ("hint", "earlier", "earlier-lines", "not-at-barrier",
                                                         "repeated", "earlier-users-frame"))


def test_a_file_several_ranks_wrote_is_a_warning_on_the_page():
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": True, "exit_code": 0, "written_by_several": {"model.pt": [0, 1, 2], "m.json": [1, 3]}}}))
    assert ('<ul id="written-by-several"><li>Warning: ranks 0-2 each wrote model.pt whole, in a directory every node'
            ' shares: writers of one file race,') in page
    assert "<li>Warning: ranks 1, 3 each wrote m.json whole," in page
    plain = render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                     "outcome": {"succeeded": True, "exit_code": 0}}))
    assert 'id="written-by-several"' not in plain and 'id="shuffled-alike"' not in plain


def test_the_bench_table_shows_each_figure_in_its_unit():
    """bench.json keeps figures in base units (bytes, seconds, bytes a second); the page's table
    showed them bare (busbw_Bps 960000000.0), as no one reads them; and a result's check as
    True/False, where the command line's table says ok/WRONG under ``check``."""
    bench = {"results": [
        {"op": "all_reduce", "size": 64 << 20, "time_s": 0.07, "iters": 5, "algbw_Bps": 0.96e9, "busbw_Bps": 0.96e9,
         "ok": True, "of_wire": 0.64},
        {"op": "broadcast", "size": 4, "time_s": 4.5e-5, "iters": 50, "algbw_Bps": 8.9e7, "busbw_Bps": 8.9e7,
         "ok": False, "of_wire": None}]}
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "bench": bench}))
    table = page[page.index('<table id="bench-table">'):]
    table = table[:table.index("</table>")]
    assert ("<tr><th>op</th><th>size</th><th>time</th><th>iters</th><th>algbw</th><th>busbw</th><th>check</th>"
            "<th>of wire</th></tr>") in table
    assert ("<tr><td>all_reduce</td><td>64M</td><td>70.0 ms</td><td>5</td><td>0.960 GB/s</td><td>0.960 GB/s</td>"
            "<td>ok</td><td>64%</td></tr>") in table
    assert ("<tr><td>broadcast</td><td>4</td><td>45.0 us</td><td>50</td><td>0.089 GB/s</td><td>0.089 GB/s</td>"
            "<td>WRONG</td><td>-</td></tr>") in table
    from orchestrate.bench.collectives import format_collectives
    assert [line.split()[-1] for line in format_collectives(bench).splitlines()[1:]] == ["ok", "WRONG"]


def test_a_bench_ddp_page_shows_a_table_of_its_runs_as_its_command_line_table_does(tmp_path):
    """bench ddp's bench.json kept its runs and no rows, so its page showed the plot alone, where
    docs/reports.md promised a plot and a table, as bench collectives' page has."""
    pytest.importorskip("matplotlib")  # (the bench draws its plot too)
    from orchestrate.bench.jobs import report_ddp

    run_dir = tmp_path / "20261207-010101-abcdef"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(plan(nproc=1)))
    (run_dir / "events.jsonl").write_text("\n".join(json.dumps(e) for e in started(nproc=1)) + "\n")
    (run_dir / "bench.json").write_text(json.dumps({  # what app.bench_ddp's rank 0 writes
        "model": "resnet50", "nodes": 2, "world_size": 2, "local_world_size": 1, "parameter_tensors": 161,
        "regimes": {"8": "cpu"}, "forms": [{"form": "local", "batch_size": 8, "step_s": 0.6904},
                                           {"form": "ddp-25MB", "batch_size": 8, "step_s": 0.8162}]}))
    said = report_ddp([run_dir]).table.splitlines()
    page = (run_dir / "report.html").read_text()
    table = page[page.index('<table id="bench-table">'):]
    table = table[:table.index("</table>")]
    assert ("<tr><th>nodes</th><th>world</th><th>batch</th><th>regime</th><th>form</th><th>step</th>"
            "<th>exposed comm</th><th>vs local</th></tr>") in table
    cells = [row.split("</td><td>") for row in re.findall(r"<tr><td>(.*?)</td></tr>", table)]
    assert cells == [["2", "2", "8", "cpu", "local", "690.4 ms", "0", "1.000x"],
                     ["2", "2", "8", "cpu", "ddp-25MB", "816.2 ms", "125.8 ms", "1.182x"]]
    assert [line.split() for line in said[1:3]] == [["2", "2", "8", "cpu", "local", "690.4", "0.0", "1.000x"],
                                                    ["2", "2", "8", "cpu", "ddp-25MB", "816.2", "125.8", "1.182x"]]


def test_a_sampler_shuffled_alike_every_epoch_is_a_warning_on_the_page():
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": True, "exit_code": 0, "shuffled_alike": {"train.py:14": {"epoch": 0, "ranks": [0, 1]}}}}))
    assert ('<ul id="shuffled-alike"><li>Warning: ranks 0, 1 iterated a shuffling DistributedSampler at train.py:14'
            ' again with its epoch still 0: every epoch reads the data in the same order; call sampler.set_epoch(epoch)'
            ' at the start of each epoch, before iterating its DataLoader</li></ul>') in page


def test_ranks_whose_collectives_ended_apart_are_a_warning_on_the_page():
    apart = "in the default group, the ranks made different numbers of collectives: rank 0 made 41, rank 1 made 40"
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": True, "exit_code": 0, "ended_apart": apart}}))
    assert (f"<p id=\"ended-apart\">Warning: the ranks' collectives ended apart: {apart} (every call returned,"
            " but gloo pairs") in page


def test_a_hang_for_a_data_loader_shows_its_worker_processes_on_the_page():
    from orchestrate.hangs.diagnosis import diagnose
    from tests.unit.test_hangs import IDLE_WORKER, LOADING, READING_WORKER, coll, loader, probe, snap

    def look(at: float) -> object:
        found = probe(at, r0=snap(0, frames=LOADING), r1=snap(1, (coll(5, state="entered"),)))
        found.loaders = {0: [loader(0, 0, IDLE_WORKER), loader(0, 1, READING_WORKER)]}
        return found

    hang = diagnose(look(5), look(0), {0, 1}, {}, 20).to_json()
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                    "outcome": {"succeeded": False, "exit_code": 1, "hang": hang}}))
    table = page[page.index('id="hang-loaders"'):].split("</table>")[0]
    assert "<td>0</td><td>1</td><td>201</td><td>__getitem__ at data.py:40</td>" in table
    assert "idle, waits for the indices of its next batch" in table
    assert "<h2>Where every rank waited</h2>" in page
    quiet = dict(hang, loaders={})
    assert 'id="hang-loaders"' not in render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                                             "outcome": {"succeeded": False, "hang": quiet}}))
    # the last look of a run ended from outside found it working: not said to have waited
    working = render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                       "outcome": {"succeeded": False, "hang": dict(hang, hung=False)}}))
    assert "<h2>Where every rank was</h2>" in working and "Where every rank waited" not in working


def test_a_hangs_hints_and_the_line_a_rank_skipped_a_call_at_are_kept_and_shown_on_the_page():
    """The terminal said where rank 1 skipped a call and what to rerun with; outcome.json kept the
    divergence alone, and the page showed neither (before 2026-12-07)."""
    from orchestrate.hangs.diagnosis import DEBUG_HINT, diagnose
    from tests.unit.test_hangs import coll, probe, snap, stack

    history = tuple(coll(seq, at="skip.py:9") for seq in range(1, 10))
    behind = snap(0, history + (coll(10, "float32[4]", "entered", at="skip.py:9"),), stack(9),
                  lines=(("skip.py:9", 10), ("skip.py:12", 2)))
    skipped = snap(1, history + (coll(10, "float32[1] from rank 0", "entered", op="broadcast", at="skip.py:12"),),
                   stack(12, call="broadcast"), lines=(("skip.py:9", 9), ("skip.py:12", 1)))
    found = diagnose(probe(5, r0=behind, r1=skipped), None, {0, 1}, {}, 30)
    fewer = ("rank 1 made 9 all_reduce(float32[4]) calls at skip.py:9 where rank 0 made 10: rank 1 skipped one (it"
             " went on to skip.py:12), by a condition on the rank or its data (a `continue` or an `if` around the"
             " call), or ran that loop fewer times")
    hang = found.to_json()
    assert hang["advice"] == [fewer, DEBUG_HINT]
    assert [f"  {line}" for line in hang["advice"]] == found.lines()[-2:]
    # the divergence is kept apart, not again among the advice (a review, session 113): said on a line
    # of its own where the headline does not say it (a working job whose collectives part)
    working = dataclasses.replace(found, hung=False)
    assert f"  first divergence: {hang['divergence']}" in working.lines()
    assert working.to_json()["advice"] and not any(line.startswith("first divergence")
                                                   for line in working.to_json()["advice"])
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                    "outcome": {"succeeded": False, "exit_code": 1, "hang": hang}}))
    advice = page[page.index('<ul id="hang-advice">'):].split("</ul>")[0]
    assert f"<li>{html.escape(fewer)}</li>" in advice and "--debug-collectives" in advice
    assert 'id="hang-advice"' not in render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                                            "outcome": {"succeeded": False,
                                                                        "hang": dict(hang, advice=[])}}))


def test_the_last_stacks_of_an_elastic_run_name_the_node_whose_ranks_did_not_answer():
    stacks = {"time": T0 + 20, "headline": "no progress for 0 s", "hung": True, "groups": [], "collectives": {},
              "activities": [{"rank": 0, "state": "collective", "detail": "waits in barrier() #1 at a.py:3"}],
              "unheard_nodes": ["node1: 2 of its 2 ranks did not answer: its container is paused"]}
    page = render_html(build_model({"run": plan(elastic=True), "events": started(), "progress": [], "stacks": stacks}))
    assert ('<ul id="hang-unheard-nodes"><li>node1: 2 of its 2 ranks did not answer: its container is paused</li></ul>'
            in page)
    assert 'id="hang-unheard-nodes"' not in render_html(build_model({"run": plan(elastic=True), "events": started(),
                                                              "progress": [], "stacks": dict(stacks, unheard_nodes=[])}))


def test_the_last_lines_of_a_node_that_failed_before_its_ranks_name_the_node_alone():
    failure = {"node": "node3", "rank": None, "describe": "node3 failed (exit code 1)", "reason": "",
               "last_lines": ["RendezvousClosedError"]}
    model = build_model({"run": plan(), "events": started(), "progress": [],
                         "outcome": {"succeeded": False, "exit_code": 1, "failure": failure}})
    assert "<p>Last lines of node3:</p>" in render_html(model)


def test_the_last_lines_of_a_preempted_nodes_rank_name_that_rank():
    failure = {"node": "node1", "rank": None, "describe": "node1 failed (injected fault preempt:node1@t=6): ...",
               "reason": "failed", "last_lines": ["saved at step 7"], "last_lines_of": "node1/rank1"}
    model = build_model({"run": plan(), "events": started(), "progress": [],
                         "outcome": {"succeeded": False, "exit_code": 1, "failure": failure}})
    assert "<p>Last lines of node1 rank 1:</p>" in render_html(model)


def test_a_paused_node_is_hung_from_the_fault_to_its_detection():
    events = started() + [ev(4.9, "fault", node="node1", spec="pause:node1@t=4.9", action="pause", step=None),
                          ev(14.9, "node-exited", node="node0", exit_code=1),
                          ev(14.91, "node-failed", node="node0", exit_code=1, rank=0),
                          ev(14.95, "node-unresponsive", node="node1", reason="its container is paused (hung)"),
                          ev(15.2, "node-killed", node="node1"), ev(15.3, "node-exited", node="node1", exit_code=137)]
    model = build_model({"run": plan(), "events": events, "progress": []})
    assert phases(model, "node1")[-2:] == [("running", 3.1, 4.9), ("hung", 4.9, 15.3)]
    assert ("hung", 4.9, 15.3) in phases(model, "node1-rank2")  # its ranks hang with it
    kinds = {(m.kind, m.lane): round(m.time, 2) for m in model.markers}
    assert kinds[("fault", "node1")] == 4.9 and kinds[("detected", "node1")] == 14.95
    fault = next(m for m in model.markers if m.kind == "fault")
    assert fault.label == "fault injected: pause:node1@t=4.9 at 4.9 s"
    assert model.outcome == "running"  # no outcome.json yet: a run still going


def test_an_elastic_recovery_restarts_every_lane_and_reports_the_resume():
    events = started(nproc=1) + [
        ev(8.0, "fault", node="node1", spec="kill:node1@step=12", action="kill", step=12),
        ev(8.2, "node-exited", node="node1", exit_code=137),
        ev(8.3, "restart", node="node1", cause="injected fault kill:node1@step=12", step=12),
        ev(12.0, "node-running", node="node0"), ev(12.0, "rank-started", node="node0", rank=0),
        ev(12.1, "node-running", node="node1"), ev(12.1, "rank-started", node="node1", rank=1),
        ev(13.0, "resumed", node="node1", step=9, recovery_s=4.7, steps_lost=4),
        ev(20.0, "node-exited", node="node0", exit_code=0), ev(20.1, "node-exited", node="node1", exit_code=0)]
    records = {"run": plan(nproc=1, elastic=True), "events": events,
               "progress": steps(0, 4.0, 12) + steps(0, 13.0, 10), "outcome": {
                   "succeeded": True, "exit_code": 0,
                   "recoveries": [{"node": "node1", "cause": "injected fault kill:node1@step=12", "recovery_s": 4.7,
                                   "steps_lost": 4, "step_before": 12, "resumed_from": 8}]}}
    model = build_model(records)
    assert [lane.key for lane in model.lanes] == ["node0", "node0-rank0", "node1", "node1-rank1"]  # from the events
    assert [p[0] for p in phases(model, "node0")] == ["bring-up", "rendezvous", "running", "restarting", "running"]
    assert ("restarting", 8.3, 12.1) in phases(model, "node1")
    restart = next(m for m in model.markers if m.kind == "restart")
    resumed = next(m for m in model.markers if m.kind == "resumed")
    assert restart.lane is None and round(restart.time, 1) == 8.3
    assert resumed.label == "resumed at step 9 at 13.0 s: recovery 4.7 s, 4 steps lost"
    assert 'id="recoveries"' in render_html(model)
    # a plain script's workers did not say where they resumed
    records["events"] = [e if e["event"] != "resumed" else {**e, "steps_lost": None} for e in events]
    records["outcome"]["recoveries"][0].update(steps_lost=None, resumed_from=None)
    unsaid_model = build_model(records)
    unsaid = next(m for m in unsaid_model.markers if m.kind == "resumed")
    assert unsaid.label == "resumed at step 9 at 13.0 s: recovery 4.7 s, steps lost not known"
    table = render_html(unsaid_model).split('id="recoveries"')[1].split("</table>")[0]
    assert "None" not in table and "<td>-</td><td>-</td><td>4.7 s</td>" in table



def test_a_fault_in_an_attempt_that_counts_its_steps_from_1_again_says_that_count_on_the_page():
    """A note (session 112) left alone: the summary said a fault "at step 3 of the attempt after
    injected fault kill:node1@step=7, counted from 1 again", and the page said "step 7" (the job's
    highest step, which events.jsonl kept) for the same fault. The event keeps the summary's step,
    with the recovery after which it was counted from 1 again, and the page says both."""
    anew = {"node": "node1", "cause": "injected fault kill:node1@step=7"}
    events = started(nproc=1) + [
        ev(8.0, "fault", node="node1", spec="kill:node1@step=7", action="kill", step=7),
        ev(8.3, "restart", node="node1", cause="injected fault kill:node1@step=7", step=7),
        ev(10.0, "resumed", node="node1", step=1, recovery_s=1.7, steps_lost=None, step_counted_anew_after=anew),
        ev(12.0, "fault", node="node0", spec="kill:node0@step=3", action="kill", step=3,
           step_counted_anew_after=anew),
        ev(12.3, "restart", node="node0", cause="injected fault kill:node0@step=3", step=3,
           step_counted_anew_after={"node": "node1", "cause": "its death"})]
    model = build_model({"run": plan(nproc=1, elastic=True), "events": events})
    said = " of the attempt after injected fault kill:node1@step=7, counted from 1 again"
    assert [m.label for m in model.markers if m.kind in ("fault", "restart")] == [
        "fault injected: kill:node1@step=7 at 8.0 s, step 7",
        "elastic restart at 8.3 s: node1 died (injected fault kill:node1@step=7), at step 7; every node restarts",
        f"fault injected: kill:node0@step=3 at 12.0 s, step 3{said}",
        "elastic restart at 12.3 s: node0 died (injected fault kill:node0@step=3), at step 3 of the attempt after"
        " node1's death, counted from 1 again; every node restarts"]
    [resumed] = [m.label for m in model.markers if m.kind == "resumed"]
    assert resumed == f"resumed at step 1{said} at 10.0 s: recovery 1.7 s, steps lost not known"
    listed = [text for _, node, kind, text in model.events if kind == "fault"]
    assert listed == ["spec kill:node1@step=7, action kill, step 7",
                      f"spec kill:node0@step=3, action kill, step 3{said}"]
    assert "{" not in render_html(model).split('id="events"')[1]  # no record's dict on the page

def test_the_page_is_self_contained_and_marks_times_in_the_svg(tmp_path):
    events = started() + [ev(4.9, "fault", node="node1", spec="pause:node1@t=4.9", action="pause", step=None)]
    model = build_model({"run": plan(), "events": events, "progress": steps(0, 4.0, 5)})
    page = render_html(model)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing loaded from the network
    assert "<script" not in page
    assert re.search(r'<g id="lane-node0"', page) and re.search(r'<g id="lane-node1"', page)
    fault = re.search(r'<g id="marker-fault-0" data-time="([\d.]+)">\s*<title>([^<]+)</title>', page)
    assert fault and float(fault[1]) == pytest.approx(4.9) and "pause:node1@t=4.9" in fault[2]


def test_a_fault_to_the_runs_store_and_its_death_are_lines_across_every_lane_not_a_nodes_marks():
    events = started() + [ev(4.9, "fault", node="store", spec="kill:store@step=5", action="kill", step=5),
                          ev(5.0, "store-died", service="rdzv-store", exit_code=137)]
    model = build_model({"run": plan(), "events": events, "progress": steps(0, 4.0, 5)})
    marks = [(m.kind, m.lane, m.label) for m in model.markers if m.kind in ("fault", "failed")]
    assert marks == [("fault", None, "fault injected: kill:store@step=5 at 4.9 s, step 5"),
                     ("failed", None, "the run's rendezvous store (rdzv-store) died (exit code 137) at"
                                      " 5.0 s")]
    assert "store" not in [lane.key for lane in model.lanes]
    page = render_html(model)
    assert re.search(r'<g id="marker-fault-0" data-time="[\d.]+">\s*<title>fault injected: kill:store@step=5', page)
    # a node's fault keeps its own lane
    node_fault = [ev(4.9, "fault", node="node1", spec="pause:node1@t=4.9", action="pause", step=None)]
    assert [m.lane for m in build_model({"run": plan(), "events": started() + node_fault}).markers
            if m.kind == "fault"] == ["node1"]


def test_a_run_of_eight_nodes_stays_small():
    nodes, nproc = 8, 8
    events = started(nodes, nproc) + [ev(60.0 + n, "node-exited", node=f"node{n}", exit_code=0) for n in range(nodes)]
    progress = [r for rank in range(nodes * nproc) for r in steps(rank, 4.0, 200, every=0.25)]
    page = render_html(build_model({"run": plan(nodes, nproc), "events": events, "progress": progress}))
    assert len(page.encode()) < 3 * 2**20, len(page)


def test_events_file_roundtrip_skips_a_torn_line(tmp_path):
    record_event(tmp_path, "bring-up", nodes=["node0"])
    with open(tmp_path / "events.jsonl", "a") as handle:
        handle.write('{"time": 1, "ev')
    assert [e["event"] for e in read_events(tmp_path)] == ["bring-up"]


def test_report_command_rebuilds_the_page_of_a_run_by_id_prefix(tmp_path, capsys):
    from tests.fakes import FakeDockerClient

    engine = FakeDockerClient()  # (it has no such run: the page says so, not "running")
    run_dir = tmp_path / "runs" / "20261121-101010-abcdef"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(plan()))
    (run_dir / "events.jsonl").write_text("\n".join(json.dumps(e) for e in started()) + "\n")
    out = io.StringIO()
    assert main(["report", "20261121-1010", "--runs-dir", str(tmp_path / "runs")], out=out, client=engine) == 0
    assert out.getvalue().strip() == str((run_dir / "report.html").resolve())
    page = (run_dir / "report.html").read_text()
    assert "One lane per node" in page and "ENDED, with no record of how: the engine no longer has the run" in page
    assert '<p id="outcome" class="outcome unrecorded">' in page  # not drawn as running
    assert main(["report", "nope", "--runs-dir", str(tmp_path / "runs")], client=engine) == 2
    assert (f"error: no run nope in the engine or in {tmp_path / 'runs'} (see `python -m orchestrate ps`)"
            in capsys.readouterr().err)
    assert main(["report", "101010", "--runs-dir", str(tmp_path / "runs")], client=engine) == 2  # its middle
    assert capsys.readouterr().err == (f"error: no run id in the engine or in {tmp_path / 'runs'} starts or ends with"
                                       " 101010"
                                       " (20261121-101010-abcdef has it in its middle: give the whole id or its end)\n")
    other = tmp_path / "runs" / "20261121-111111-fedcba"
    other.mkdir()
    (other / "run.json").write_text(json.dumps(plan()))
    assert main(["report", "abcdef", "--runs-dir", str(tmp_path / "runs")], out=io.StringIO(), client=engine) == 0
    assert main(["report", "20261121", "--runs-dir", str(tmp_path / "runs")], client=engine) == 2
    assert capsys.readouterr().err.strip().endswith(
        "'20261121' names 2 runs in " + str(tmp_path / "runs") + ": 20261121-101010-abcdef, 20261121-111111-fedcba;"
        " give more of the run id")
    assert find_run_dir(tmp_path / "runs", str(run_dir)) == run_dir
    assert load_run(run_dir)["outcome"] is None and write_report(run_dir).is_file()


def test_report_finds_a_run_still_in_the_engine_where_its_labels_put_its_directory(tmp_path, capsys, monkeypatch):
    from orchestrate.engine.labels import COMPOSE_PROJECT_LABEL, NODE_RANK_LABEL, RUN_DIR_LABEL, RUN_ID_LABEL
    from tests.fakes import FakeDockerClient

    monkeypatch.chdir(tmp_path)  # (./runs has no such run: it was started with --runs-dir elsewhere)
    engine = FakeDockerClient()
    run_dir = tmp_path / "elsewhere" / "20261207-165557-85f727"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(plan()))
    (run_dir / "events.jsonl").write_text("\n".join(json.dumps(e) for e in started()) + "\n")
    engine.running("ddp-20261207-165557-85f727-node0-1", {RUN_ID_LABEL: "20261207-165557-85f727",
                                                           COMPOSE_PROJECT_LABEL: "ddp-20261207-165557-85f727",
                                                           RUN_DIR_LABEL: str(run_dir), NODE_RANK_LABEL: "0"})
    out = io.StringIO()
    assert main(["report", "85f727"], out=out, client=engine) == 0
    assert out.getvalue().strip() == str((run_dir / "report.html").resolve())
    # a run in neither: gone from the engine, its directory in a --runs-dir not given
    assert main(["report", "20261201"], client=engine) == 2
    assert capsys.readouterr().err.endswith("error: no run 20261201 in the engine or in runs (see `python -m"
                                            " orchestrate ps`; for a run no longer in the engine, give its"
                                            " --runs-dir)\n")


def test_step_times_show_a_straggler_and_the_chaos_verdict_is_on_the_page():
    fast = [ProgressRecord(0, T0 + 4.0 + s * 0.2, step=s + 1) for s in range(20)]
    slow = [ProgressRecord(1, T0 + 4.0 + s * 0.2 + (1.5 if s >= 10 else 0.0), step=s + 1) for s in range(20)]
    chaos = {"seed": 7, "holds": False, "failures": ["final.pt: differs (tensors; largest difference 0.23 at w)"],
             "schedule": [{"fault": "slow:node1,cpus=0.1@step=10..15", "fired": "yes", "at": "4.1 s", "at_step": "10",
                           "why_not": ""}],
             "comparisons": [{"path": "final.pt", "kind": "tensors", "equal": False, "max_difference": 0.23,
                              "where": "w", "problem": ""}], "reference_run": "r0"}
    model = build_model({"run": plan(nproc=1), "events": started(nproc=1), "progress": fast + slow, "chaos": chaos})
    times = model.step_times()
    assert max(d for _, d in times[1]) == pytest.approx(1.7) and max(d for _, d in times[0]) == pytest.approx(0.2)
    page = render_html(model)
    assert re.search(r'<g id="step-time-rank1">\s*<title>rank 1: median 0\.200 s a step, slowest 1\.700 s', page)
    assert 'id="chaos-verdict" class="outcome failed">The verdict does not hold (seed 7' in page
    assert "slow:node1,cpus=0.1@step=10..15" in page and "final.pt: differs" in page


def test_a_rank_stopped_in_its_debugger_is_marked_on_its_lane_from_the_stop_to_its_leaving():
    events = started() + [ev(6.0, "debugger", rank=3, node="node1", state="waits", call="an uncaught error (--pdb)",
                             where="crash.py:13 in <module>", what="uncaught RuntimeError: mat1 and mat2"),
                          ev(9.0, "debugger", rank=3, node="node1", state="attached", call="an uncaught error (--pdb)",
                             where="crash.py:13 in <module>", what="uncaught RuntimeError: mat1 and mat2"),
                          ev(20.5, "debugger", rank=3, node="node1", state="left", call="an uncaught error (--pdb)",
                             where="crash.py:13 in <module>", what="uncaught RuntimeError: mat1 and mat2")]
    model = build_model({"run": plan(), "events": events, "progress": []})
    marks = [(m.kind, m.lane, round(m.time, 2), m.label) for m in model.markers]
    assert marks == [("debugger", "node1-rank3", 6.0, "rank 3 stopped in its debugger at 6.0 s: crash.py:13 in <module>:"
                                                     " uncaught RuntimeError: mat1 and mat2"),
                     ("debugger-left", "node1-rank3", 20.5, "rank 3 left its debugger at 20.5 s")]
    # its lane is in its debugger from the stop to its leaving; its node's and the other ranks' run on
    assert phases(model, "node1-rank3") == [("running", 3.1, 6.0), ("in its debugger", 6.0, 20.5)]
    assert phases(model, "node1-rank2") == [("running", 3.1, 20.5)] and phases(model, "node1")[-1][0] == "running"
    went_on = build_model({"run": plan(), "events": events + [ev(25.0, "node-exited", node="node1", exit_code=0)],
                           "progress": []})
    assert phases(went_on, "node1-rank3") == [("running", 3.1, 6.0), ("in its debugger", 6.0, 20.5),
                                              ("running", 20.5, 25.0)]
    never_left = build_model({"run": plan(), "events": events[:-1] + [ev(30.0, "node-exited", node="node1",
                                                                           exit_code=1)], "progress": []})
    assert phases(never_left, "node1-rank3")[-1] == ("in its debugger", 6.0, 30.0)  # until its node ended
    page = render_html(model)
    stop = re.search(r'<g id="marker-debugger-0" data-time="([\d.]+)">\s*<title>([^<]+)</title>', page)
    assert stop and float(stop[1]) == pytest.approx(6.0) and "uncaught RuntimeError" in stop[2]
    assert '<g id="marker-debugger-left-0"' in page


def test_a_stop_in_the_debugger_ends_with_its_process_and_is_drawn_on_its_own_nodes_lane_only():
    def stop(at: float, node: str) -> dict:
        return ev(at, "debugger", rank=1, node=node, state="waits", call="breakpoint()", where="t.py:3 in <module>",
                  what="breakpoint()")
    events = started(nproc=1) + [  # an elastic run: rank 1 stops on node1, then (after a restart) on node0
        stop(5.0, "node1"), ev(8.3, "restart", node="node0", cause="killed", step=3),
        ev(12.0, "node-running", node="node0"), ev(12.0, "rank-started", node="node0", rank=1),
        ev(12.1, "node-running", node="node1"), ev(12.1, "rank-started", node="node1", rank=0),
        stop(15.0, "node0"), ev(18.0, "node-exited", node="node0", exit_code=1),
        ev(20.0, "node-exited", node="node1", exit_code=0)]
    model = build_model({"run": plan(nproc=1, elastic=True), "events": events, "progress": []})
    on_node1 = [p for p in phases(model, "node1-rank1") if p[0] == "in its debugger"]
    on_node0 = [p for p in phases(model, "node0-rank1") if p[0] == "in its debugger"]
    assert on_node1 == [("in its debugger", 5.0, 8.3)]  # its process ended with the restart
    assert on_node0 == [("in its debugger", 15.0, 18.0)]  # never left: until its node exited


def test_a_peer_an_error_names_by_address_is_named_by_its_node_as_the_summary_names_it():
    lost = "RuntimeError: [pair.cc:547] Connection closed by peer [172.26.0.2]:27042"
    failure = {"node": "node1", "rank": 1, "describe": f"node1 rank 1 failed (exit code 1): {lost}", "reason": "",
               "then": [{"node": "node0", "rank": 0, "exception": lost}], "last_lines": []}
    outcome = {"succeeded": False, "exit_code": 1, "failure": failure}
    # the addresses outcome.json kept (the summary's own), else those the nodes came up with, from events.jsonl
    for recorded, events in (({"node_addresses": {"172.26.0.2": "node1"}}, started()),
                             ({}, [ev(0.5, "node-addresses", addresses={"172.26.0.2": "node1",
                                                                         "172.26.0.3": "node0"})] + started())):
        page = render_html(build_model({"run": plan(), "events": events, "progress": [],
                                        "outcome": {**outcome, **recorded}}))
        assert f"<li>node0 rank 0: {lost} (node1)</li>" in page
        assert re.search(r'id="root-cause"><b>Root cause:</b> node1 rank 1 failed .*27042 \(node1\)</p>', page)
    # none recorded (an address of no node): as it was
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": outcome}))
    assert f"<li>node0 rank 0: {lost}</li>" in page


def test_the_pages_header_shows_the_link_and_node_sizes_the_plan_recorded_and_nothing_for_an_older_plan(tmp_path):
    from orchestrate.outcome.run_dirs import read_conditions, recorded_conditions

    shaped = {**plan(), "link": "rate=100mbit,delay=20ms", "cpus_per_node": 1.5, "memory_per_node": 2 << 30}
    said = "link rate=100mbit,delay=20ms; each node 1.5 CPUs, 2g memory"
    assert recorded_conditions(shaped) == said
    assert recorded_conditions({**plan(), "link": None, "cpus_per_node": None, "memory_per_node": 1 << 30}) == (
        "each node 1g memory")
    assert recorded_conditions({**plan(), "cpus_per_node": 1.0}) == "each node 1 CPU"  # (an older plan: no link)
    page = render_html(build_model({"run": shaped, "events": started(), "progress": []}))
    assert f'<p id="conditions">Nodes: {said}</p>' in page
    assert 'id="conditions"' not in render_html(build_model({"run": plan(), "events": started(), "progress": []}))
    (tmp_path / "run.json").write_text(json.dumps(shaped))  # what an attach reads, for its summary
    assert read_conditions(tmp_path) == said
    (tmp_path / "run.json").write_text("{")
    assert read_conditions(tmp_path) == "" and read_conditions(tmp_path / "gone") == ""


def test_the_bench_tables_counts_are_whole_and_a_time_of_none_is_0():
    """A count of a million iterations is 1000000, not 1e+06; no exposed time is 0, not 0.0 us
    beside the others' ms."""
    from orchestrate.report.page import bench_cell

    assert [bench_cell("iters", 1_000_000), bench_cell("exposed_comm_s", 0), bench_cell("exposed_comm_s", 0.0)] == [
        "1000000", "0", "0"]
    assert [bench_cell("ratio", 1.5), bench_cell("time_s", 7e-05)] == ["1.5", "70.0 us"]


def test_the_report_page_says_the_divergence_once_where_the_headline_says_it():
    from orchestrate.report.page import hang_section

    divergence = "collective #1: rank 0 entered barrier() at t.py:8; ranks 1-3 entered all_reduce(float32[4]) at t.py:9"
    said = "".join(hang_section({"headline": f"no progress for 20 s: {divergence}", "divergence": divergence}))
    assert said.count("entered barrier()") == 1 and "First divergence:" not in said
    apart = "".join(hang_section({"headline": "no progress for 20 s: ranks 0-3: barrier at t.py:8",
                                  "divergence": divergence}))
    assert "First divergence:</b> collective #1" in apart


def test_the_files_the_job_loaded_from_before_the_run_are_a_note_on_the_page():
    """outcome.json kept them, and the summary said them; the page did not."""
    page = render_html(build_model({"run": plan(), "events": started(), "progress": [], "outcome": {
        "succeeded": True, "exit_code": 0, "loaded_from_before": ["ckpt/step_9/"]}}))
    assert ('<p id="loaded-from-before">Note: the job loaded ckpt/step_9/ with dcp.load, which its work directory held'
            ' before this run (an earlier run&#x27;s save? where the job should not resume from it, remove it or give'
            ' each run a directory of its own)</p>') in page
    plain = render_html(build_model({"run": plan(), "events": started(), "progress": [],
                                     "outcome": {"succeeded": True, "exit_code": 0, "loaded_from_before": []}}))
    assert 'id="loaded-from-before"' not in plain

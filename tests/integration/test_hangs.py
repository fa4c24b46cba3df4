"""Seeing inside stuck jobs, on real nodes with plain torch scripts: a desync ends as HUNG naming
both call sites, a rank that exited early is named as the one the others wait for, ``stacks`` shows the odd rank apart, stopped ranks and paused nodes are named
(by ``stacks`` too, with the faults that did it),
--collective-timeout reaches any script, --debug-collectives names the mismatch (in a DDP job,
which torch's DETAIL level would crash on gloo without the hook's guard), and a rank busy in a
long step is not called hung, a test's time limit says where the ranks hung, ranks each in a
store on its own node's localhost are told so as they call init_process_group, and a rank stopped
at breakpoint() is debugged from another terminal with the command the run gives."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import ROOT, leftovers, read_to_end, remove_project, start_run, wait_for

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"


@pytest.fixture
def workdir(tmp_path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for job in ("desync.py", "ddp_desync.py", "wait_apart.py", "long_step.py", "steps_forever.py", "exits_early.py",
                "late_to_barrier.py", "tutorial_setup.py", "breakpoints.py", "post_mortem.py"):
        shutil.copy(JOBS / job, work)
    return work


def line_of(job: str, text: str) -> int:
    """The line of ``job`` that holds ``text``."""
    return next(i for i, line in enumerate((JOBS / job).read_text().splitlines(), 1) if text in line)


def desync_lines() -> tuple[int, int]:
    """The lines of desync.py's every-step all_reduce and of rank 0's extra one."""
    return line_of("desync.py", "dist.all_reduce(stats)"), line_of("desync.py", "# DESYNC")


def test_a_desync_ends_as_hung_naming_both_call_sites(orchestrate_run, docker_client, workdir):
    every, extra = desync_lines()
    started = time.monotonic()
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--hang-timeout", "15", "--", "desync.py")
    took = time.monotonic() - started
    assert result.code == 1, result.output[-3000:]
    assert took < 300  # ended by the watchdog, not by torch's 30-minute timeout (a loaded CI machine is slow)
    summary = result.output.split("=== run")[-1]
    headline = next(line for line in summary.splitlines() if line.startswith("HUNG:"))
    assert "(--hang-timeout 15)" in headline
    assert (f"rank 0 called all_reduce(float32[1]) at desync.py:{extra}; rank 1 called all_reduce(float32[4]) at"
            f" desync.py:{every}") in headline  # where they part: rank 0 went on past it (said since 2026-12-07)
    assert "rerun with --debug-collectives" in summary
    outcome = json.loads((result.run_dir / "outcome.json").read_text())
    assert outcome["hang"]["divergence"] in headline and outcome["failure"]["describe"] == headline
    assert {g["where"] for g in outcome["hang"]["groups"]} == {f"all_reduce at desync.py:{every} in <module>"}
    assert "Where every rank waited" in (result.run_dir / "report.html").read_text()
    assert leftovers(docker_client, result.project) == []


def test_a_tests_time_limit_ends_a_hung_run_saying_where_every_rank_waits(docker_client, workdir, tmp_path):
    """A plugin test's ``timeout=`` under --hang-diagnose-after's 120 s: the launcher looks at
    every rank before it stops them, and the failed assertion says where they hung."""
    from orchestrate.testing.cluster import DdpCluster

    every, extra = desync_lines()
    out = io.StringIO()
    result = DdpCluster(workdir, tmp_path / "runs", out=out).run("desync.py", nodes=2, cpu=True, timeout=40)
    try:
        assert result.error == "timed out: the job did not end within 40 s", out.getvalue()[-3000:]
        assert result.hang is not None and result.hang.hung, out.getvalue()[-3000:]
        said = (f"rank 0 called all_reduce(float32[1]) at desync.py:{extra}; rank 1 called all_reduce(float32[4]) at"
                f" desync.py:{every}")
        assert said in result.hang.headline
        text = out.getvalue()
        assert text.index("[orchestrate] at the time limit, hung: no progress for ") < text.index(
            "[orchestrate] the run did not end within its time limit of 40 s")
        assert "while hung: no progress for " in repr(result) and said in repr(result)
        assert leftovers(docker_client, f"ddp-{result.run_id}") == []
    finally:
        remove_project(docker_client, f"ddp-{result.run_id}")


def test_a_rank_that_returned_before_init_is_named_as_exited_where_the_other_waits(orchestrate_run, docker_client,
                                                                                    workdir):
    """Until 2026-11-27 the watchdog never judged it: the exited rank could not answer, and no
    one said why, so the run sat in init_process_group for torch's 30 minutes."""
    init = line_of("exits_early.py", "dist.init_process_group")
    started = time.monotonic()
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--hang-timeout", "10", "--",
                             "exits_early.py")
    took = time.monotonic() - started
    assert result.code == 1, result.output[-3000:]
    assert took < 300  # the watchdog ended it (a loaded CI machine is slow)
    summary = result.output.split("=== run")[-1]
    assert re.search(r"^HUNG: no progress for \d+ s \(--hang-timeout 10\): rank 0: init_process_group at"
                     rf" exits_early\.py:{init} in main; rank 1: exited$", summary, re.M), summary
    assert "  rank 1: has exited: its script returned on node1, whose torchrun runs on" in summary
    assert "  a rank that exits while the others wait for it" in summary
    outcome = json.loads((result.run_dir / "outcome.json").read_text())
    assert [a["state"] for a in outcome["hang"]["activities"]] == ["idle", "exited"]
    assert leftovers(docker_client, result.project) == []


def test_ranks_of_two_nodes_each_in_a_store_on_its_own_localhost_are_told_so_as_they_call_init(orchestrate_run,
                                                                                                  docker_client,
                                                                                                  workdir):
    """The DDP tutorial's setup() under torchrun on two nodes: said a few seconds in, as the calls are
    made, before the watchdog looks at the stacks; before 2026-11-30 only at --hang-diagnose-after
    (2 minutes) or the run's end."""
    init = line_of("tutorial_setup.py", "# INIT")
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--hang-timeout", "10", "--",
                             "tutorial_setup.py")
    assert result.code == 1, result.output[-3000:]
    warning = ("[orchestrate] warning: ranks 0, 1 called init_process_group for a store at localhost:12355, from the"
               " MASTER_ADDR and MASTER_PORT the script set itself: each node's ranks look for it on their own node"
               " and never meet the others' ranks, so they wait in init_process_group until it times out")
    assert result.output.count(warning) == 1, result.output[-3000:]
    assert result.output.index(warning) < result.output.index("[orchestrate] HUNG: no progress for")
    summary = result.output.split("=== run")[-1]
    assert re.search(rf"^HUNG: no progress for \d+ s \(--hang-timeout 10\): ranks 0, 1: init_process_group at"
                     rf" tutorial_setup\.py:{init} in setup$", summary, re.M), summary
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("init-will-wait") == 1
    assert leftovers(docker_client, result.project) == []


def test_collective_timeout_ends_a_plain_scripts_hang_as_hung(orchestrate_run, docker_client, workdir):
    every, extra = desync_lines()
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--collective-timeout", "10",
                             "--hang-diagnose-after", "0", "--", "desync.py")
    assert result.code == 1, result.output[-3000:]
    assert "Timed out waiting 10000ms" in result.output  # the script's own process group got the timeout
    headline = next(line for line in result.output.splitlines() if line.startswith("HUNG:"))
    assert headline.startswith("HUNG: a collective timed out on node")
    assert f"rank 0 called all_reduce(float32[1]) at desync.py:{extra}" in headline
    assert leftovers(docker_client, result.project) == []


def test_a_monitored_barrier_names_the_late_rank_and_where_it_was_when_it_was_ended(orchestrate_run, docker_client,
                                                                                   workdir):
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--", "late_to_barrier.py")
    assert result.code == 1, result.output[-3000:]
    summary = result.output.split("=== run")[-1]
    assert "FAILED: node0 rank 0 failed (exit code 1): RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier" \
        in summary, summary
    # rank 1 wrote its stacks as SIGTERM ended it (its node stopped after rank 0 failed)
    assert (f"  rank 1 did not pass the barrier in time: it was in read_shard at late_to_barrier.py:"
            f"{line_of('late_to_barrier.py', '# STUCK')} when torchrun ended it\n") in summary, summary
    assert "every rank reached the barrier" not in result.output
    # the same line in outcome.json and on the report page
    outcome = json.loads((result.run_dir / "outcome.json").read_text())
    where = f"read_shard at late_to_barrier.py:{line_of('late_to_barrier.py', '# STUCK')}"
    assert outcome["stopped_where"]["1"] == where
    assert outcome["failure"]["not_at_barrier"] == [f"rank 1 did not pass the barrier in time: it was in {where} when"
                                                    " torchrun ended it"]
    assert 'id="not-at-barrier"' in (result.run_dir / "report.html").read_text()
    assert leftovers(docker_client, result.project) == []


def test_debug_collectives_names_the_mismatch_of_a_ddp_job_in_one_line(orchestrate_run, docker_client, workdir):
    # rank 0 alone all_reduces its loss (float32[1]) at step 3; rank 1 is in DDP's gradient bucket (4x16 + 4)
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--debug-collectives", "--", "ddp_desync.py")
    assert result.code == 1, result.output[-3000:]
    assert "rank 1 step 2 done" in result.output, result.output[-3000:]  # DDP was built, and trained
    failed = next(line for line in result.output.splitlines() if line.startswith("FAILED:"))
    assert re.search(r"collectives differ \(--debug-collectives\): rank (0|1) ran ALLREDUCE of Float\[(1|68)\] \(torch's"
                     r" sequence number \d+\); rank (0|1) ran ALLREDUCE of Float\[(1|68)\] \(torch's sequence number"
                     r" \d+\)", failed), failed
    assert "Float[1]" in failed and "Float[68]" in failed
    # torch names the ops; the ranks' own records name the lines
    sync, extra = line_of("ddp_desync.py", "loss.backward()"), line_of("ddp_desync.py", "# DESYNC")
    said = (f"  where, by the ranks' collective records: collective #7: rank 0 entered all_reduce(float32[1]) at"
            f" ddp_desync.py:{extra}; rank 1 entered all_reduce(gradients of DDP(Linear)) at ddp_desync.py:{sync}")
    # and how #7 stands to torch's sequence number said above it, so one call does not read as two
    assert re.search(rf"^{re.escape(said)} \((the same call as torch's sequence number 6|#7 counts from 1 the calls)",
                     result.output, re.M), result.output[-3000:]
    outcome = json.loads((result.run_dir / "outcome.json").read_text())
    assert outcome["failure"]["divergence"] in result.output and "#7" in outcome["failure"]["divergence"]
    assert result.output.count("DDP's settings log is skipped on gloo") == 1  # said once, by rank 0
    assert leftovers(docker_client, result.project) == []


def test_stacks_of_a_detached_run_show_the_odd_rank_apart(docker_client, workdir, tmp_path, capsys):
    out = io.StringIO()
    code = main(["run", "--detach", "--nodes", "3", "--workdir", str(workdir), "--runs-dir", str(tmp_path / "runs"),
                 "--hang-timeout", "900", "--hang-diagnose-after", "8", "--", "wait_apart.py"], out=out)
    run_id = out.getvalue().strip()
    try:
        assert code == 0, out.getvalue()
        # nothing watches a detached run for the hang it asked to end: said as it detaches
        assert ("[orchestrate] --hang-timeout 900 acts only while `attach` follows the run: nobody watches it while"
                " it is detached\n") in capsys.readouterr().err
        run_dir = tmp_path / "runs" / run_id
        deadline = time.monotonic() + 120
        while len(re.findall(r"rank \d ready", "".join(p.read_text() for p in run_dir.glob("node*/torchrun/**/stdout.log")))) < 3:
            assert time.monotonic() < deadline, "the ranks never got ready"
            time.sleep(0.5)
        out = io.StringIO()
        assert main(["stacks", run_id, "--interval", "1"], out=out) == 0, out.getvalue()
        said = out.getvalue().splitlines()
        assert said[0] == f"run {run_id}: 3 of 3 ranks answered"
        # the odd one out first: rank 2 in its own function, then ranks 0 and 1 in the barrier
        sleep = line_of("wait_apart.py", "time.sleep(3600)")
        barrier = max(i for i, line in enumerate((JOBS / "wait_apart.py").read_text().splitlines(), 1)
                      if line == "dist.barrier()")  # the second one, where ranks 0 and 1 wait
        assert said[1] == f"rank 2: load_next_batch at wait_apart.py:{sleep}"
        group = next(i for i, line in enumerate(said) if line.startswith("ranks 0, 1:"))
        assert said[group] == f"ranks 0, 1: barrier at wait_apart.py:{barrier} in <module>" and group > 1
        assert (f"ranks 0, 1 wait in barrier() #2 at wait_apart.py:{barrier}; rank 2 is at #1 (not in a collective:"
                f" load_next_batch at wait_apart.py:{sleep})" in said)
        assert json.loads((run_dir / "stacks.json").read_text())["groups"][0]["ranks"] == [2]
        # faults done from another terminal are named where they silence a rank (from fault's notes)
        assert main(["fault", run_id, "hang-rank:1", "pause:node2"], out=io.StringIO()) == 0
        out = io.StringIO()
        assert main(["stacks", run_id, "--interval", "1"], out=out) == 0, out.getvalue()
        said = out.getvalue().splitlines()
        assert said[0] == f"run {run_id}: 1 of 3 ranks answered", said
        assert "rank 1: is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:1)" in said, said
        assert "rank 2: is on node2, whose container is paused (injected fault pause:node2)" in said, said
        written = json.loads((run_dir / "stacks.json").read_text())
        assert written["headline"].startswith("no rank made progress between two looks "), written["headline"]
        # `stop` of the quiet job looks first: where every rank waits, said there and in the summary
        # `ps` says how long it has been quiet, and names it once past its --hang-diagnose-after (8 s)
        deadline = time.monotonic() + 30
        while True:
            out = io.StringIO()
            assert main(["ps"], out=out) == 0, out.getvalue()
            listed = out.getvalue().splitlines()
            named = f"run {run_id}: no worker has printed for "
            if any(line.startswith(named) for line in listed):
                break
            assert time.monotonic() < deadline, f"ps never named the quiet job: {listed}"
            time.sleep(0.5)
        [row] = [line.split() for line in listed if line.startswith(run_id)]
        assert row[2] == "running" and re.fullmatch(r"\d+[sm]", row[5]) and (row[5][-1] == "m" or int(row[5][:-1]) >= 8), row
        [hint] = [line for line in listed if line.startswith(named)]
        assert re.fullmatch(rf"{named}\d+[sm]; where every rank is \(waiting or computing\): python -m orchestrate stacks {run_id}", hint), hint
        out = io.StringIO()
        assert main(["stop", run_id], out=out) == 0, out.getvalue()
        said = out.getvalue().splitlines()
        assert re.fullmatch(r"no output for \d+ s: looking where every rank waits before they stop \(a few seconds; up"
                            r" to 7.5 s where a rank does not answer\)", said[0]), said
        assert said[1].startswith("at the stop, hung: no progress for "), said
        assert "  rank 1: is stopped: its process on node1 got SIGSTOP (injected fault hang-rank:1)" in said, said
        out = io.StringIO()
        main(["attach", run_id], out=out)
        summary = out.getvalue().splitlines()
        at = summary.index("STOPPED by python -m orchestrate stop (SIGTERM): every node was stopped")
        assert summary[at + 1] == f"  while hung: {said[1].removeprefix('at the stop, hung: ')}", summary[at:]
    finally:
        main(["down", run_id], out=io.StringIO())
        remove_project(docker_client, f"ddp-{run_id}")
    assert leftovers(docker_client, f"ddp-{run_id}") == []


def test_a_stopped_rank_and_a_paused_node_are_named_in_the_diagnosis(docker_client, workdir, tmp_path):
    proc, lines = start_run(tmp_path, "--nodes", "3", "--workdir", str(workdir), "--hang-timeout", "15", "--",
                            "steps_forever.py")
    seen: list[str] = []
    run_id = wait_for(lines, r"run (\S+): bringing up", seen).group(1)
    try:
        wait_for(lines, r"rank 2 step 3$", seen)
        out = io.StringIO()
        assert main(["fault", run_id, "hang-rank:1", "pause:node2"], out=out) == 0, out.getvalue()
        output = read_to_end(proc, lines, seen, timeout_s=120)
    finally:
        proc.kill()
        remove_project(docker_client, f"ddp-{run_id}")
    assert proc.returncode == 1, output[-3000:]
    summary = output.split("=== run")[-1]
    assert "HUNG: no progress for" in summary
    assert "rank 1: is stopped: its process on node1 got SIGSTOP" in summary
    assert "rank 2: is on node2, whose container is paused" in summary
    assert re.search(r"rank 0: all_reduce at steps_forever\.py:\d+ in <module>", summary), summary
    # its stopped worker was continued before the SIGTERM: node1 took it (143), not the SIGKILL after the grace
    assert re.search(r"^node1\s+1\s+stopped\s+143\s", summary, re.M), summary
    assert leftovers(docker_client, f"ddp-{run_id}") == []


@pytest.mark.slow
def test_a_rank_busy_in_a_long_step_is_not_called_hung(orchestrate_run, docker_client, workdir):
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--hang-timeout", "10", "--",
                             "long_step.py", "--seconds", "35")
    assert result.code == 0, result.output[-3000:]
    assert "but the job is working: rank 0 computing" in result.output
    assert re.search(r"rank 1: barrier at long_step\.py:\d+ in <module>", result.output)
    assert "HUNG" not in result.output and "looks hung" not in result.output
    assert leftovers(docker_client, result.project) == []


def debug_from_another_terminal(command: str, typed: str) -> subprocess.CompletedProcess:
    """``command`` (``python -m orchestrate debug RUN RANK``) run as a user runs it, ``typed`` its input."""
    argv = [sys.executable, *command.split()[1:]]
    return subprocess.run(argv, input=typed, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.timeout(300)
def test_a_rank_stopped_at_breakpoint_is_debugged_from_another_terminal_with_the_command_the_run_gives(
        docker_client, workdir, tmp_path):
    proc, lines = start_run(tmp_path / "runs", "--nodes", "2", "--workdir", str(workdir), "--", "breakpoints.py")
    seen: list[str] = []
    project = ""
    try:
        stop = wait_for(lines, r"^\[orchestrate\] rank 1 stopped in its debugger at breakpoints.py:11 in <module>:"
                               r" breakpoint\(\); debug it with: (python -m orchestrate debug (\S+) 1)$", seen)
        project = f"ddp-{stop[2]}"
        rank1 = debug_from_another_terminal(stop[1], "p t\nt.mul_(10)\nc\n")
        assert rank1.returncode == 0, rank1.stderr
        assert "(Pdb) tensor([2., 2.])" in rank1.stdout  # its own tensor, across the node's mount of the run
        assert rank1.stderr.splitlines()[0] == ("[orchestrate] rank 1 (node1) stopped at breakpoints.py:11 in <module>:"
                                                " breakpoint()")
        stop = wait_for(lines, r"rank 0 stopped in its debugger at breakpoints.py:13 in <module>:"
                               r" dist.breakpoint\(rank=0\); debug it with: (python -m orchestrate debug \S+ 0)$", seen)
        rank0 = debug_from_another_terminal(stop[1], "up\np t\n")  # then Ctrl-D: it goes on
        assert "(Pdb) tensor([21., 21.])" in rank0.stdout, rank0.stderr  # what the terminal made of rank 1's
        out = read_to_end(proc, lines, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if project:
            remove_project(docker_client, project)
    assert proc.returncode == 0, out[-3000:]
    assert "[node0/rank0]  rank 0 sum [21.0, 21.0]" in out and "[node1/rank1]  rank 1 sum [21.0, 21.0]" in out
    assert out.count("left its debugger") == 2
    assert "[ddp-compose] rank 1 stopped" not in out  # the rank's own line: in its node's log, for `logs RUN`
    node1_log = (tmp_path / "runs" / project.removeprefix("ddp-") / "node1.log").read_text()
    assert (f"[ddp-compose] rank 1 stopped in its debugger at breakpoints.py:11 in <module>: breakpoint(); debug it"
            f" with: python -m orchestrate debug {project.removeprefix('ddp-')} 1") in node1_log
    assert leftovers(docker_client, project) == []


def test_with_pdb_the_rank_that_raised_is_debugged_in_its_post_mortem_and_the_run_then_fails_with_its_error(
        docker_client, workdir, tmp_path):
    proc, lines = start_run(tmp_path / "runs", "--nodes", "2", "--pdb", "--workdir", str(workdir), "--",
                            "post_mortem.py")
    seen: list[str] = []
    project = ""
    try:
        stop = wait_for(lines, r"^\[orchestrate\] rank 1 stopped in its debugger at post_mortem.py:9 in scale: uncaught"
                               r" RuntimeError: mat1 and mat2 shapes cannot be multiplied \(1x2 and 3x2\); debug it with:"
                               r" (python -m orchestrate debug (\S+) 1)$", seen)
        project = f"ddp-{stop[2]}"
        rank1 = debug_from_another_terminal(stop[1], "p width, batch\nc\n")
        assert rank1.returncode == 0, rank1.stderr
        assert "(Pdb) (3, tensor([[3., 3.]]))" in rank1.stdout  # the frame that raised, in the node
        out = read_to_end(proc, lines, seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if project:
            remove_project(docker_client, project)
    assert proc.returncode == 1, out[-3000:]
    assert ("FAILED: node1 rank 1 failed (exit code 1): RuntimeError: mat1 and mat2 shapes cannot be multiplied"
            " (1x2 and 3x2)") in out
    assert "in your code: post_mortem.py:9 in scale: return batch @ weights" in out
    assert "[node1/rank1]  [rank1]: RuntimeError: mat1 and mat2 shapes" in out  # its traceback, as without --pdb
    assert out.count("left its debugger") == 1 and "no post-mortem" not in out.split("=== run")[-1]
    assert leftovers(docker_client, project) == []

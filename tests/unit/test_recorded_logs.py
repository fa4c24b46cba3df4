"""``logs RUN`` of a run the engine no longer has: read from the run's directory."""
from __future__ import annotations

import io
import json

import pytest

from orchestrate.cli.main import main
from orchestrate.errors import UsageError
from orchestrate.supervise.recorded_logs import parse_recorded, recorded_lines
from tests.fakes import FakeDockerClient, Script, fake_engine


def ended_foreground_run(make_run):
    """A 2-node, 2-rank-a-node run that ended and tore its nodes down: (its directory, the engine)."""
    client = FakeDockerClient()
    job = make_run("20261205-101010-abcdef", nodes=2, nproc_per_node=2)
    job.client = fake_engine(client, node0=[Script(["[0|0]:zero a", "[1|1]:one a", "[0|0]:zero b"])],
                             node1=[Script(["[2|0]:two a", "[3|1]:three a", "[3|1]:three b"])])
    assert job.run().succeeded
    assert client.containers_by_name == {}  # nothing of it is left in the engine
    return job.run_dir, client


def logs(client, run_dir, *argv):
    out = io.StringIO()
    code = main(client=client, argv=["logs", *argv, "--runs-dir", str(run_dir.parent)], out=out)
    return code, out.getvalue().splitlines()


def test_logs_of_a_torn_down_run_reads_its_directory_node_by_node_and_says_so(make_run, capsys):
    run_dir, client = ended_foreground_run(make_run)
    capsys.readouterr()
    code, lines = logs(client, run_dir, "abcdef")  # its id's random end, as from the engine
    assert code == 0
    assert lines == ["[node0/rank0] zero a", "[node0/rank1] one a", "[node0/rank0] zero b",
                     "[node1/rank2] two a", "[node1/rank3] three a", "[node1/rank3] three b"]
    assert capsys.readouterr().err == (f"[orchestrate] run {run_dir.name} is no longer in the engine: its lines as"
                                       f" {run_dir} recorded them, node by node (the files keep no times to merge"
                                       " them by)\n")
    assert logs(client, run_dir, run_dir.name, "--rank", "3", "--rank", "0")[1] == [
        "[node0/rank0] zero a", "[node0/rank0] zero b", "[node1/rank3] three a", "[node1/rank3] three b"]
    code, lines = logs(client, run_dir, run_dir.name, "--node", "node1", "-n", "2", "-f")
    assert code == 0 and lines == ["[node1/rank3] three a", "[node1/rank3] three b"]
    assert capsys.readouterr().err.splitlines()[-1] == (f"[orchestrate] run {run_dir.name} has ended: there is"
                                                        " nothing more to follow")
    code, lines = logs(client, run_dir, run_dir.name, "-n", "1")
    assert lines == ["[node0/rank0] zero b", "[node1/rank3] three b"]
    assert "the last 1 of each node's" in capsys.readouterr().err


def test_logs_of_a_run_neither_the_engine_nor_the_directory_has_is_one_error(make_run, capsys, monkeypatch):
    run_dir, client = ended_foreground_run(make_run)
    capsys.readouterr()
    assert logs(client, run_dir, "fedcba")[0] == 2
    assert capsys.readouterr().err == (f"error: no run fedcba in the engine or in {run_dir.parent} (see"
                                       " `python -m orchestrate ps`)\n")  # --runs-dir was given: not asked for
    middle = run_dir.name.split("-")[1]  # 101010 (its directory's alone: the engine's run went with its teardown)
    assert logs(client, run_dir, middle)[0] == 2
    assert capsys.readouterr().err == (f"error: no run id in the engine or in {run_dir.parent} starts or ends with"
                                       f" {middle} ({run_dir.name} has it in its middle: give the whole id or its"
                                       " end)\n")
    # without --runs-dir it looked in ./runs, and a run recorded elsewhere needs one named
    monkeypatch.chdir(run_dir.parent)
    assert main(client=client, argv=["logs", "fedcba"], out=io.StringIO()) == 2
    assert capsys.readouterr().err == ("error: no run fedcba in the engine or in runs (see `python -m orchestrate ps`,"
                                       " or give --runs-dir)\n")
    assert logs(client, run_dir, run_dir.name, "--rank", "4")[0] == 2
    assert capsys.readouterr().err == f"error: --rank 4: run {run_dir.name} has no such rank (ranks 0-3)\n"
    assert logs(client, run_dir, run_dir.name, "--node", "node7")[0] == 2
    assert capsys.readouterr().err == (f"error: --node node7: run {run_dir.name} has no such node"
                                       " (nodes: node0, node1)\n")


def test_logs_reads_a_runs_directory_when_no_engine_answers_and_says_why(make_run, tmp_path, monkeypatch, capsys):
    run_dir, _ = ended_foreground_run(make_run)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # the real SDK, and nothing there
    capsys.readouterr()
    code, lines = logs(None, run_dir, run_dir.name, "--rank", "2", "-f")
    assert code == 0 and lines == ["[node1/rank2] two a"]
    assert capsys.readouterr().err.splitlines() == [
        f"[orchestrate] run {run_dir.name} cannot be looked up, as no Docker engine answers: its lines as {run_dir}"
        " recorded them, node by node (the files keep no times to merge them by)",
        f"[orchestrate] run {run_dir.name} cannot be followed without the engine"]
    assert logs(None, run_dir, "fedcba")[0] == 2  # in neither: the engine's own error
    assert capsys.readouterr().err.startswith("error: cannot reach the Docker engine at ")


def recorded_run(tmp_path, nodes, **logs):
    run_dir = tmp_path / "20261205-111111-123456"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"nodes": [{"name": n, "global_ranks": r} for n, r in nodes]}))
    for name, lines in logs.items():
        (run_dir / name.replace("_", "-").replace("-log", ".log")).write_text("".join(f"{ln}\n" for ln in lines))
    return run_dir


def test_a_slurm_runs_job_log_is_read_in_its_order_and_chosen_from_by_the_labels(tmp_path):
    job = ["[slurm]        srun: launching", "[node1/rank1]  b", "[node0/rank0]  a", "[node0]        torchrun says",
           "[node0/rank0]    File \"x.py\", line 1"]
    run_dir = recorded_run(tmp_path, [("node0", [0]), ("node1", [1])], slurm_job_log=job)
    said = []
    assert list(recorded_lines(run_dir, say=said.append)) == job
    assert said == [f"run {run_dir.name} is no longer in the engine: its Slurm job's lines as"
                    f" {run_dir / 'slurm-job.log'} recorded them"]
    assert list(recorded_lines(run_dir, ranks=[0], say=said.append)) == [job[2], job[4]]
    assert list(recorded_lines(run_dir, node="node1", say=said.append)) == [job[1]]
    assert list(recorded_lines(run_dir, node="node0", tail=2, say=said.append)) == job[3:]


def test_an_elastic_runs_ranks_are_not_checked_and_a_node_without_a_log_is_named(tmp_path):
    run_dir = recorded_run(tmp_path, [("node0", []), ("node1", [])], node0_log=["[node0/rank1] x", "[node0] y"])
    said = []
    assert list(recorded_lines(run_dir, ranks=[1, 5], say=said.append)) == ["[node0/rank1] x"]
    assert said[0] == (f"run {run_dir.name} is elastic: its rendezvous gives the ranks out, so --rank 1 is not"
                       " checked against it (a rank that never ran shows no line)")
    assert said[-1] == (f"node1 left no log in {run_dir} (it did not start, or its lines were never read)")
    # an elastic Slurm run's job log: --node and --rank together keep that node's lines of that rank
    (tmp_path / "slurm").mkdir()
    job = ["[node0/rank0] a", "[node1/rank0] b", "[node1/rank1] c"]
    slurm_dir = recorded_run(tmp_path / "slurm", [("node0", []), ("node1", [])], slurm_job_log=job)
    assert list(recorded_lines(slurm_dir, node="node1", ranks=[0], say=said.append)) == ["[node1/rank0] b"]


def test_a_plan_that_cannot_be_read_is_a_usage_error(tmp_path):
    run_dir = recorded_run(tmp_path, [])
    (run_dir / "run.json").write_text("{")
    with pytest.raises(UsageError, match=r"cannot read the plan of run 20261205-111111-123456 \("):
        list(recorded_lines(run_dir))
    (run_dir / "run.json").write_text('{"nodes": []}')
    with pytest.raises(UsageError, match=r"the plan of run 20261205-111111-123456 \(.*\) names no node"):
        list(recorded_lines(run_dir, ranks=[0]))


@pytest.mark.parametrize("line, node, rank", [
    ("[node3/rank12] text [node1/rank0]", "node3", 12), ("[node3/local1] x", "node3", None),
    ("[node3] torchrun", "node3", None), ("no label [node0/rank0]", "", None), ("[a/b] c", "", None)])
def test_a_recorded_lines_label_gives_its_node_and_rank(line, node, rank):
    parsed = parse_recorded(line)
    assert (parsed.node, parsed.rank, parsed.text) == (node, rank, line)

"""Storage faults on real nodes, against a user's script that saves as the DDP tutorial does
(tests/jobs/tutorial_save.py, plain torch): ``chaos --kinds torn-write`` catches the save onto
the file it resumes from, and an atomic save (a temporary file, then a rename) survives it; a
full disk fails the save, and the summary names the rank and the file. A file that one node wrote
on its own disk and another node's rank cannot find is explained (tests/jobs/node_local_cache.py),
and so is a shared file a rank read before another rank saved it (tests/jobs/load_before_save.py)."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import job_workdir, leftovers, remove_project

pytestmark = pytest.mark.integration


@pytest.fixture
def workdir(tmp_path) -> Path:
    return job_workdir(tmp_path, "tutorial_save.py")


@pytest.mark.parametrize("save, code, verdict", [
    ("in-place", 1, "VERDICT DOES NOT HOLD"),
    ("atomic", 0, "VERDICT HOLDS: the job survived 1 fault(s), resumed after a save"),
])
@pytest.mark.slow
def test_chaos_catches_a_save_torn_in_place_and_an_atomic_save_survives_it(docker_client, tmp_path, workdir, save,
                                                                           code, verdict):
    runs_dir = tmp_path / "runs"
    out = io.StringIO()
    try:
        got = main(["chaos", "--nodes", "2", "--workdir", str(workdir), "--runs-dir", str(runs_dir),
                    "--rdzv-timeout", "30", "--collective-timeout", "20", "--compare", "final.pt", "--faults", "1",
                    "--seed", "3", "--kinds", "torn-write", "--", "tutorial_save.py",
                    *(["--atomic"] if save == "atomic" else [])], out=out)
        output = out.getvalue()
        assert got == code, output[-5000:]
        assert verdict in output, output[-3000:]
        spec = re.search(r"drawn from seed 3: (torn-write:node0@step=(\d+))", output)
        assert spec, output[-3000:]
        torn_file = "model.checkpoint" if save == "in-place" else "model.checkpoint.tmp"
        cut = re.search(rf"fault injected: {re.escape(spec[1])} \([^)]*\): rank 0's write of {re.escape(torn_file)}"
                        r" was cut at byte (\d+) of (\d+)", output)
        assert cut and 1 <= int(cut[1]) < int(cut[2]), output[-3000:]
        assert "killing node0: a crash in the middle of the save" in output
        if save == "in-place":  # the resume reads half a checkpoint
            assert "the job did not complete under the faults" in output, output[-3000:]
            assert (f"  hint: {spec[1]} cut model.checkpoint short, and a rank then failed reading a file: a save"
                    " straight onto the file a job resumes from leaves no whole checkpoint") in output, output[-5000:]
        else:  # the whole checkpoint before the torn one was resumed from
            assert re.search(rf"resumed after step {int(spec[2]) - 1}\b", output), output[-3000:]
            assert "compared final.pt: matches" in output
    finally:
        for run_dir in runs_dir.glob("chaos-*/runs/*"):
            remove_project(docker_client, f"ddp-{run_dir.name}")
    for run_dir in runs_dir.glob("chaos-*/runs/*"):
        assert leftovers(docker_client, f"ddp-{run_dir.name}") == []


def test_a_full_disk_fails_the_save_naming_the_rank_and_the_file(orchestrate_run, docker_client, workdir):
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--fault", "disk-full:node0,path=model.*@step=3",
                             "--", "tutorial_save.py")
    assert result.code == 1, result.output[-4000:]
    assert ("disk-full:node0,path=model.*@step=3: armed on node0's workers, files 'model.*' of the work directory"
            in result.output)
    said = "rank 0's write to model.checkpoint failed: no space left on device (ENOSPC)"
    assert f"disk-full:node0,path=model.*@step=3: {said}" in result.output
    assert re.search(rf"^fault injected: disk-full:node0,path=model\.\*@step=3 \(.*\): {re.escape(said)}$",
                     result.output, re.M), result.output[-3000:]
    # torch.save's own error, as on a real full disk (not the ENOSPC itself: torch's writer raises around it)
    assert re.search(r"^FAILED: node0 rank 0 failed \(injected fault disk-full:node0,path=model\.\*@step=3\):"
                     r" RuntimeError: \[enforce fail at inline_container\.cc:\d+\] \. ", result.output, re.M), \
        result.output[-3000:]
    # the worker's own ENOSPC, in the traceback torch's error was raised during
    assert "\n  raised while handling: OSError: [Errno 28] No space left on device\n" in result.output, \
        result.output[-3000:]
    # as the system's ENOSPC reads: the traceback has none of the hook's frames (they were all there)
    assert 'File "/opt/ddp-compose/orchestrate/' not in result.output, result.output[-3000:]
    assert 'File "/workspace/tutorial_save.py", line 50, in <module>' in result.output  # (a traceback was shown)
    # raised deep in torch.save: the script's own line that saved, printed a traceback of 20 lines and more above
    assert re.search(r"^  in your code: tutorial_save\.py:50 in <module>: torch\.save\(state, CHECKPOINT_PATH\)$",
                     result.output, re.M), result.output[-3000:]
    assert leftovers(docker_client, result.project) == []


def test_a_checkpoint_every_rank_saves_to_one_file_is_named_with_its_writers(orchestrate_run, docker_client, workdir):
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--", "tutorial_save.py", "--steps", "2",
                             "--sleep", "0", "--every-rank")
    assert result.code == 0, result.output[-4000:]
    summary = result.output.split("=== run")[-1]
    # rank 0 alone writes final.pt: it is no warning
    assert re.findall(r"^warning: .*", summary, re.M) == [
        "warning: ranks 0, 1 each wrote model.checkpoint whole, in a directory every node shares: writers of one file"
        " race, so it holds whichever finished last (parts of each, where they wrote different bytes), and a rank that"
        " reads it meanwhile may find it half-written; write it on one rank (if dist.get_rank() == 0:), or a file per"
        " rank"], summary
    outcome = json.loads((result.run_dir / "outcome.json").read_text())
    assert outcome["written_by_several"] == {"model.checkpoint": [0, 1]}
    assert leftovers(docker_client, result.project) == []


def test_a_file_rank_0_wrote_in_tmp_that_another_node_cannot_find_is_explained(orchestrate_run, docker_client,
                                                                                 tmp_path):
    workdir = job_workdir(tmp_path, "node_local_cache.py")
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--", "node_local_cache.py")
    assert result.code == 1, result.output[-4000:]
    summary = result.output.split("=== run")[-1]
    assert ("FAILED: node1 rank 1 failed (exit code 1): FileNotFoundError: [Errno 2] No such file or directory:"
            " '/tmp/ddp-cache/vocab.json'\n") in summary, summary
    assert ("\n  hint: rank 0 (node0) wrote /tmp/ddp-cache/vocab.json on node0's own disk, and node1 has its own /tmp:"
            " as on a cluster, each node's disk is its own") in summary, summary
    # the worker's traceback is the script's own: none of the hook's wrappers of open
    last_lines = summary.split("last lines of node1/rank1:")[1]
    assert 'File "/workspace/node_local_cache.py", line 25, in <module>' in last_lines, last_lines
    assert "orchestrate/node" not in last_lines, last_lines
    assert leftovers(docker_client, result.project) == []


def test_a_checkpoint_another_rank_loads_before_rank_0_saved_it_is_explained(orchestrate_run, docker_client, tmp_path):
    workdir = job_workdir(tmp_path, "load_before_save.py")
    result = orchestrate_run("--nodes", "2", "--workdir", str(workdir), "--", "load_before_save.py")
    assert result.code == 1, result.output[-4000:]
    summary = result.output.split("=== run")[-1]
    assert ("FAILED: node1 rank 1 failed (exit code 1): FileNotFoundError: [Errno 2] No such file or directory:"
            " 'checkpoints/last.pt'") in summary, summary
    assert ("\n  hint: rank 0 (node0) wrote checkpoints/last.pt, on the storage every node shares, and rank 1 looked"
            " for it before it was there: a file that one rank writes for the others to read needs a dist.barrier()"
            " after the write and before the reads, called by every rank\n") in summary, summary
    assert leftovers(docker_client, result.project) == []

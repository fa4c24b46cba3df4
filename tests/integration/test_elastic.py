"""Elastic mode (c10d rendezvous): a killed node rejoins and training ends as if undisturbed."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.integration.conftest import ELASTIC, ELASTIC_TRAIN, leftovers

pytestmark = pytest.mark.integration
# app.train's default progress lines (one every 2 s): the @step trigger does not depend on them.
TRAIN = ELASTIC_TRAIN
JOBS = Path(__file__).resolve().parents[1] / "jobs"


@pytest.mark.xdist_group("elastic-run")
def test_killed_node_rejoins_and_the_result_equals_an_undisturbed_run(elastic_recovery, orchestrate_run, docker_client,
                                                                      tmp_path):
    import torch

    calm = orchestrate_run(*ELASTIC, "--workdir", str(tmp_path), "--", *TRAIN, "--checkpoint-dir", "ck-calm",
                           "--save-params", "calm.pt")
    assert calm.code == 0, calm.output[-4000:]

    hit = elastic_recovery.run
    assert hit.code == 0, hit.output[-4000:]
    assert "fault injected: kill:node1@step=12" in hit.output
    assert "node1 died (injected fault kill:node1@step=12); restarting every node" in hit.output
    # torchrun's prefix template gives elastic workers their global ranks
    assert re.search(r"\[node\d/rank0\]\s+resumed from ck-hit/step-0000008\.pt", hit.output)
    recovery = re.search(r"recovery: node1 rejoined after injected fault kill:node1@step=12: recovery"
                         r" \(failure detected to first step after resume\) ([\d.]+) s; steps lost (\d+)"
                         r" \(last step (\d+), resumed from (\d+)\)", hit.output)
    assert recovery, hit.output[-3000:]
    seconds, lost, last, resumed = float(recovery[1]), int(recovery[2]), int(recovery[3]), int(recovery[4])
    # exact: the ranks waited at step 12 for the kill; step 12's checkpoint was never written
    assert 0 < seconds < 180 and (last, resumed, lost) == (12, 8, 4)  # 12 s unloaded; CPU-bound, so slow under load
    assert "SUCCEEDED: all 2 nodes exited 0" in hit.output
    # logs -f from another terminal follows both nodes through the restart to the end: every
    # line each node's log kept, and nothing else, each speaker's (torchrun's, each rank's printed
    # lines, each rank's traceback) in its order. (Not one order across them: a node's stdout and
    # stderr are read apart, by the launcher and by logs -f alike, and a rank's step line and
    # torchrun's warning, or its own traceback on stderr, the same millisecond may reach the two in
    # either order: seen in CI on 2026-12-06, rank 0's "step 12" after its traceback in one.)
    followed = elastic_recovery.followed.lines()
    assert any("resumed from ck-hit/step-0000008.pt" in line for line in followed), followed[-20:]
    for node in ("node0", "node1"):
        kept = [" ".join(line.split()) for line in (hit.run_dir / f"{node}.log").read_text().splitlines()]
        theirs = [line for line in followed if line.startswith(f"[{node}")]
        assert sorted(theirs) == sorted(kept), node
        def speaker(line: str) -> tuple[str, bool]:  # "[node0" (torchrun), "[node0/rank0", and its stderr's
            prefix, text = line.split("]", 1) if "]" in line else (line, "")
            return prefix, text.lstrip().startswith("[rank")  # torch's "[rank0]: Traceback ..." on stderr

        for who in {speaker(line) for line in kept}:
            assert [ln for ln in theirs if speaker(ln) == who] == [ln for ln in kept if speaker(ln) == who], (node, who)

    calm_params = torch.load(tmp_path / "calm.pt", weights_only=True)
    hit_params = torch.load(elastic_recovery.workdir / "hit.pt", weights_only=True)
    assert max((calm_params[k] - hit_params[k]).abs().max().item() for k in calm_params) < 1e-6
    assert leftovers(docker_client, calm.project) == [] and elastic_recovery.leftovers == []


def test_elastic_without_restarts_left_fails_naming_the_dead_node(orchestrate_run, docker_client, tmp_path):
    result = orchestrate_run("--nodes", "2", "--rdzv", "c10d", "--max-restarts", "0", "--workdir",
                             str(tmp_path), "--fault", "kill:node1@step=12", "--", *TRAIN,
                             "--checkpoint-dir", "ck", "--epochs", "50")
    assert result.code == 1
    assert "FAILED: node1 failed (injected fault kill:node1@step=12)" in result.output
    assert leftovers(docker_client, result.project) == []


def test_two_preempts_are_two_recoveries_and_the_second_counts_into_the_next_attempt(orchestrate_run, docker_client,
                                                                                     tmp_path):
    # a preempt's SIGKILL, due after the grace, belongs to the attempt it was set for: one fault, one recovery
    shutil.copy(JOBS / "resume_training.py", tmp_path)
    result = orchestrate_run(*ELASTIC, "--max-restarts", "2", "--stop-grace", "5", "--workdir", str(tmp_path),
                             "--fault", "preempt:node1@step=6", "--fault", "preempt:node0@step=+4", "--",
                             "resume_training.py", "--steps", "24")
    assert result.code == 0, result.output[-4000:]
    assert len(re.findall(r"^recovery: ", result.output, re.M)) == 2, result.output[-3000:]
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["spec"] for e in events if e["event"] == "fault"] == ["preempt:node1@step=6", "preempt:node0@step=+4"]
    assert not any(e["event"] == "node-killed" for e in events), [e for e in events if e["event"] == "node-killed"]
    # the second fault struck the attempt that resumed after the first (from step 6, or 7 where the
    # SIGTERM reached rank 1 a step late), four steps into it
    resumed = [int(step) for step in re.findall(r"^\[node0/rank0\] +rank 0 resumed from step (\d+)$", result.output, re.M)]
    assert len(resumed) == 2 and resumed[0] in (6, 7), (resumed, result.output[-3000:])
    second = re.search(r"fault injected: preempt:node0@step=\+4 \([\d.]+ s into the job, at step (\d+)", result.output)
    assert second and int(second[1]) == resumed[0] + 4, result.output[-3000:]
    assert leftovers(docker_client, result.project) == []


def test_a_worker_group_restarted_by_torchrun_rejoins_even_where_one_node_reaches_the_store_late(
        orchestrate_run, docker_client):
    """torchrun's own --max-restarts, within agents that live on: a transient error in one worker.
    On the restart, node0's ranks join the group 3 s after node1's. With torch's shared store
    (kept across restarts, keys not scoped by attempt) node1's ranks read node0's addresses of
    the attempt before and fail on a closed port, every time; with a store per round they wait."""
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "2", "--rdzv", "c10d", "--max-restarts", "1",
                             "--hang-timeout", "60", "--workdir", str(JOBS), "--", "transient_error.py")
    assert result.code == 0, result.output[-4000:]
    assert sorted(re.findall(r"^\[node\d/rank(\d)\]\s+rank \1 done in start 2, world 4$", result.output,
                             re.M)) == ["0", "1", "2", "3"], result.output[-4000:]
    assert "transient: lost the connection to the dataset server" in result.output  # the first attempt's error
    assert "restarting every node" not in result.output  # torchrun restarted the workers, not the launcher the nodes
    summary = result.output.split("summary ===")[1]
    assert re.search(r"^restarted in place: torchrun restarted the workers after a failure, once on (every node|node1)$",
                     summary, re.M), summary  # node0's agent may rejoin the new round without using a restart up
    assert ("  attempt 1 of node1's workers ended with local rank 1's error: RuntimeError: transient: lost"
            " the connection to the dataset server") in summary.splitlines()
    assert leftovers(docker_client, result.project) == []


def test_a_node_lost_for_good_leaves_the_job_to_go_on_with_the_nodes_left(orchestrate_run, docker_client, tmp_path):
    shutil.copyfile(JOBS / "resume_training.py", tmp_path / "resume_training.py")
    result = orchestrate_run("--nodes", "2", "--rdzv", "c10d", "--nnodes", "1:2", "--workdir", str(tmp_path),
                             "--fault", "lose:node1@step=5", "--", "resume_training.py", "--steps", "12")
    assert result.code == 0, result.output[-4000:]
    assert "node1 is lost for good (lose:node1@step=5): the job goes on with the nodes left" in result.output
    assert "restarting every node" not in result.output  # the launcher brought nothing back
    summary = result.output.split("summary ===")[1]
    assert re.search(r"^node1\s+elastic\s+lost\s+137\s", summary, re.M), summary
    # torchrun on node0 restarted its workers alone, and they went on from the checkpoint
    assert re.search(r"\[node0/rank0\]\s+rank 0 resumed from step [5-9]", result.output), result.output[-3000:]
    assert re.search(r"\[node0/rank0\]\s+rank 0 step 12 ", result.output)
    assert re.search(r"^recovery: the job went on without node1 after injected fault lose:node1@step=5: recovery"
                     r" \(failure detected to first step after resume\) [\d.]+ s; steps lost 0 \(last step 5,"
                     r" resumed from 5\)$", summary, re.M), summary
    assert "SUCCEEDED: 1 of 2 nodes exited 0; node1 was lost for good (lose:node1@step=5), and the job went on" \
           " without it" in summary
    assert leftovers(docker_client, result.project) == []


def test_a_hang_after_a_node_was_lost_is_diagnosed_among_the_ranks_left(ddp_cluster, tmp_path):
    # the nodes left come back numbered anew: a rank the lost node ran is not waited for (the
    # run's own time limit ends a watchdog that would wait for it, in 90 s, not the suite's)
    shutil.copyfile(JOBS / "stalls_alone.py", tmp_path / "stalls_alone.py")
    # (at a step, in training: a loss in the start-up leaves node0's ranks in init_process_group)
    result = ddp_cluster.run("stalls_alone.py", workdir=tmp_path, nodes=2, rdzv="c10d", nnodes="1:2", hang_timeout=10,
                             faults=["lose:node1@step=5"], timeout=90)
    assert result.exit_code == 1 and result.lost == {"node1": "lose:node1@step=5"}, result
    assert "rank 0 of 1" in result.rank_output(0)
    assert result.hang is not None and re.fullmatch(
        r"no progress for \d+ s \(--hang-timeout 10\): rank 0: <module> at stalls_alone.py:16; rank 0 idle: neither"
        r" computing nor in a collective( \([\d.]+% of a core\))?", result.hang.headline), \
        result

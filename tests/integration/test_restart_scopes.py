"""Recovery as real controllers do it, on real nodes: with ``--restart node`` (a Kubernetes pod
restart) losing node0, which holds the c10d rendezvous store, ends the job and the root cause
says so; with the run's own store container (``--rdzv-store container``) the same loss is
survived, the job resuming from its checkpoint (tests/jobs/resume_training.py); and that store's
own death (``--fault kill:store``: the rendezvous host lost) is named as what ended the job."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.conftest import job_workdir, leftovers

pytestmark = pytest.mark.integration


@pytest.fixture
def workdir(tmp_path) -> Path:
    return job_workdir(tmp_path, "resume_training.py")


ELASTIC = ("--nodes", "2", "--rdzv", "c10d", "--restart", "node", "--rdzv-timeout", "30", "--collective-timeout", "10")


def test_restarting_node0_alone_loses_the_rendezvous_store_and_ends_the_job_saying_why(orchestrate_run, docker_client,
                                                                                         workdir):
    result = orchestrate_run(*ELASTIC, "--workdir", str(workdir), "--fault", "kill:node0@step=5", "--",
                             "resume_training.py", "--steps", "30")
    assert result.code == 1, result.output[-4000:]
    assert "node0 died (injected fault kill:node0@step=5); restarting it alone so that it rejoins" in result.output
    assert re.search(r"^FAILED: node0 died \(injected fault kill:node0@step=5\); node0 held the c10d rendezvous store",
                     result.output, re.M), result.output[-3000:]
    assert "recovery: node0 rejoined" not in result.output  # no recovery claimed
    assert leftovers(docker_client, result.project) == []


@pytest.mark.slow
def test_a_store_container_of_the_runs_own_survives_node0_and_the_job_resumes(orchestrate_run, docker_client,
                                                                             workdir):
    result = orchestrate_run(*ELASTIC, "--rdzv-store", "container", "--workdir", str(workdir), "--fault",
                             "kill:node0@step=5", "--", "resume_training.py", "--steps", "20")
    assert result.code == 0, result.output[-4000:]
    assert "node0 died (injected fault kill:node0@step=5); restarting it alone so that it rejoins" in result.output
    assert "[rdzv-store" not in result.output  # the store is no node: none of its lines are a node's
    assert re.search(r"^\[node0/rank0\] +rank 0 resumed from step [5-9]$", result.output, re.M), result.output[-3000:]
    assert re.search(r"^recovery: node0 rejoined after injected fault kill:node0@step=5", result.output, re.M)
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["node"], e["scope"]) for e in events if e["event"] == "restart"] == [("node0", "node")]
    assert "SUCCEEDED: all 2 nodes exited 0" in result.output
    assert leftovers(docker_client, result.project) == []


def test_the_store_containers_death_by_a_fault_is_named_as_what_ended_the_job(orchestrate_run, docker_client,
                                                                             workdir):
    result = orchestrate_run(*ELASTIC, "--rdzv-store", "container", "--workdir", str(workdir), "--fault",
                             "kill:store@step=3", "--", "resume_training.py", "--steps", "200")
    assert result.code == 1, result.output[-3000:]
    said = ("the run's rendezvous store (its container rdzv-store) died (exit code 137), killed by injected fault"
            " kill:store@step=3")
    assert f"[orchestrate] {said}\n" in result.output, result.output[-3000:]
    assert re.search(rf"^FAILED: {re.escape(said)}: every node's torchrun agent lost the rendezvous; then node[01] ",
                     result.output, re.M), result.output[-3000:]
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["node"], e["spec"]) for e in events if e["event"] == "fault"] == [("store", "kill:store@step=3")]
    assert not [e for e in events if e["event"] == "restart"]  # a lost store: no node to bring back
    assert leftovers(docker_client, result.project) == []

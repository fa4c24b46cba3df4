"""One GPU, many nodes, as far as a machine without GPUs can show it: the rendered Compose file
of a shared-GPU run, as Compose reads it, gives every node the one GPU; and on real CPU nodes
the opt-in shim gives a script that names nccl gloo, across two nodes."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.integration.conftest import leftovers
from tests.integration.test_compose_file import compose_config

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"


def test_a_shared_gpu_plan_renders_the_same_device_for_every_node(compose_cli, tmp_path):
    from orchestrate.config.request import HostFacts, RunRequest, resolve_config
    from orchestrate.engine.compose_file import write_compose_file
    from orchestrate.plan.make import make_plan

    shutil.copy(JOBS / "names_nccl.py", tmp_path)
    request = RunRequest.from_options(("names_nccl.py",), nodes=2, nproc_per_node=2, share_gpus=True,
                                      workdir=tmp_path, runs_dir=tmp_path / "runs")
    plan = make_plan(resolve_config(request, HostFacts(), available_gpus=1), "shared-check", gpu_ids=("0",))
    services = compose_config(str(write_compose_file(plan, tmp_path / "compose.json")), cwd=tmp_path)["services"]
    devices = {name: s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
               for name, s in services.items()}
    assert devices == {"node0": ["0"], "node1": ["0"]}
    for service in services.values():
        assert service["environment"]["DDP_SHARED_GPUS"] == "1"
        assert service["command"][-4:] == ["/opt/ddp-compose/orchestrate/node/worker_start.py",
                                           "--nccl-hostid-per-rank", "--", "names_nccl.py"]


def test_the_shim_gives_a_script_that_names_nccl_gloo_across_two_nodes(orchestrate_run, docker_client, tmp_path):
    shutil.copy(JOBS / "names_nccl.py", tmp_path)
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "2", "--cpu", "--nccl-as-gloo",
                             "--workdir", str(tmp_path), "--", "names_nccl.py")
    assert result.code == 0, result.output[-3000:]
    got = re.findall(r"\[(node\d)/rank(\d)\]\s+rank \d backend (\S+) hostid \S+ all_reduce ([\d.]+)", result.output)
    # every rank of both nodes on gloo; 1 + 2 + 3 + 4 summed across the nodes
    assert sorted(got) == [("node0", "0", "gloo", "10"), ("node0", "1", "gloo", "10"),
                           ("node1", "2", "gloo", "10"), ("node1", "3", "gloo", "10")], result.output[-2000:]
    assert leftovers(docker_client, result.project) == []

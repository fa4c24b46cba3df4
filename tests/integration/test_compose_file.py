"""The checked-in compose.yaml: `docker compose up` alone runs the 2-node demo."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import leftovers

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CPU_FILES = ["-f", "compose.yaml", "-f", "compose.cpu.yaml"]


def compose(project: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "compose", "-p", project, *CPU_FILES, *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_compose_up_runs_the_two_node_demo_to_completion(compose_project, docker_client):
    up = compose(compose_project, "up", "--no-build", "--pull", "never")
    assert up.returncode == 0, up.stderr[-2000:]
    ps = compose(compose_project, "ps", "--all", "--format", "json")
    rows = [json.loads(line) for line in ps.stdout.splitlines() if line.strip()]
    exits = {row["Service"]: (row["State"], row["ExitCode"]) for row in rows}
    assert exits == {"node0": ("exited", 0), "node1": ("exited", 0)}, ps.stdout

    logs = compose(compose_project, "logs", "--no-color", "--no-log-prefix").stdout
    checksums = dict(re.findall(r"param_checksum rank=(\d) value=(\S+)", logs))
    assert sorted(checksums) == ["0", "1", "2", "3"], logs[-3000:]  # all 4 ranks trained
    assert len(set(checksums.values())) == 1
    assert "replicas identical across 4 ranks" in logs

    down = compose(compose_project, "down", "--volumes", "--timeout", "2")
    assert down.returncode == 0
    assert leftovers(docker_client, compose_project) == []


def test_gpu_variant_reserves_distinct_gpus_per_node(compose_cli):
    config = subprocess.run(["docker", "compose", "-f", "compose.yaml", "config", "--format", "json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert config.returncode == 0, config.stderr
    services = json.loads(config.stdout)["services"]
    ids = [services[n]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
           for n in ("node0", "node1")]
    assert ids == [["0"], ["1"]]


def test_cpu_variant_has_no_gpu_reservation(compose_cli):
    config = subprocess.run(["docker", "compose", *CPU_FILES, "config", "--format", "json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    services = json.loads(config.stdout)["services"]
    assert all("deploy" not in s for s in services.values())
    assert {s["environment"]["PET_NPROC_PER_NODE"] for s in services.values()} == {"2"}


def compose_config(*files: str, cwd: Path = ROOT) -> dict:
    args = [a for f in files for a in ("-f", f)]
    proc = subprocess.run(["docker", "compose", *args, "config", "--format", "json"],
                          capture_output=True, text=True, cwd=cwd, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def rendered_gpu_project(tmp_path: Path, nodes: int, gpus: int, nproc: int) -> dict:
    from orchestrate.config.run_config import RunConfig
    from orchestrate.engine.compose_file import write_compose_file
    from orchestrate.plan.make import make_plan

    plan = make_plan(RunConfig(nodes=nodes, nproc_per_node=nproc, gpus_per_node=gpus, backend="nccl",
                               workdir=ROOT, runs_dir=tmp_path), "gpu-check")
    path = write_compose_file(plan, tmp_path / "compose.json")
    return compose_config(str(path), cwd=tmp_path)


def test_rendered_gpu_nodes_get_distinct_device_ids(compose_cli, tmp_path):
    services = rendered_gpu_project(tmp_path, nodes=3, gpus=2, nproc=2)["services"]
    devices = {name: s["deploy"]["resources"]["reservations"]["devices"] for name, s in services.items()}
    assert {n: d[0]["device_ids"] for n, d in devices.items()} == {
        "node0": ["0", "1"], "node1": ["2", "3"], "node2": ["4", "5"]}
    assert all(d[0]["driver"] == "nvidia" and "count" not in d[0] for d in devices.values())
    assert all(s["ulimits"]["memlock"] == -1 for s in services.values())


def node_contract(service: dict) -> dict:
    """What a node must be, whoever made it: image, GPUs, network, limits, interfaces, shared volume."""
    env = service.get("environment", {})
    return {
        "image": service["image"],
        "hostname": service["hostname"],
        "init": service.get("init"),
        "shm_size": service.get("shm_size"),
        "ulimits": service.get("ulimits"),
        "deploy": service.get("deploy"),
        "networks": sorted(service.get("networks", {})),
        "working_dir": service.get("working_dir"),
        "env": {k: env.get(k) for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "DDP_SHARED_DIR")},
        "shared": [v["target"] for v in service.get("volumes", []) if v["type"] == "volume"],
        "ports": service.get("ports"),
    }


def test_checked_in_compose_yaml_agrees_with_the_tool_for_two_gpu_nodes(compose_cli, tmp_path):
    checked_in = compose_config("compose.yaml")["services"]
    rendered = rendered_gpu_project(tmp_path, nodes=2, gpus=1, nproc=1)["services"]
    assert sorted(checked_in) == sorted(rendered) == ["node0", "node1"]
    for name in ("node0", "node1"):
        assert node_contract(checked_in[name]) == node_contract(rendered[name]), name

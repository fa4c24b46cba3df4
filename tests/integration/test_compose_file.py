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


def test_gpu_variant_reserves_distinct_gpus_per_node():
    config = subprocess.run(["docker", "compose", "-f", "compose.yaml", "config", "--format", "json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert config.returncode == 0, config.stderr
    services = json.loads(config.stdout)["services"]
    ids = [services[n]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
           for n in ("node0", "node1")]
    assert ids == [["0"], ["1"]]


def test_cpu_variant_has_no_gpu_reservation():
    config = subprocess.run(["docker", "compose", *CPU_FILES, "config", "--format", "json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    services = json.loads(config.stdout)["services"]
    assert all("deploy" not in s for s in services.values())
    assert {s["environment"]["PET_NPROC_PER_NODE"] for s in services.values()} == {"2"}

"""One GPU, many nodes (--share-gpus): the shared layout and its plan, the NCCL host id each
worker gets, and the nccl-as-gloo shim (on only where asked). The start-up hook runs here for
real, as torchrun would run it in a node."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from orchestrate.config.gpu_layout import GpuLayout, resolve_gpu_layout
from orchestrate.config.request import HostFacts, RunRequest, resolve_config
from orchestrate.engine.compose_file import render_compose
from orchestrate.errors import UsageError
from orchestrate.node import worker_start
from orchestrate.plan.make import make_plan
from orchestrate.plan.show import format_plan

WORKER_START = Path(worker_start.__file__)


@pytest.fixture
def plan_for(tmp_path):
    """The plan of ``train.py`` on a host with ``available`` free GPUs."""
    (tmp_path / "train.py").write_text("")

    def plan(available: int, **options):
        request = RunRequest.from_options(("train.py",), workdir=tmp_path, **options)
        config = resolve_config(request, HostFacts(), available)
        return make_plan(config, "shared", gpu_ids=tuple(str(g) for g in range(available)))

    return plan


def test_without_share_gpus_the_refusal_names_it():
    with pytest.raises(UsageError, match=r"1 GPU\(s\) cannot give 2 nodes a GPU each .* --share-gpus to share them"):
        resolve_gpu_layout(nodes=2, nproc_per_node=None, gpus_per_node=None, available=1)
    with pytest.raises(UsageError, match="--share-gpus"):
        resolve_gpu_layout(nodes=1, nproc_per_node=2, gpus_per_node=1, available=1)


def test_the_shared_layout_gives_every_node_a_gpu_and_lets_processes_share():
    shared = dict(gpus_per_node=None, available=1, share=True)
    assert resolve_gpu_layout(nodes=2, nproc_per_node=None, **shared) == GpuLayout(1, 1, "nccl", True)
    assert resolve_gpu_layout(nodes=2, nproc_per_node=2, **shared) == GpuLayout(1, 2, "nccl", True)
    assert resolve_gpu_layout(nodes=3, nproc_per_node=None, gpus_per_node=None, available=2,
                              share=True) == GpuLayout(1, 1, "nccl", True)
    with pytest.raises(UsageError, match="has none: --cpu; drop --share-gpus, or drop --cpu"):
        resolve_gpu_layout(nodes=2, nproc_per_node=None, gpus_per_node=None, available=1, cpu=True, share=True)
    with pytest.raises(UsageError, match="more than the 1 GPU"):
        resolve_gpu_layout(nodes=2, nproc_per_node=None, gpus_per_node=2, available=1, share=True)


def test_a_shared_plan_puts_every_node_on_the_one_gpu_and_says_so(plan_for):
    plan = plan_for(1, nodes=2, nproc_per_node=2, share_gpus=True)
    assert [n.gpu_ids for n in plan.nodes] == [("0",), ("0",)]
    assert [n.process_gpus for n in plan.nodes] == [(("0",), ("0",))] * 2
    services = render_compose(plan)["services"]
    assert [s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for s in services.values()] == [
        ["0"], ["0"]]
    assert all(s["environment"]["DDP_SHARED_GPUS"] == "1" for s in services.values())
    shown = format_plan(plan)
    assert "GPUs shared (--share-gpus): GPU 0 by node0/local0, node0/local1, node1/local0, node1/local1" in shown
    assert "not NCCL's speed: the transport between workers is sockets" in shown


def test_three_nodes_on_two_gpus_take_them_in_turn(plan_for):
    plan = plan_for(2, nodes=3, share_gpus=True)
    assert [n.gpu_ids for n in plan.nodes] == [("0",), ("1",), ("0",)]
    # only the GPUs more than one worker uses are named
    assert "GPUs shared (--share-gpus): GPU 0 by node0/local0, node2/local0. Correctness" in format_plan(plan)


def test_a_node_of_several_shared_gpus_takes_the_next_ones_wrapping_around(plan_for):
    plan = plan_for(3, nodes=2, gpus_per_node=2, share_gpus=True)
    assert [n.gpu_ids for n in plan.nodes] == [("0", "1"), ("2", "0")]


def test_the_hook_always_runs_and_takes_only_the_flags_asked_for(plan_for):
    hook = "/opt/ddp-compose/orchestrate/node/worker_start.py"
    # one rank per node: the nodes' own host names tell NCCL's hosts apart; no per-rank host id
    one_each = plan_for(1, nodes=2, share_gpus=True).nodes[0].torchrun_argv
    assert one_each[-3:] == (hook, "--", "train.py")
    two_each = plan_for(1, nodes=2, nproc_per_node=2, share_gpus=True).nodes[1].torchrun_argv
    assert two_each[-4:] == (hook, "--nccl-hostid-per-rank", "--", "train.py")
    shim = plan_for(1, nodes=2, share_gpus=True, backend="gloo", nccl_as_gloo=True).nodes[0].torchrun_argv
    assert shim[-4:] == (hook, "--nccl-as-gloo", "--", "train.py")
    plain = plan_for(2, nodes=2).nodes[0]
    assert plain.torchrun_argv[-3:] == (hook, "--", "train.py") and "DDP_SHARED_GPUS" not in plain.env


def test_the_shim_needs_the_gloo_backend(plan_for):
    with pytest.raises(UsageError, match="--nccl-as-gloo .* use it with --backend gloo"):
        plan_for(2, nodes=2, nccl_as_gloo=True)


@pytest.mark.parametrize("asked, given", [
    ("nccl", "gloo"), ("NCCL", "gloo"), ("cuda:nccl,cpu:gloo", "cuda:gloo,cpu:gloo"), (None, "cpu:gloo,cuda:gloo"),
    ("gloo", "gloo"), ("mpi", "mpi")])
def test_the_shim_maps_nccl_to_gloo_and_nothing_else(asked, given):
    assert worker_start.as_gloo(asked) == given


def test_the_shim_finds_the_backend_however_it_is_passed_and_leaves_the_rest():
    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1):
        return backend, init_method, world_size, rank

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None):
        return ranks, timeout, backend

    init = worker_start.with_gloo_backend(init_process_group, default_too=True)
    assert init("nccl", "env://", rank=1) == ("gloo", "env://", -1, 1)
    assert init(backend="cuda:nccl,cpu:gloo") == ("cuda:gloo,cpu:gloo", None, -1, -1)
    assert init() == ("cpu:gloo,cuda:gloo", None, -1, -1)  # torch's pick would be nccl on CUDA
    group = worker_start.with_gloo_backend(new_group, default_too=False)
    assert group([0, 1], backend="nccl") == ([0, 1], None, "gloo")  # the ranks stay ranks
    assert group([0, 1], 30, "nccl") == ([0, 1], 30, "gloo")
    assert group([0, 1]) == ([0, 1], None, None)  # the default group's backend, gloo already


def hook(tmp_path: Path, *args: str, env: dict[str, Optional[str]]) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in {**os.environ, **env}.items() if v is not None}  # None: unset
    return subprocess.run([sys.executable, str(WORKER_START), *args], cwd=tmp_path, capture_output=True, text=True,
                          env=environ, timeout=60)


def test_each_worker_of_a_node_gets_its_own_nccl_hostid_and_runs_the_target_as_python_would(tmp_path):
    (tmp_path / "show.py").write_text("import os, sys\nprint(os.environ.get('NCCL_HOSTID'), __name__, sys.argv[1:],"
                                      " sys.path[0])\n")
    seen = [hook(tmp_path, "--nccl-hostid-per-rank", "--", "show.py", "--epochs", "1", env={"LOCAL_RANK": str(r)})
            for r in (0, 1)]
    assert [s.returncode for s in seen] == [0, 0], seen[0].stderr
    import socket

    host = socket.gethostname()
    assert [s.stdout.split()[0] for s in seen] == [f"{host}-local0", f"{host}-local1"]
    assert seen[0].stdout.split()[1:] == ["__main__", "['--epochs',", "'1']", str(tmp_path)]
    without = hook(tmp_path, "--", "show.py", env={"LOCAL_RANK": "1", "NCCL_HOSTID": None})
    assert without.stdout.split()[0] == "None"  # not asked: not set


def test_a_module_target_runs_from_the_work_directory(tmp_path):
    (tmp_path / "job_module.py").write_text("import sys\nprint('module ran', sys.argv[1:])\n")
    done = hook(tmp_path, "--nccl-hostid-per-rank", "--", "-m", "job_module", "x", env={"LOCAL_RANK": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module ran ['x']"


def test_the_hook_refuses_a_bad_command_line(tmp_path):
    for args in (["--bogus", "--", "show.py"], ["--"], ["--", "-m"], ["--collective-timeout"],
                 ["--nccl-as-gloo", "show.py"]):
        done = hook(tmp_path, *args, env={})
        assert done.returncode != 0 and "usage: worker_start.py" in done.stderr, args


def test_without_flags_the_hook_takes_the_target_with_or_without_the_separator(tmp_path):
    """torchrun's parser drops a ``--`` that comes first among the script's arguments."""
    (tmp_path / "show.py").write_text("import sys\nprint(sys.argv[1:])\n")
    for args in (["--", "show.py", "--", "x"], ["show.py", "--", "x"]):
        done = hook(tmp_path, *args, env={})
        assert done.returncode == 0 and done.stdout.strip() == "['--', 'x']", (args, done.stderr)

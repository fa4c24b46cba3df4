from __future__ import annotations

from pathlib import Path

import pytest

from orchestrate.plan.make import assign_ranks
from orchestrate.plan.show import format_plan
from orchestrate.plan.torchrun import torchrun_argv


@pytest.mark.parametrize(
    "nodes, nproc, expected",
    [
        (1, 1, [(0,)]),
        (2, 2, [(0, 1), (2, 3)]),
        (3, 4, [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)]),
    ],
)
def test_assign_ranks_orders_by_node_then_local_rank(nodes, nproc, expected):
    assert assign_ranks(nodes, nproc) == expected


def test_assign_ranks_covers_every_rank_once():
    ranks = [r for node in assign_ranks(5, 3) for r in node]
    assert sorted(ranks) == list(range(15))


def test_torchrun_argv_is_static_rendezvous_with_the_target_last():
    argv = torchrun_argv(nodes=2, node_rank=1, nproc_per_node=2, master_addr="node0",
                         master_port=29500, target=("-m", "app.toy", "--steps", "5"))
    assert argv[0] == "torchrun"
    options = dict(zip(argv[1:-4:2], argv[2:-4:2]))
    assert options == {
        "--nnodes": "2", "--node-rank": "1", "--nproc-per-node": "2",
        "--master-addr": "node0", "--master-port": "29500", "--max-restarts": "0", "--tee": "3",
        "--log-dir": "/ddp-run/node1/torchrun",
    }
    assert argv[-4:] == ("-m", "app.toy", "--steps", "5")


def test_an_elastic_nodes_torchrun_joins_the_c10d_rendezvous_and_keeps_its_logs(make_job):
    plan = make_job(nodes=3, nproc_per_node=2, rdzv="c10d", min_nodes=2, max_nodes=4, max_restarts=5,
                    rdzv_timeout_s=45, target=("-m", "app.train", "--epochs", "2"))
    argv = plan.nodes[1].torchrun_argv
    # the workers start through the start-up hook, which runs the target
    assert argv[0] == "torchrun" and argv[-6:] == ("/opt/ddp-compose/orchestrate/node/worker_start.py", "--",
                                                   "-m", "app.train", "--epochs", "2")
    options = dict(zip(argv[1:-6:2], argv[2:-6:2]))
    assert options == {
        "--nnodes": "2:4", "--nproc-per-node": "2", "--rdzv-backend": "c10d", "--rdzv-endpoint": "node0:29400",
        "--rdzv-id": plan.run_id,
        # a dead node leaves the rendezvous in about 3 s (keep-alives of 1 s, 3 missed), not 15
        "--rdzv-conf": "join_timeout=45,last_call_timeout=2,close_timeout=10,keep_alive_interval=1,"
                       "keep_alive_max_attempt=3",
        "--max-restarts": "5", "--monitor-interval": "0.5", "--tee": "3", "--log-dir": "/ddp-run/node1/torchrun",
    }
    assert len({n.torchrun_argv for n in plan.nodes}) == 3  # each node its own log directory


def test_plan_assigns_node_ranks_master_and_world_size(make_job):
    plan = make_job(nodes=3, nproc_per_node=2, master_port=31000)
    assert [n.name for n in plan.nodes] == ["node0", "node1", "node2"]
    assert [n.node_rank for n in plan.nodes] == [0, 1, 2]
    assert plan.master_addr == "node0"
    assert plan.world_size == 6
    assert plan.nodes[2].global_ranks == (4, 5)
    assert plan.nodes[1].global_rank(1) == 3
    for node in plan.nodes:
        i = node.torchrun_argv.index("--node-rank")
        assert node.torchrun_argv[i + 1] == str(node.node_rank)
        assert node.torchrun_argv[node.torchrun_argv.index("--master-addr") + 1] == "node0"
        assert node.torchrun_argv[node.torchrun_argv.index("--master-port") + 1] == "31000"
        assert node.torchrun_argv[node.torchrun_argv.index("--log-dir") + 1] == f"/ddp-run/{node.name}/torchrun"


def test_cpu_plan_uses_gloo_and_reserves_no_gpu(make_job):
    plan = make_job(nodes=2)
    assert plan.backend == "gloo"
    assert all(n.gpu_ids == () for n in plan.nodes)
    assert plan.nodes[0].env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_gpu_plan_gives_each_node_distinct_gpus(make_job):
    plan = make_job(nodes=3, nproc_per_node=2, gpus_per_node=2, backend="nccl")
    assert plan.backend == "nccl"
    assert [n.gpu_ids for n in plan.nodes] == [("0", "1"), ("2", "3"), ("4", "5")]
    assert plan.nodes[1].process_gpus == (("2",), ("3",))
    assert plan.nodes[0].env["DDP_BACKEND"] == "nccl"


def test_a_process_spanning_several_gpus_gets_a_block_of_its_node(make_job):
    plan = make_job(nodes=2, nproc_per_node=2, gpus_per_node=4, backend="nccl")
    assert plan.nodes[1].process_gpus == (("4", "5"), ("6", "7"))


def test_project_name_is_unique_per_run(make_job):
    assert make_job("a").project_name != make_job("b").project_name


def test_default_target_is_the_toy_job(make_job):
    plan = make_job()
    assert plan.nodes[0].torchrun_argv[-2:] == ("-m", "app.toy")


def test_format_plan_shows_nodes_x_local_ranks_x_global_ranks_x_gpus(make_job):
    text = format_plan(make_job(nodes=2, nproc_per_node=2, gpus_per_node=2, backend="nccl"))
    assert "GPUs per node G=2  local world size L=2  world size W=4" in text
    rows = [ln.split() for ln in text.splitlines() if ln.startswith(("node0 ", "node1 "))]
    assert rows == [["node0", "0", "0", "0", "0"], ["node0", "0", "1", "1", "1"],
                    ["node1", "1", "0", "2", "2"], ["node1", "1", "1", "3", "3"]]
    assert "node1$ torchrun --nnodes 2 --node-rank 1" in text


def test_the_plans_env_line_shows_a_value_each_node_has_its_own_as_such_not_node0s(make_job):
    plan = make_job(nodes=2, user_env={"WANDB_MODE": "offline"})
    [line] = [ln for ln in format_plan(plan).splitlines() if ln.startswith("env: ")]
    assert " DDP_NODE=<node name> " in line and "node0" not in line, line
    assert [n.env["DDP_NODE"] for n in plan.nodes] == ["node0", "node1"]  # (what each node is given)
    assert " DDP_BACKEND=gloo " in line and " WANDB_MODE=" in line and "offline" not in line  # the user's masked


def test_format_plan_names_the_master_port_of_a_static_job_and_the_rendezvous_of_an_elastic_one(make_job):
    static = format_plan(make_job(nodes=2, master_port=31000))
    assert "world size W=2  master node0:31000" in static and "c10d rendezvous" not in static
    elastic = format_plan(make_job(nodes=2, rdzv="c10d"))
    assert "master node0" not in elastic and "elastic: c10d rendezvous on node0:29400" in elastic


def test_format_plan_marks_cpu_processes(make_job):
    text = format_plan(make_job(nodes=1, nproc_per_node=1))
    assert [ln.split() for ln in text.splitlines() if ln.startswith("node0 ")] == [
        ["node0", "0", "0", "0", "-", "(CPU)"]]


def test_the_node_command_wraps_torchrun_in_the_node_supervisor(make_job):
    plan = make_job(nodes=2, ready_timeout_s=30)
    command = plan.nodes[1].command
    assert command[:4] == ("python3", "/opt/ddp-compose/orchestrate/node/main.py", "--peers", "node0,node1")
    assert command[command.index("--ready-timeout") + 1] == "30"
    assert command[command.index("--lease") + 1] == "/ddp-run/heartbeat"
    assert command[command.index("--") + 1:] == plan.nodes[1].torchrun_argv


def test_workers_get_the_progress_channel_and_global_rank_prefixes(make_job):
    env = make_job().nodes[0].env
    assert env["DDP_PROGRESS_DIR"] == "/ddp-run/progress"
    job = make_job()  # each node says its name and its run (a rank in its debugger names the command)
    assert [(n.env["DDP_NODE"], n.env["DDP_RUN_ID"]) for n in job.nodes] == [(n.name, job.run_id) for n in job.nodes]
    assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[${rank}|${local_rank}]:"


def test_leased_gpus_are_split_among_the_nodes_in_order(make_job):
    from orchestrate.plan.make import make_plan

    config = make_job(nodes=2, gpus_per_node=2, backend="nccl").config
    plan = make_plan(config, "r", gpu_ids=("2", "3", "6", "7"))
    assert [n.gpu_ids for n in plan.nodes] == [("2", "3"), ("6", "7")]


@pytest.mark.parametrize(
    "nodes, nproc, cpus_per_node, host_cpus, expected",
    [
        (2, 1, None, 2, 1),  # two nodes share two cores: one thread each, not two
        (2, 2, None, 16, 4),  # 8 cores per node, 2 processes
        (4, 1, None, 2, 1),  # fewer cores than nodes: never below one thread
        (3, 1, None, 16, 5),  # 16/3 cores per node, rounded down
        (2, 2, 6, 2, 3),  # --cpus-per-node sets the node's cores, whatever the host has
        (2, 1, 0.5, 8, 1),
    ],
)
def test_each_worker_gets_its_share_of_the_cores_the_nodes_share(nodes, nproc, cpus_per_node, host_cpus, expected):
    from orchestrate.config.run_config import RunConfig
    from orchestrate.plan.make import make_plan, threads_per_process

    config = RunConfig(nodes=nodes, nproc_per_node=nproc, cpus_per_node=cpus_per_node)
    assert threads_per_process(config, host_cpus) == expected
    plan = make_plan(config, "r", host_cpus=host_cpus)
    assert {n.env["OMP_NUM_THREADS"] for n in plan.nodes} == {str(expected)}


def test_thread_count_is_left_to_torchrun_without_host_cores_and_to_the_user_when_set():
    from orchestrate.config.run_config import RunConfig
    from orchestrate.plan.make import make_plan

    assert "OMP_NUM_THREADS" not in make_plan(RunConfig(nodes=2), "r").nodes[0].env  # e.g. an export
    mine = RunConfig(nodes=2, user_env={"OMP_NUM_THREADS": "7"})
    assert make_plan(mine, "r", host_cpus=2).nodes[0].env["OMP_NUM_THREADS"] == "7"


@pytest.mark.parametrize("run_as, user_name, user_env, expected", [
    ("1000:1000", "ada", {}, ("ada", "ada")),
    ("1000:1000", "", {}, ("node", "node")),  # a uid without a name on the host either
    ("1000:1000", "ada", {"USER": "svc"}, ("svc", "ada")),  # the user's own --env wins
    (None, "ada", {}, (None, None)),  # the image's own user
])
def test_nodes_run_as_a_uid_get_a_user_name_to_go_with_it(run_as, user_name, user_env, expected):
    from orchestrate.config.run_config import RunConfig
    from orchestrate.plan.make import make_plan

    env = make_plan(RunConfig(nodes=2, run_as=run_as, user_name=user_name, user_env=user_env), "r").nodes[1].env
    assert (env.get("USER"), env.get("LOGNAME")) == expected


def test_uneven_nodes_get_their_own_worker_counts_and_consecutive_ranks(make_job):
    from orchestrate.plan.make import assign_uneven_ranks
    assert assign_uneven_ranks([2, 1, 1]) == [(0, 1), (2,), (3,)]
    assert assign_uneven_ranks([1, 3]) == [(0,), (1, 2, 3)]
    plan = make_job(nodes=3, node_nprocs=(2, 1, 1))
    assert plan.world_size == 4 and plan.config.nproc_per_node == 2
    assert [n.global_ranks for n in plan.nodes] == [(0, 1), (2,), (3,)]
    assert [n.torchrun_argv[n.torchrun_argv.index("--nproc-per-node") + 1] for n in plan.nodes] == ["2", "1", "1"]
    assert [len(n.process_gpus) for n in plan.nodes] == [2, 1, 1]
    shown = format_plan(plan)
    assert "local world size L=2,1,1  world size W=4" in shown
    assert len([line for line in shown.splitlines() if line.startswith("node0 ")]) == 2
    assert len([line for line in shown.splitlines() if line.startswith("node2 ")]) == 1


def test_uneven_elastic_nodes_each_start_their_own_count(make_job):
    plan = make_job(nodes=2, node_nprocs=(1, 3), rdzv="c10d")
    assert [n.torchrun_argv[n.torchrun_argv.index("--nproc-per-node") + 1] for n in plan.nodes] == ["1", "3"]
    assert plan.world_size == 4 and all(n.global_ranks == () for n in plan.nodes)


@pytest.mark.parametrize("overrides, message", [
    (dict(nodes=2, node_nprocs=(2, 1, 1)), "gives 3 nodes their workers, but --nodes is 2"),
    (dict(nodes=2, node_nprocs=(2, 0)), "every node needs 1 worker or more"),
    (dict(nodes=2, node_nprocs=(2, 3), gpus_per_node=4, backend="nccl"), "cannot be split evenly among 3 processes"),
])
def test_uneven_counts_that_cannot_run_are_refused(make_job, overrides, message):
    from orchestrate.errors import UsageError
    with pytest.raises(UsageError, match=message):
        make_job(**overrides)


def test_uneven_counts_come_from_the_option_and_leave_even_ones_even(tmp_path):
    from orchestrate.config.options import nproc_counts
    from orchestrate.config.request import HostFacts, RunRequest, resolve_config
    assert nproc_counts("2") == 2 and nproc_counts("2,1,1") == (2, 1, 1)
    uneven = resolve_config(RunRequest(nodes=3, nproc_per_node=(2, 1, 1), workdir=tmp_path, cpu=True), HostFacts())
    assert (uneven.node_nprocs, uneven.nproc_per_node, uneven.world_size) == ((2, 1, 1), 2, 4)
    even = resolve_config(RunRequest(nodes=2, nproc_per_node=(2, 2), workdir=tmp_path, cpu=True), HostFacts())
    assert (even.node_nprocs, even.nproc_per_node, even.world_size) == ((), 2, 4)


def test_a_run_listed_from_its_labels_keeps_each_nodes_ranks(make_job):
    from orchestrate.engine.labels import node_labels
    from orchestrate.engine.runs import NodeInfo, RunInfo, node_plans
    plan = make_job(nodes=3, node_nprocs=(2, 1, 1))
    labels = node_labels(plan, plan.nodes[0])
    assert labels["io.ddp-compose.nproc-per-node"] == "2,1,1"
    nodes = tuple(NodeInfo(n.name, n.node_rank, None, "running", None, False, ()) for n in plan.nodes)
    run = RunInfo(plan.run_id, plan.project_name, nodes, labels, True)
    assert [p.global_ranks for p in node_plans(run)] == [(0, 1), (2,), (3,)]
    assert run.nproc_per_node == 2


def test_a_runs_labels_name_the_user_who_launched_it_and_none_where_the_os_has_no_uids(make_job):
    """On an engine several users share, `ps --mine` and `prune` tell whose a run is by them."""
    from orchestrate.engine.labels import OWNER_LABEL, OWNER_NAME_LABEL, node_labels

    plan = make_job(nodes=2, run_as="1234:100", user_name="alice")
    for node in plan.nodes:
        labels = node_labels(plan, node)
        assert (labels[OWNER_LABEL], labels[OWNER_NAME_LABEL]) == ("1234", "alice")
    labels = node_labels(make_job(nodes=1), make_job(nodes=1).nodes[0])  # run_as None: no uids here
    assert (labels[OWNER_LABEL], labels[OWNER_NAME_LABEL]) == ("", "")


def test_a_run_listed_from_its_labels_knows_how_many_nodes_its_elastic_job_needs(make_job):
    from orchestrate.engine.labels import MIN_NODES_LABEL, node_labels
    from orchestrate.engine.runs import NodeInfo, RunInfo

    def listed(plan, **changed):
        labels = {**node_labels(plan, plan.nodes[0]), **changed}
        nodes = tuple(NodeInfo(n.name, n.node_rank, None, "running", None, False, ()) for n in plan.nodes)
        return RunInfo(plan.run_id, plan.project_name, nodes, labels, True)

    elastic = make_job(nodes=3, rdzv="c10d", min_nodes=2)
    assert listed(elastic).min_nodes == 2
    assert listed(elastic, **{MIN_NODES_LABEL: ""}).min_nodes == 3  # a run started before the label: MIN is --nodes
    assert listed(make_job(nodes=3)).min_nodes is None  # a static job


def test_a_store_container_is_the_rendezvous_endpoint_and_no_node(make_job):
    from orchestrate.engine.compose_file import render_compose
    plan = make_job(nodes=2, rdzv="c10d", rdzv_store="container", restart="node")
    for node in plan.nodes:
        argv = node.torchrun_argv
        assert argv[argv.index("--rdzv-endpoint") + 1] == "rdzv-store:29400"
        assert node.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    services = render_compose(plan)["services"]
    store = services["rdzv-store"]
    assert store["labels"]["io.ddp-compose.role"] == "rdzv-store" and "io.ddp-compose.node-rank" not in store["labels"]
    assert store["command"][-3:] == ["python3", "/opt/ddp-compose/orchestrate/node/rdzv_store.py", "29400"]
    assert "--lease" in store["command"]  # it goes when the launcher does
    on_node0 = make_job(nodes=2, rdzv="c10d")
    assert "rdzv-store" not in render_compose(on_node0)["services"]
    argv = on_node0.nodes[1].torchrun_argv
    assert argv[argv.index("--rdzv-endpoint") + 1] == "node0:29400"
    # a store per round on node0 too: a restarted worker group reads no address of the attempt before
    assert on_node0.nodes[1].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in make_job(nodes=2).nodes[1].env  # static: no restarts
    mine = make_job(nodes=2, rdzv="c10d", user_env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"})
    assert mine.nodes[0].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"  # the user's --env wins, to see torch's own


@pytest.mark.parametrize("overrides", [dict(restart="node"), dict(rdzv_store="container")])
def test_restart_scopes_and_stores_are_for_elastic_jobs(make_job, overrides):
    from orchestrate.errors import UsageError
    with pytest.raises(UsageError, match="--restart and --rdzv-store are for --rdzv c10d"):
        make_job(nodes=2, **overrides)


def test_a_supervisor_that_attaches_later_keeps_the_runs_restart_scope_and_store(make_job):
    from orchestrate.engine.labels import node_labels
    from orchestrate.engine.runs import NodeInfo, RunInfo
    from orchestrate.launch.run import spec_for_run
    plan = make_job(nodes=2, rdzv="c10d", restart="node", rdzv_store="container")
    labels = node_labels(plan, plan.nodes[0])
    nodes = tuple(NodeInfo(n.name, n.node_rank, type("C", (), {"attrs": {}})(), "running", None, False, ())
                  for n in plan.nodes)
    spec = spec_for_run(RunInfo(plan.run_id, plan.project_name, nodes, labels, True))
    assert (spec.restart_scope, spec.store_host, spec.elastic) == ("node", "rdzv-store", True)
    plain = make_job(nodes=2, rdzv="c10d")
    spec = spec_for_run(RunInfo(plain.run_id, plain.project_name, nodes, node_labels(plain, plain.nodes[0]), True))
    assert (spec.restart_scope, spec.store_host) == ("all", "node0")


@pytest.mark.parametrize("timeout_s", [None, 900.0])
def test_the_supervisor_of_a_run_and_one_that_attaches_later_know_its_collective_timeout(make_job, timeout_s,
                                                                                         tmp_path):
    """What the watchdog names where --hang-timeout passes while ranks wait for a computing one: the
    hook's flag in the nodes' command, not a DDP_TIMEOUT the user's --env gave app/, nor the flag
    of the user's own script after the hook's "--"."""
    from orchestrate.engine.labels import node_labels
    from orchestrate.engine.runs import NodeInfo, RunInfo
    from orchestrate.launch.compose_backend import spec_for
    from orchestrate.launch.run import spec_for_run
    (tmp_path / "train.py").write_text("")
    plan = make_job(nodes=2, collective_timeout_s=timeout_s, user_env={"DDP_TIMEOUT": "600"},
                    target=("train.py", "--collective-timeout", "5"))
    assert spec_for(plan).collective_timeout_s == timeout_s
    nodes = tuple(NodeInfo(n.name, n.node_rank, type("C", (), {"attrs": {"Config": {
        "Cmd": list(n.command), "Env": [f"{key}={value}" for key, value in n.env.items()]}}})(), "running", None,
        False, ()) for n in plan.nodes)
    spec = spec_for_run(RunInfo(plan.run_id, plan.project_name, nodes, node_labels(plan, plan.nodes[0]), True))
    assert spec.collective_timeout_s == timeout_s


# What the nodes read: the plan's commands and environment are the wire between the launcher and
# the node supervisor, torchrun and the workers, so these tests spell them out whole.
SUPERVISOR = ("python3", "/opt/ddp-compose/orchestrate/node/main.py")


def test_the_nodes_environment_is_the_launchers_own_and_each_option_adds_its_variable(make_job):
    base = {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": "/opt/ddp-compose",
        "DDP_BACKEND": "gloo",
        "DDP_SHARED_DIR": "/shared",
        "DDP_PROGRESS_DIR": "/ddp-run/progress",
        "DDP_DEBUG_DIR": "/ddp-run/debug",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}|${local_rank}]:",
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_SOCKET_IFNAME": "eth0",
        "DDP_NODE": "node1",
        "DDP_RUN_ID": "r1",
    }
    assert make_job("r1", nodes=2).nodes[1].env == base
    every = make_job("r1", nodes=2, collective_timeout_s=90.5, debug_collectives=True, post_mortem=True,
                     rdzv="c10d").nodes[1].env
    assert every == {**base, "DDP_TIMEOUT": "90.5", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "DDP_POST_MORTEM": "1",
                     "LOGLEVEL": "INFO", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    # the user's PYTHONPATH goes first; the project stays at its end for -m app.NAME
    mine = make_job("r1", nodes=2, user_env={"PYTHONPATH": "/work/src", "DDP_BACKEND": "mine"}).nodes[1].env
    assert mine == {**base, "PYTHONPATH": "/work/src:/opt/ddp-compose", "DDP_BACKEND": "mine"}


def test_a_foreground_runs_nodes_and_store_hold_the_launchers_lease_and_a_detached_runs_hold_none(tmp_path):
    from orchestrate.config.run_config import RunConfig
    from orchestrate.plan.make import make_plan

    config = RunConfig(nodes=2, rdzv="c10d", rdzv_store="container", ready_timeout_s=45, lease_timeout_s=12.5,
                       stop_grace_s=7, workdir=tmp_path, runs_dir=tmp_path / "runs")
    lease = ("--lease", "/ddp-run/heartbeat", "--lease-timeout", "12.5", "--stop-grace", "7")
    for detached, held in ((False, lease), (True, ())):
        plan = make_plan(config, "r", detached=detached)
        node = plan.nodes[1]
        assert node.command == (*SUPERVISOR, "--peers", "node0,node1", "--ready-timeout", "45", *held, "--",
                                *node.torchrun_argv), detached
        assert plan.store_command == (*SUPERVISOR, "--peers", "rdzv-store", "--ready-timeout", "45", *held, "--",
                                      "python3", "/opt/ddp-compose/orchestrate/node/rdzv_store.py", "29400"), detached
        assert plan.detached is detached


@pytest.mark.parametrize("netem, loss", [
    (True, ("tc qdisc add dev eth0 root handle 1: netem loss 0.5%",)),
    # a kernel without netem: the loss is an iptables rule
    (False, ("iptables -w -A INPUT -i eth0 -m statistic --mode random --probability 0.005 -j DROP",)),
])
def test_a_shaped_link_is_set_up_by_the_node_supervisor_as_root_then_torchrun_runs_as_the_user(
        tmp_path, netem, loss):
    from orchestrate.config.link import parse_link
    from orchestrate.config.run_config import RunConfig
    from orchestrate.plan.make import make_plan

    config = RunConfig(nodes=2, link=parse_link("loss=0.5%"), run_as="1000:1000", workdir=tmp_path,
                       runs_dir=tmp_path / "runs")
    plan = make_plan(config, "r", **({} if netem else {"netem": False}))  # a kernel with netem: the default
    command = plan.nodes[0].command
    shaping = command[command.index("--stop-grace") + 2:command.index("--")]
    assert shaping == (*(a for cmd in loss for a in ("--tc", cmd)), "--run-as", "1000:1000")
    unshaped = make_plan(RunConfig(nodes=2, run_as="1000:1000", workdir=tmp_path, runs_dir=tmp_path / "runs"), "r")
    command = unshaped.nodes[0].command
    assert command[command.index("--stop-grace") + 2] == "--"  # no link: root's work is none, nor --run-as


def test_the_workers_start_up_hook_gets_every_flag_the_run_asks_for(make_job):
    argv = make_job(nodes=2, nccl_as_gloo=True, collective_timeout_s=30).nodes[0].torchrun_argv
    target = argv[argv.index("/opt/ddp-compose/orchestrate/node/worker_start.py"):]
    assert target == ("/opt/ddp-compose/orchestrate/node/worker_start.py", "--nccl-as-gloo",
                      "--collective-timeout", "30", "--", *make_job().config.target)


def test_a_plan_needs_a_gpu_per_node_unless_the_nodes_share_them(make_job):
    from orchestrate.plan.make import make_plan

    config = make_job(nodes=2, gpus_per_node=2, backend="nccl").config
    with pytest.raises(ValueError, match=r"^4 GPUs planned but only 3 given$"):
        make_plan(config, "r", gpu_ids=("0", "1", "2"))
    shared = make_job(nodes=2, gpus_per_node=2, backend="nccl", share_gpus=True).config
    assert [n.gpu_ids for n in make_plan(shared, "r", gpu_ids=("4", "5")).nodes] == [("4", "5"), ("4", "5")]


def test_a_plan_keeps_who_asked_for_it_when_and_how_and_the_image(make_job):
    from orchestrate.plan.make import make_plan

    config = make_job(image="mine:1").config
    plan = make_plan(config, "r", launcher="host:12:34", command_line="run --nodes 2", created="2026-12-03T10:00:00")
    assert (plan.image, plan.launcher, plan.command_line, plan.created) == (
        "mine:1", "host:12:34", "run --nodes 2", "2026-12-03T10:00:00")
    plain = make_plan(config, "r")
    assert (plain.launcher, plain.command_line, plain.created, plain.detached) == ("", "", "", False)


def test_a_mount_onto_the_nodes_root_is_refused_with_a_path_that_would_do(make_job):
    from orchestrate.config.mounts import Mount
    from orchestrate.errors import UsageError

    with pytest.raises(UsageError, match=r"e\.g\. --mount /:/data/host$"):
        make_job(mounts=(Mount(Path("/"), "/opt/ddp-compose"),))

"""A run as asked (RunRequest) becoming its RunConfig, in process: the option checks the command
line's tests reach only through a subprocess, and each option's way into the config."""
from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from orchestrate.config.link import parse_link
from orchestrate.config.options import OPTIONS_BY_DEST
from orchestrate.config.request import (
    HostFacts,
    RunRequest,
    chosen_dockerfile,
    invoking_user_name,
    lease_timeout,
    resolve_config,
    unused_requirements_note,
    user_env,
)
from orchestrate.config.run_config import (
    DEFAULT_ELASTIC_RESTARTS,
    LEASE_TIMEOUT_ENV,
    LEASE_TIMEOUT_S,
    RunConfig,
)
from orchestrate.errors import UsageError


def resolved(tmp_path: Path, host: HostFacts = HostFacts(), available_gpus=None, **options) -> RunConfig:
    return resolve_config(RunRequest.from_options(workdir=tmp_path, runs_dir=tmp_path / "runs", **options), host,
                          available_gpus)


# Each option as a request gives it, the config's field it becomes, and the value it has there.
STATIC_OPTIONS = [
    ("master_port", 31000, "master_port", 31000),
    ("ready_timeout", 7.5, "ready_timeout_s", 7.5),
    ("collective_timeout", 12.0, "collective_timeout_s", 12.0),
    ("link", "1gbe", "link", parse_link("1gbe")),
    ("stop_grace", 2.5, "stop_grace_s", 2.5),
    ("hang_timeout", 90.0, "hang_timeout_s", 90.0),
    ("hang_diagnose_after", 30.0, "hang_diagnose_after_s", 30.0),
    ("debug_collectives", True, "debug_collectives", True),
    ("post_mortem", True, "post_mortem", True),
    ("nccl_as_gloo", True, "nccl_as_gloo", True),
    ("keep", True, "keep", True),
    ("image", "mine:1", "image", "mine:1"),
    ("cpus_per_node", 1.5, "cpus_per_node", 1.5),
    ("memory_per_node", "2g", "memory_per_node", 2 * 1024**3),
]
ELASTIC_OPTIONS = [
    ("nnodes", "1:5", "min_nodes", 1),
    ("nnodes", "1:5", "max_nodes", 5),
    ("max_restarts", 5, "max_restarts", 5),
    ("rdzv_timeout", 9.0, "rdzv_timeout_s", 9.0),
    ("restart", "node", "restart", "node"),
    ("rdzv_store", "container", "rdzv_store", "container"),
]


@pytest.mark.parametrize("option, given, field, expected", STATIC_OPTIONS)
def test_each_option_of_a_static_run_reaches_its_config(tmp_path, option, given, field, expected):
    default = getattr(resolved(tmp_path, cpu=True, nodes=3), field)
    assert default != expected, "the value under test must not be the default, or a dropped option would pass"
    assert getattr(resolved(tmp_path, cpu=True, nodes=3, **{option: given}), field) == expected


@pytest.mark.parametrize("option, given, field, expected", ELASTIC_OPTIONS)
def test_each_option_of_an_elastic_run_reaches_its_config(tmp_path, option, given, field, expected):
    default = getattr(resolved(tmp_path, cpu=True, nodes=3, rdzv="c10d"), field)
    assert default != expected, "the value under test must not be the default, or a dropped option would pass"
    assert getattr(resolved(tmp_path, cpu=True, nodes=3, rdzv="c10d", **{option: given}), field) == expected


def test_restarts_default_to_none_for_a_static_run_and_three_for_an_elastic_one(tmp_path):
    assert resolved(tmp_path, cpu=True).max_restarts == 0
    assert resolved(tmp_path, cpu=True, rdzv="c10d").max_restarts == DEFAULT_ELASTIC_RESTARTS == 3
    assert resolved(tmp_path, cpu=True, rdzv="c10d", max_restarts=0).max_restarts == 0  # asked for, not defaulted


def test_the_host_gives_the_config_its_user_and_lease(tmp_path):
    host = HostFacts(environ={LEASE_TIMEOUT_ENV: "4.5"}, run_as="1234:5678", user_name="ada")
    config = resolved(tmp_path, host, cpu=True)
    assert (config.run_as, config.user_name, config.lease_timeout_s) == ("1234:5678", "ada", 4.5)
    assert resolved(tmp_path, cpu=True).lease_timeout_s == LEASE_TIMEOUT_S


def test_cpu_takes_no_gpu_of_a_host_that_has_them(tmp_path):
    config = resolved(tmp_path, available_gpus=4, cpu=True, nodes=2)
    assert (config.gpus_per_node, config.backend, config.share_gpus) == (0, "gloo", False)
    on_gpus = resolved(tmp_path, available_gpus=4, nodes=2)
    assert (on_gpus.gpus_per_node, on_gpus.backend) == (2, "nccl")


def test_lease_timeout_reads_the_hosts_setting_or_refuses_it_whole():
    assert lease_timeout({}) == lease_timeout({LEASE_TIMEOUT_ENV: ""}) == LEASE_TIMEOUT_S
    assert lease_timeout({LEASE_TIMEOUT_ENV: "3"}) == 3.0
    with pytest.raises(UsageError) as refused:
        lease_timeout({LEASE_TIMEOUT_ENV: "soon"})
    assert str(refused.value) == f"{LEASE_TIMEOUT_ENV} must be seconds, e.g. 5, got 'soon'"


def test_the_env_file_is_read_and_named_in_its_own_errors(tmp_path):
    env_file = tmp_path / "job.env"
    env_file.write_text("A=1\nB=from-file\n")
    request = RunRequest(env_file=env_file, copy_env=("B",), env=(("C", "3"),))
    assert user_env(request, {"B": "copied"}) == {"A": "1", "B": "copied", "C": "3"}
    env_file.write_text("A=1\nbroken\n")
    with pytest.raises(UsageError, match=rf"^--env-file {re.escape(str(env_file))}:2: expected KEY=VALUE"):
        user_env(request, {})


def test_every_env_file_given_is_read_a_later_one_winning_as_composes(tmp_path):
    from orchestrate.cli.main import build_parser

    (tmp_path / "job.env").write_text("A=1\nB=job\n")
    (tmp_path / "other.env").write_text("B=other\nC=2\n")
    args = build_parser().parse_args(["plan", "--env-file", str(tmp_path / "job.env"),
                                      "--env-file", str(tmp_path / "other.env")])
    request = RunRequest.from_options(env_file=args.env_file)
    assert request.env_file == (tmp_path / "job.env", tmp_path / "other.env")
    assert user_env(request, {}) == {"A": "1", "B": "other", "C": "2"}
    assert RunRequest.from_options(env_file=tmp_path / "job.env").env_file == (tmp_path / "job.env",)
    assert RunRequest.from_options(env_file=None).env_file == ()  # the field's old default: no file
    assert user_env(RunRequest(env_file=None), {}) == {}


@pytest.mark.parametrize("make, why", [
    (lambda tmp_path: tmp_path / "missing.env", "No such file or directory"),
    (lambda tmp_path: tmp_path, "Is a directory"),
])
def test_an_env_file_that_cannot_be_read_is_refused_in_one_line(tmp_path, make, why):
    path = make(tmp_path)
    with pytest.raises(UsageError) as refused:
        user_env(RunRequest(env_file=path), {})
    assert str(refused.value) == f"--env-file {path}: {why}"


def test_the_dockerfile_is_the_one_given_else_the_work_directorys_unless_refused(tmp_path):
    given = tmp_path / "elsewhere" / "Dockerfile.gpu"
    assert chosen_dockerfile(RunRequest(workdir=tmp_path, dockerfile=str(given))) == given
    assert chosen_dockerfile(RunRequest(workdir=tmp_path)) is None
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    assert chosen_dockerfile(RunRequest(workdir=tmp_path)) == tmp_path / "Dockerfile"
    assert chosen_dockerfile(RunRequest(workdir=tmp_path, no_dockerfile=True)) is None


def test_a_work_directorys_requirements_txt_left_alone_is_said_with_the_option_that_installs_it(
        tmp_path, monkeypatch):
    from orchestrate.cli.main import main
    from tests.fakes import FakeDockerClient

    assert unused_requirements_note(RunRequest(workdir=tmp_path)) == ""  # none there
    (tmp_path / "requirements.txt").write_text("tabulate==0.9.0\n")
    said = (f"{tmp_path}/requirements.txt is not installed in the nodes (they run the node image as it is);"
            f" --requirements {tmp_path}/requirements.txt installs it")
    assert unused_requirements_note(RunRequest(workdir=tmp_path)) == said
    monkeypatch.chdir(tmp_path)  # as the user ran it, from the work directory: the option as they would type it
    assert unused_requirements_note(RunRequest(workdir=Path("."))) == (
        "requirements.txt is not installed in the nodes (they run the node image as it is);"
        " --requirements requirements.txt installs it")
    # given, or a Dockerfile that may install it itself: nothing to say
    assert unused_requirements_note(RunRequest(workdir=tmp_path, requirements=tmp_path / "requirements.txt")) == ""
    # a user's own image, which may have them installed
    assert unused_requirements_note(RunRequest(workdir=tmp_path, image="reg.example.com/me/mytrain:1")) == ""
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    assert unused_requirements_note(RunRequest(workdir=tmp_path)) == ""
    assert unused_requirements_note(RunRequest(workdir=tmp_path, no_dockerfile=True)) == said
    # said at the start of a run (here its plan), one line, before anything else
    out = io.StringIO()
    assert main(["plan", "--cpu", "--no-dockerfile", "--workdir", str(tmp_path)], out=out,
                client=FakeDockerClient()) == 0
    assert out.getvalue().splitlines()[0] == f"[orchestrate] {said}"


def test_the_host_facts_are_this_process_environment_and_user(monkeypatch):
    import pwd

    monkeypatch.setenv("DDPTEST_HOST_FACT", "seen")
    here = HostFacts.here()
    assert here.environ["DDPTEST_HOST_FACT"] == "seen"
    assert here.run_as == f"{os.getuid()}:{os.getgid()}"
    assert here.user_name == pwd.getpwuid(os.getuid()).pw_name != ""


def test_a_uid_without_a_name_has_no_user_name(monkeypatch):
    import pwd

    named = {entry.pw_uid for entry in pwd.getpwall()}
    unnamed = next(uid for uid in range(2**31 - 2, 0, -1) if uid not in named)
    monkeypatch.setattr(os, "getuid", lambda: unnamed)
    assert invoking_user_name() == ""


def test_an_unknown_keyword_option_is_refused_naming_every_option_in_order():
    with pytest.raises(UsageError) as refused:
        RunRequest.from_options(gpu=1)
    found = re.fullmatch(r"no run option 'gpu' \(options: (.*)\)", str(refused.value))
    assert found is not None, str(refused.value)
    names = found.group(1).split(", ")
    assert names == sorted(names) and set(names) == set(OPTIONS_BY_DEST) and "nodes" in names


def test_env_may_be_given_as_a_mapping_pairs_or_assignments(tmp_path):
    as_mapping = RunRequest.from_options(env={"A": "1", "B": "x=y"})
    assert as_mapping.env == (("A", "1"), ("B", "x=y"))
    assert RunRequest.from_options(env=["A=1", "B=x=y"]) == as_mapping
    assert RunRequest.from_options(env=[("A", "1"), ("B", "x=y")]) == as_mapping



SLURM = {"scheduler": "slurm", "cpu": True}
SBATCH = "tests/jobs/user_job.sbatch"
SLURM_BOUND = "is for --scheduler compose"
# Each combination refused before anything is asked of the engine, and its one line, whole.
REFUSED_COMBINATIONS = [
    ({"sbatch": SBATCH}, "--sbatch needs --scheduler slurm"),
    ({"detach": True, "faults": ["kill:node1@t=5"]}, "--fault needs the launcher attached: drop --detach (inject"
     " faults into a detached run with `python -m orchestrate fault RUN SPEC`)"),
    ({"detach": True, "keep": True}, "--keep is for a run in the foreground: a detached run is kept until"
     " `python -m orchestrate down RUN` removes it; drop --keep"),
    ({"cpu": True, "gpus_per_node": 2}, "--cpu reserves no GPUs: drop --gpus-per-node 2, or --cpu"),
    ({"dockerfile": "/no/Dockerfile", "no_dockerfile": True},
     "--dockerfile /no/Dockerfile and --no-dockerfile: give one of them"),
    ({**SLURM, "sbatch": SBATCH, "target": ("train.py", "--name", "a b")},
     f"--sbatch {SBATCH} runs what that script runs: drop the job after -- (train.py --name 'a b')"),
    ({**SLURM, "sbatch": "/no/job.sh"}, "--sbatch file '/no/job.sh' not found"),
    ({**SLURM, "sbatch": "/tmp"}, "--sbatch file '/tmp' is a directory, not a file"),
    ({**SLURM, "sbatch": SBATCH, "nproc_per_node": "2", "rdzv": "c10d", "nnodes": "1:2", "max_restarts": 1,
      "rdzv_timeout": 5, "master_port": 3000},
     f"--sbatch {SBATCH} starts torchrun as that script says: drop --nproc-per-node, --rdzv, --nnodes,"
     " --max-restarts, --rdzv-timeout, --master-port (--nodes sizes the cluster it runs on)"),
    ({**SLURM, "sbatch": SBATCH, "rdzv_timeout": 5},
     f"--sbatch {SBATCH} starts torchrun as that script says: drop --rdzv-timeout (--nodes sizes the cluster it"
     " runs on)"),
    ({**SLURM, "nodes": 2, "nnodes": "1:3"}, "--nnodes 1:3 with --nodes 2: a Slurm job's allocation cannot grow past"
     " the nodes it starts on, so MAX is --nodes: give --nnodes 1:2"),
    ({**SLURM, "detach": True},
     "--detach is for --scheduler compose; a Slurm run stays attached (Slurm keeps the queue)"),
    ({"scheduler": "slurm", "gpus_per_node": 1}, "the simulated Slurm cluster runs CPU/Gloo nodes: drop"
     " --gpus-per-node 1 (export --to slurm writes #SBATCH --gpus-per-node for a real cluster)"),  # not --cpu: it
    # refuses --gpus-per-node too
    ({**SLURM, "share_gpus": True}, "--share-gpus and --nccl-as-gloo are for --scheduler compose: the simulated"
     " Slurm cluster runs CPU/Gloo nodes"),
    ({**SLURM, "nccl_as_gloo": True}, "--share-gpus and --nccl-as-gloo are for --scheduler compose: the simulated"
     " Slurm cluster runs CPU/Gloo nodes"),
    ({**SLURM, "sbatch": SBATCH, "post_mortem": True}, f"--pdb needs the generated batch script: --sbatch {SBATCH}"
     " starts its workers as it says, without the start-up hook that takes their pdb to `debug RUN RANK`"),
    ({**SLURM, "link": "1gbe"}, "--link is for --scheduler compose: the simulated Slurm cluster's nodes do not shape"
     " their network"),
    ({**SLURM, "sbatch": SBATCH, "hang_timeout": 60}, "--hang-timeout and --hang-diagnose-after need the generated"
     f" batch script: --sbatch {SBATCH} starts its workers as it says, without the start-up hook that says where each"
     " rank waits"),
    ({**SLURM, "sbatch": SBATCH, "hang_diagnose_after": 5}, "--hang-timeout and --hang-diagnose-after need the"
     f" generated batch script: --sbatch {SBATCH} starts its workers as it says, without the start-up hook that says"
     " where each rank waits"),
    ({**SLURM, "restart": "node"}, "--restart and --rdzv-store are for --scheduler compose: under Slurm, Slurm"
     " restarts (a requeue restarts the whole job) and torchrun's rendezvous is the batch host's"),
    ({**SLURM, "rdzv_store": "container"}, "--restart and --rdzv-store are for --scheduler compose: under Slurm,"
     " Slurm restarts (a requeue restarts the whole job) and torchrun's rendezvous is the batch host's"),
    ({**SLURM, "nodes": 3, "nproc_per_node": "2,1,1"}, "--nproc-per-node 2,1,1: under --scheduler slurm one srun"
     " starts the same torchrun on every node, so the nodes' workers are even"),
    ({**SLURM, "faults": ["slow:node1,cpus=0.5@t=5"]}, "--fault slow:node1,cpus=0.5@t=5: under --scheduler slurm a"
     " fault is one of kill, pause, disconnect, restart, preempt, without an end"),
    ({**SLURM, "faults": ["kill:store@step=3"]}, "--fault kill:store@step=3: under --scheduler slurm the rendezvous"
     " store is torchrun's agent on the batch host (the first node), and kill:node0 takes it with the node; a fault to"
     " a store container of the run's own is for --scheduler compose with --rdzv c10d --rdzv-store container"),
    ({**SLURM, "faults": ["pause:node1@t=5..10"]}, "--fault pause:node1@t=5..10: under --scheduler slurm a fault is"
     " one of kill, pause, disconnect, restart, preempt, without an end"),
]


@pytest.mark.parametrize("options, message", REFUSED_COMBINATIONS)
def test_options_that_cannot_go_together_are_refused_in_one_whole_line(options, message):
    options = dict(options)
    request = RunRequest.from_options(options.pop("target", ()), **options)
    with pytest.raises(UsageError) as refused:
        request.check_combination()
    assert str(refused.value) == message


@pytest.mark.parametrize("options", [
    {**SLURM, "sbatch": SBATCH},
    {**SLURM, "nodes": 3, "nproc_per_node": "2,2,2", "nnodes": "2:3", "rdzv": "c10d"},
    {**SLURM, "faults": ["kill:node1@t=5", "pause:node0@step=3", "preempt:node1@t=9"]},
    {"scheduler": "slurm", "gpus_per_node": 0},
    {"detach": True, "link": "1gbe", "hang_timeout": 60, "restart": "node", "rdzv": "c10d"},
])
def test_options_that_go_together_are_taken(options):
    assert RunRequest.from_options(**options).check_combination() is None

"""export --to slurm|kubernetes: the manifests against Kubernetes' own schemas (offline, with
kubernetes-validate), the rank and master wiring, and the command line."""
from __future__ import annotations

import io
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from orchestrate.cli.main import main
from orchestrate.errors import UsageError
from orchestrate.export.kubernetes import COMPLETION_INDEX, export_kubernetes, to_yaml
from orchestrate.export.options import ExportOptions, default_job_name
from orchestrate.export.slurm import export_slurm

KUBERNETES_VERSION = "1.33"


def validate(obj: dict) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_manifests_are_valid_kubernetes_objects(make_job):
    plan = make_job(nodes=4, nproc_per_node=8, gpus_per_node=8, backend="nccl", cpus_per_node=32,
                    memory_per_node=256 * 2**30, user_env={"WANDB_MODE": "offline"})
    objects = export_kubernetes(plan, ExportOptions(name="ddp-train", namespace="ml"))
    assert [o["kind"] for o in objects] == ["Service", "Job"]
    for obj in yaml.safe_load_all(to_yaml(objects)):  # what the user gets, read back
        validate(obj)


def test_the_manifests_wire_what_a_schema_cannot_check(make_job):
    plan = make_job(nodes=4, nproc_per_node=8, gpus_per_node=8, backend="nccl", cpus_per_node=32,
                    memory_per_node=256 * 2**30, collective_timeout_s=90)
    service, job = export_kubernetes(plan, ExportOptions(name="ddp-train", namespace="ml"))
    labels = {"app.kubernetes.io/name": "ddp-train", "app.kubernetes.io/managed-by": "ddp-compose"}
    for obj in (service, job):
        assert obj["metadata"] == {"name": "ddp-train", "labels": labels, "namespace": "ml"}
    assert service["spec"]["ports"] == [{"name": "rendezvous", "port": plan.master_port}]
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"] == {"app.kubernetes.io/name": "ddp-train"}
    container = pod["spec"]["containers"][0]
    assert container["name"] == "node" and container["image"] == plan.config.image
    assert container["ports"] == [{"name": "rendezvous", "containerPort": plan.master_port}]
    # every mount names a volume of the pod, and /dev/shm is in memory
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert [(m["name"] in volumes, m["mountPath"]) for m in container["volumeMounts"]] == [(True, "/dev/shm")]
    assert volumes[container["volumeMounts"][0]["name"]]["emptyDir"] == {"medium": "Memory"}
    limits = {"nvidia.com/gpu": 8, "cpu": "32", "memory": "262144Mi"}
    assert container["resources"] == {"limits": limits, "requests": limits}
    env = env_of(container)
    assert (env["PYTHONUNBUFFERED"], env["DDP_BACKEND"], env["DDP_TIMEOUT"]) == ("1", "nccl", "90")
    bare = export_kubernetes(make_job(nodes=2), ExportOptions(name="ddp-b"))[1]
    assert "resources" not in bare["spec"]["template"]["spec"]["containers"][0]  # no limits asked, none set
    assert "namespace" not in bare["metadata"]


def test_the_yaml_keeps_each_objects_own_order_in_block_style(make_job):
    text = to_yaml(export_kubernetes(make_job(nodes=2), ExportOptions(name="ddp-y")))
    documents = text.split("---\n")
    assert "- name: node\n        image: " in text  # a container's name first, as written, not sorted
    assert [d.splitlines()[:2] for d in documents] == [["apiVersion: v1", "kind: Service"],
                                                       ["apiVersion: batch/v1", "kind: Job"]]
    assert ": {" not in text and ": [" not in text  # block style: one field a line, as people write manifests


def test_the_schema_check_catches_a_broken_manifest(make_job):
    import kubernetes_validate

    job = export_kubernetes(make_job(nodes=2), ExportOptions(name="ddp-x"))[1]
    job["spec"]["completions"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(job)
    job["spec"]["completions"] = 2
    job["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1  # no such field: strict refuses it
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(job)


def test_node_rank_is_the_completion_index_and_the_master_is_pod_zero(make_job, tmp_path):
    (tmp_path / "train.py").write_text("")
    plan = make_job(nodes=3, nproc_per_node=2, target=("train.py", "--epochs", "3"))
    service, job = export_kubernetes(plan, ExportOptions(name="ddp-train"))
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": "ddp-train"}
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]  # <job>-0.<service> resolves
    container = pod["containers"][0]
    assert container["command"] == ["torchrun"] and container["args"] == ["train.py", "--epochs", "3"]
    env = env_of(container)
    assert env["PET_NODE_RANK"] == {"fieldRef": {"fieldPath": COMPLETION_INDEX}}
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("3", "2")
    assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("ddp-train-0.ddp-train", str(plan.master_port))
    # none of the simulation's own variables go to a real cluster
    assert not {"DDP_SHARED_DIR", "DDP_PROGRESS_DIR", "GLOO_SOCKET_IFNAME"} & set(env)


def test_elastic_jobs_rendezvous_with_c10d_on_pod_zero(make_job):
    plan = make_job(nodes=2, rdzv="c10d", min_nodes=1, max_nodes=2, max_restarts=3, rdzv_timeout_s=45)
    job = export_kubernetes(plan, ExportOptions(name="ddp-e"))[1]
    env = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert env["PET_NNODES"] == "1:2" and env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_RDZV_CONF"] == "join_timeout=45" and env["PET_MAX_RESTARTS"] == "3"
    assert env["PET_RDZV_ENDPOINT"] == "ddp-e-0.ddp-e:29400" and "PET_NODE_RANK" not in env
    assert (env["PET_RDZV_ID"], env["PET_NPROC_PER_NODE"]) == ("ddp-e", "1")
    service = export_kubernetes(plan, ExportOptions(name="ddp-e"))[0]
    assert service["spec"]["ports"] == [{"name": "rendezvous", "port": 29400}]  # the rendezvous, not a master port
    validate(job)


def test_an_elastic_export_gives_each_rendezvous_round_a_store_of_its_own_and_says_why(make_job):
    """torchrun's --max-restarts restarts the worker group within agents that keep one store: the
    exported job carries the opt-out the nodes run with, so that it restarts on a cluster too."""
    def k8s_env(plan):
        return env_of(export_kubernetes(plan, ExportOptions(name="ddp-e"))[1]["spec"]["template"]["spec"]["containers"][0])

    elastic, static = make_job(nodes=2, rdzv="c10d"), make_job(nodes=2)
    assert k8s_env(elastic)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in k8s_env(static)
    script = export_slurm(elastic, ExportOptions(name="ddp-e")).splitlines()
    at = script.index("export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1")
    assert "# A store of its own for each rendezvous round: a restarted worker group then reads no address" in script
    assert script.index("# of the attempt before it from torchrun's shared store (pytorch#135712).") == at - 1
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in export_slurm(static, ExportOptions(name="ddp-s"))
    mine = make_job(nodes=2, rdzv="c10d", user_env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"})
    assert k8s_env(mine)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"  # the user's --env wins
    assert "pytorch#135712" not in export_slurm(mine, ExportOptions(name="ddp-m"))  # and no word of ours on it


def test_an_elastic_jobs_lost_pod_is_replaced_and_a_static_jobs_fails_the_job(make_job):
    elastic = make_job(nodes=4, rdzv="c10d", min_nodes=2, max_nodes=4, max_restarts=3)
    spec = export_kubernetes(elastic, ExportOptions(name="ddp-e"))[1]["spec"]
    # each index is retried as itself up to --max-restarts times; the job goes on while at least
    # MIN of its indexes are alive, as torchrun's elastic world does
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (3, 2)
    assert "backoffLimit" not in spec and spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["podReplacementPolicy"] == "Failed"  # never two pods of one hostname at once
    validate(export_kubernetes(elastic, ExportOptions(name="ddp-e"))[1])
    rigid = make_job(nodes=2, rdzv="c10d", min_nodes=2, max_nodes=2, max_restarts=0)
    spec = export_kubernetes(rigid, ExportOptions(name="ddp-r"))[1]["spec"]
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (0, 0)
    static = export_kubernetes(make_job(nodes=4), ExportOptions(name="ddp-s"))[1]["spec"]
    assert static["backoffLimit"] == 0 and "backoffLimitPerIndex" not in static


@pytest.mark.parametrize("to", ["slurm", "kubernetes"])
def test_an_exported_collective_timeout_is_said_to_reach_the_workers_as_a_variable_only(to, tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    given = ["export", "--to", to, "--nodes", "2", "--workdir", str(tmp_path), "--", "train.py"]
    out = io.StringIO()
    assert main(given[:3] + ["--collective-timeout", "90"] + given[3:], out=out) == 0
    err = capsys.readouterr().err
    assert "DDP_TIMEOUT" in out.getvalue() and "90" in out.getvalue()
    assert ("note: --collective-timeout 90 reaches the workers as DDP_TIMEOUT only (app/ reads it; a script must"
            " pass it to init_process_group itself): the exported job starts them without the start-up hook that"
            " gives it to init_process_group in a run\n") in err
    assert main(given, out=io.StringIO()) == 0
    assert "--collective-timeout" not in capsys.readouterr().err


@pytest.mark.parametrize("to, private, plain", [("slurm", 0o700, 0o755), ("kubernetes", 0o600, None)])
def test_an_exported_file_holding_the_users_values_is_readable_by_them_only(to, private, plain, tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    target = tmp_path / "job.out"
    target.write_text("an older, longer export\n" * 5000)
    target.chmod(0o644)  # a file there already keeps no broader mode
    given = ["export", "--to", to, "--nodes", "2", "--workdir", str(tmp_path), "-o", str(target)]
    assert main(given + ["--env", "WANDB_API_KEY=s3cret", "--env", "HF_TOKEN=t0k", "--", "train.py"]) == 0
    assert "s3cret" in target.read_text() and stat.S_IMODE(target.stat().st_mode) == private
    assert "older" not in target.read_text()  # emptied before it was written
    assert f"holds the values of HF_TOKEN, WANDB_API_KEY in plain text: it is readable by you only (mode {private:04o})" \
        in capsys.readouterr().err
    out = io.StringIO()
    assert main(given[:-2] + ["--env", "HF_TOKEN=t0k", "--", "train.py"], out=out) == 0  # onto standard output
    assert "t0k" in out.getvalue()
    assert "note: the job on standard output holds the values of HF_TOKEN in plain text" in capsys.readouterr().err
    target.unlink()
    assert main(given + ["--", "train.py"]) == 0  # nothing of the user's: as before
    assert "holds the values" not in capsys.readouterr().err
    if plain is not None:
        assert stat.S_IMODE(target.stat().st_mode) == plain


def test_a_private_file_is_made_private_not_only_chmod_ed_after(tmp_path, monkeypatch):
    from orchestrate.cli.export import write_private

    monkeypatch.setattr(os, "fchmod", lambda fd, mode: None)  # the mode it is created with, alone
    target = tmp_path / "job.yaml"
    assert write_private(target, "TOKEN: t0k\n", 0o600) is True
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "TOKEN: t0k\n"


def test_an_export_into_a_pipe_leaves_its_mode_and_claims_no_privacy(tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    pipe.chmod(0o644)  # (whatever the umask)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(pipe.read_text()), daemon=True)
    reader.start()
    assert main(["export", "--to", "slurm", "--env", "TOKEN=t0k", "--workdir", str(tmp_path), "-o", str(pipe),
                 "--", "train.py"]) == 0
    reader.join(timeout=10)
    assert "t0k" in read[0] and stat.S_IMODE(pipe.stat().st_mode) == 0o644
    err = capsys.readouterr().err
    assert f"note: {pipe} holds the values of TOKEN in plain text\n" in err and "readable by you only" not in err


def test_an_elastic_kubernetes_export_says_where_its_rendezvous_lives(tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    code = main(["export", "--to", "kubernetes", "--nodes", "3", "--rdzv", "c10d", "--nnodes", "2:3",
                 "--max-restarts", "2", "--image", "reg.example.com/t:1", "--workdir", str(tmp_path),
                 "--name", "ddp-t", "--", "train.py"], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 0
    assert "pod ddp-t-0's torchrun agent hosts the elastic rendezvous" in err
    assert ("note: pod ddp-t-0's torchrun agent hosts the elastic rendezvous: losing that pod makes every other"
            " pod's agent fail too (run --rdzv c10d --restart node shows it on the nodes); a lost pod is replaced as"
            " the same index up to --max-restarts (2) times (the Job's backoffLimitPerIndex: Kubernetes 1.29 or"
            " newer), so losing pod 0 restarts the job as a whole, each index using a retry; and the Job ends Failed"
            " when any index failed for good, even if training finished on the others\n") in err
    assert main(["export", "--to", "kubernetes", "--nodes", "3", "--rdzv", "c10d", "--max-restarts", "0",
                 "--image", "reg.example.com/t:1", "--workdir", str(tmp_path), "--", "train.py"],
                out=io.StringIO()) == 0
    err = capsys.readouterr().err
    assert "agent fail too (run --rdzv c10d --restart node shows it on the nodes); a lost pod is not replaced" \
        " (--max-restarts 0); and the Job ends Failed" in err and "up to --max-restarts" not in err
    assert main(["export", "--to", "kubernetes", "--nodes", "3", "--image", "reg.example.com/t:1",
                 "--workdir", str(tmp_path), "--", "train.py"], out=io.StringIO()) == 0
    assert "rendezvous" not in capsys.readouterr().err  # a static job has none to lose
    assert main(["export", "--to", "kubernetes", "--nodes", "3", "--rdzv", "c10d", "--nnodes", "2:3", "--trainjob",
                 "--image", "reg.example.com/t:1", "--workdir", str(tmp_path), "--", "train.py"],
                out=io.StringIO()) == 0
    assert "the TrainJob is not elastic" in capsys.readouterr().err


def test_trainjob_carries_the_same_job_for_kubeflow_trainer(make_job, tmp_path):
    plan = make_job(nodes=2, nproc_per_node=4, gpus_per_node=4, backend="nccl", target=("-m", "app.train"))
    [trainjob] = export_kubernetes(plan, ExportOptions(name="ddp-train", trainjob=True))  # alone: one job, not two
    assert trainjob["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and trainjob["kind"] == "TrainJob"
    assert trainjob["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert trainjob["metadata"]["name"] == "ddp-train"
    assert trainjob["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                              "name": "torch-distributed"}
    trainer = trainjob["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 4)
    in_workdir = ["sh", "-c", 'cd /workspace && exec torchrun "$@"', "torchrun"]
    assert trainer["command"] == [*in_workdir, "-m", "app.train"] and trainer["image"] == plan.config.image
    assert {"name": "DDP_BACKEND", "value": "nccl"} in trainer["env"]
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": 4}
    # a script by its path in the image, and the job in /workspace (a TrainJob has no working directory)
    (tmp_path / "train.py").write_text("")
    script = make_job(nodes=2, target=("train.py", "--epochs", "2"))
    [trainjob] = export_kubernetes(script, ExportOptions(name="t", trainjob=True))
    assert trainjob["spec"]["trainer"]["command"] == [*in_workdir, "/workspace/train.py", "--epochs", "2"]
    for module in ("-m", "--module"):  # a module is no path (the config spells it -m)
        [trainjob] = export_kubernetes(make_job(nodes=2, target=(module, "app.train")), ExportOptions(name="t", trainjob=True))
        assert trainjob["spec"]["trainer"]["command"] == [*in_workdir, "-m", "app.train"]


def test_a_trainjobs_command_runs_torchrun_in_workspace_with_the_targets_words(make_job, tmp_path):
    """The image's own WORKDIR may be another: the command enters /workspace, where a ``-m``
    target and a script's relative paths are found, and torchrun gets the target's words as
    they are (run here by sh, /workspace and torchrun stood in for)."""
    [trainjob] = export_kubernetes(make_job(nodes=2, target=("-m", "mytrain.train", "--tag", "a b")),
                                   ExportOptions(name="t", trainjob=True))
    command = trainjob["spec"]["trainer"]["command"]
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (tmp_path / "torchrun").write_text('#!/bin/sh\npwd\nprintf "%s\\n" "$@"\n')
    (tmp_path / "torchrun").chmod(0o755)
    shown = command[:2] + [command[2].replace("/workspace", str(workspace))] + command[3:]
    done = subprocess.run(shown, capture_output=True, text=True, timeout=30, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert done.returncode == 0, done
    assert done.stdout.splitlines() == [str(workspace), "-m", "mytrain.train", "--tag", "a b"]


def test_exported_sbatch_has_no_simulation_paths(make_job):
    plan = make_job(nodes=2, nproc_per_node=4, gpus_per_node=4, backend="nccl")
    script = export_slurm(plan, ExportOptions(name="ddp-train", container_image="nvcr.io/me/t:1",
                                              container_mounts="/data:/data", time_limit="02:00:00"))
    assert "#SBATCH --gpus-per-node=4" in script and "--container-image=nvcr.io/me/t:1" in script
    assert "#SBATCH --job-name=ddp-train" in script and "#SBATCH --time=02:00:00" in script
    assert "--container-mounts=/data:/data" in script
    assert "/ddp-run" not in script and "--log-dir" not in script and "--output" not in script
    assert "export DDP_BACKEND=nccl" in script
    # a worker's print reaches the job's log as it is printed, as in the run's nodes (not a buffer at a time)
    assert "export PYTHONUNBUFFERED=1" in script


def test_an_exported_sbatch_runs_where_sbatch_is_called_or_in_chdir_and_says_where_to_submit_from(
        make_job, tmp_path):
    """The job runs where sbatch is called from (this machine's path to the project is not the
    cluster's), or in ``--chdir``; its first act, run here by bash, is to look for the script
    there, and to end saying where to submit from where it is missing (not every node's traceback)."""
    from orchestrate.slurm.backend import directive_words

    project, elsewhere = tmp_path / "my project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "train.py").write_text("")
    plan = make_job(nodes=2, workdir=project, target=("train.py",))
    script = export_slurm(plan, ExportOptions(name="ddp-train"))
    assert not [word for word in directive_words(script) if "chdir" in word]
    head = script[:script.index("DDP_MASTER_ADDR=")]  # (what runs before the job's first srun)

    def run_head(where: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", head], cwd=where, capture_output=True, text=True, timeout=30)

    assert run_head(project).returncode == 0
    missing = run_head(elsewhere)
    assert missing.returncode == 2, missing
    where = f"ddp-compose: no train.py in {elsewhere}, where the job runs (in /tmp where the node lacks the job's directory)"
    assert missing.stderr == f"{where}: call sbatch from your project's directory, or export with --chdir DIR\n"
    chdir = export_slurm(plan, ExportOptions(name="ddp-train", chdir="/scratch/me/my project"))
    assert "--chdir=/scratch/me/my project" in directive_words(chdir)
    # (Slurm ran it in /tmp: the --chdir is not on that node; calling sbatch elsewhere would change nothing)
    head = chdir[:chdir.index("DDP_MASTER_ADDR=")]
    missing = run_head(elsewhere)
    assert missing.returncode == 2 and missing.stderr == (
        f"{where}: the job's --chdir is /scratch/me/my project: export with your project's directory on the"
        " cluster\n"), missing
    lines = chdir.splitlines()
    assert lines.index("#SBATCH --chdir='/scratch/me/my project'") < lines.index("set -euo pipefail")
    # a module is found by python, and an image's tasks find the script in the image: no look
    assert "if [ ! -f" not in export_slurm(make_job(nodes=2, target=("-m", "app.train")), ExportOptions(name="ddp-train"))
    assert "if [ ! -f" not in export_slurm(plan, ExportOptions(name="ddp-train", container_image="nvcr.io/me/t:1"))


@pytest.mark.parametrize("chdir", ["", "  ", "/a\nb"])
def test_export_refuses_a_chdir_that_names_no_directory_on_one_line(chdir):
    with pytest.raises(UsageError, match="--chdir .* must name a directory on the cluster, on one line"):
        ExportOptions(name="ddp-train", chdir=chdir)


@pytest.mark.parametrize("chdir", ["~/proj", "~me/proj", "$HOME/proj", "/scratch/${USER}/proj"])
def test_export_refuses_a_chdir_that_only_a_shell_would_expand(chdir):
    """sbatch takes the directive's path as it is (a relative one from where it is called): the job
    would go to <submit dir>/~/proj, which no node has, and Slurm would run it in /tmp."""
    with pytest.raises(UsageError, match=r"sbatch expands no ~ or \$VARIABLE in it: give an absolute path"):
        ExportOptions(name="ddp-train", chdir=chdir)
    assert ExportOptions(name="ddp-train", chdir="runs/proj~1").chdir == "runs/proj~1"


@pytest.mark.parametrize("target, name", [
    (("-m", "app.train", "--epochs", "1"), "ddp-train"),
    (("-m", "pkg.models.big_lm"), "ddp-big-lm"),
    (("-m", "train"), "ddp-train"),
    (("scripts/My_Train.py",), "ddp-my-train"),
    (("train.py", "-m", "x"), "ddp-train"),  # a script's own -m is its argument
    (("scripts/sub/train.py",), "ddp-train"),
    (("_private_train.py",), "ddp-private-train"),
    (("___.py",), "ddp-job"),
    ((), "ddp-job"),
    (("x" * 45 + "_y.py",), "ddp-" + "x" * 45),  # cut to 50 ("ddp-xx...x-"), and no '-' left at the end
])
def test_default_job_name_comes_from_the_target(target, name):
    assert default_job_name(target) == name


@pytest.mark.parametrize("name", ["Train", "-x", "a" * 51, "ddp_train"])
def test_names_kubernetes_refuses_are_refused(name):
    with pytest.raises(UsageError, match="--name"):
        ExportOptions(name=name)


def test_the_longest_name_kubernetes_takes_is_taken():
    assert ExportOptions(name="a" * 50).name == "a" * 50
    with pytest.raises(UsageError, match="^--container-mounts needs --container-image$"):
        ExportOptions(name="ddp-x", container_mounts="/a:/a")


@pytest.mark.parametrize("field, value, flag", [
    ("time_limit", "4 hours", "--time"),  # sbatch refuses the script: "Invalid directive found in batch script: hours"
    ("time_limit", "00:10:00\n#SBATCH --exclusive", "--time"),  # a line of its own in the script
    ("time_limit", "1:2:3:4", "--time"), ("time_limit", "", "--time"),
    ("partition", "gpu debug", "--partition"), ("partition", "gpu,", "--partition"),
    ("partition", "gpu\n#SBATCH --exclusive", "--partition"),
    ("namespace", "Bad NS", "--namespace"), ("namespace", "team-", "--namespace"), ("namespace", "a" * 64, "--namespace"),
])
def test_a_slurm_time_or_partition_or_a_namespace_the_cluster_would_refuse_is_refused_naming_its_option(
        field, value, flag):
    with pytest.raises(UsageError) as refused:
        ExportOptions(**{field: value})
    assert str(refused.value).startswith(f"{flag} {value!r} "), str(refused.value)


@pytest.mark.parametrize("field, value", [
    ("time_limit", "90"), ("time_limit", "90:30"), ("time_limit", "04:00:00"), ("time_limit", "2-12"),
    ("time_limit", "2-12:30:00"), ("time_limit", "UNLIMITED"), ("partition", "gpu"), ("partition", "gpu,debug_2.a"),
    ("namespace", "team-1"), ("namespace", "1team"), ("namespace", "a" * 63)])
def test_every_form_of_slurm_time_partitions_and_a_namespace_kubernetes_takes_are_taken(field, value):
    assert getattr(ExportOptions(**{field: value}), field) == value


@pytest.mark.parametrize("to, why", [("slurm", "one srun starts the same torchrun on every node"),
                                     ("kubernetes", "a PyTorchJob gives every replica the same nprocPerNode")])
def test_uneven_nodes_are_refused_saying_why_for_each_target(to, why, tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    assert main(["export", "--to", to, "--nodes", "2", "--nproc-per-node", "1,2", "--workdir", str(tmp_path),
                 "--", "train.py"], out=io.StringIO()) == 2
    assert f"--nproc-per-node 1,2: uneven nodes cannot be exported to {to}: {why}" in capsys.readouterr().err


def test_every_note_of_one_export_is_said_together(tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    assert main(["export", "--to", "kubernetes", "--nodes", "2", "--rdzv", "c10d", "--trainjob",
                 "--collective-timeout", "60", "--copy-env", "NO_SUCH_VAR_*", "--workdir", str(tmp_path),
                 "--", "train.py"], out=io.StringIO()) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    # (no note of the Indexed Job's pods: a TrainJob is written instead of it)
    assert [n.split()[1] for n in notes] == ["--copy-env", "nothing", "the", "--collective-timeout", "the"]


def test_an_export_with_gpus_gives_each_node_its_gpus_and_nccl(tmp_path):
    (tmp_path / "train.py").write_text("")
    out = io.StringIO()
    assert main(["export", "--to", "kubernetes", "--nodes", "2", "--gpus-per-node", "4", "--nproc-per-node", "4",
                 "--image", "r.io/me/t:1", "--workdir", str(tmp_path), "--", "train.py"], out=out) == 0
    container = list(yaml.safe_load_all(out.getvalue()))[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert (env_of(container)["PET_NPROC_PER_NODE"], env_of(container)["DDP_BACKEND"]) == ("4", "nccl")


def test_cli_writes_to_a_file_and_refuses_bad_input(tmp_path, capsys):
    target = tmp_path / "k8s.yaml"
    code = main(["export", "--to", "kubernetes", "--nodes", "2", "-o", str(target), "--workdir", str(tmp_path),
                 "--", "-m", "app.train"])
    assert code == 0
    kinds = [o["kind"] for o in yaml.safe_load_all(target.read_text())]
    assert kinds == ["Service", "Job"]
    assert "wrote the Kubernetes manifests of 2 nodes x 1 process to" in capsys.readouterr().err
    assert not target.stat().st_mode & 0o111  # manifests are no program
    script = tmp_path / "job.sh"
    assert main(["export", "--to", "slurm", "--nodes", "3", "--nproc-per-node", "2", "-o", str(script),
                 "--workdir", str(tmp_path), "--", "-m", "app.train"]) == 0
    assert f"wrote the sbatch script of 3 nodes x 2 processes to {script}" in capsys.readouterr().err
    assert stat.S_IMODE(script.stat().st_mode) == 0o755  # sbatch job.sh, or ./job.sh inside an allocation
    assert main(["export", "--to", "slurm", "-o", str(tmp_path / "no-such-dir" / "job.sh"), "--workdir",
                 str(tmp_path), "--", "-m", "app.train"]) == 2
    assert f"error: -o {tmp_path / 'no-such-dir' / 'job.sh'}: No such file or directory" in capsys.readouterr().err
    out = io.StringIO()
    assert main(["export", "--to", "slurm", "--workdir", str(tmp_path), "--", "missing.py"], out=out) == 2
    assert "script 'missing.py' not found" in capsys.readouterr().err
    assert main(["export", "--to", "slurm", "--name", "Bad_Name", "--workdir", str(tmp_path)], out=out) == 2
    assert main(["export", "--to", "slurm", "--container-mounts", "/a:/a", "--workdir", str(tmp_path)], out=out) == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--to", "lsf"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("options, refused", [
    (["--backend", "nccl"], "error: --backend nccl needs GPUs: give --gpus-per-node, the GPUs each of the cluster's"
                            " nodes has for the job, or --backend gloo\n"),
    (["--gpus-per-node", "2", "--nproc-per-node", "4"],
     "error: --nproc-per-node 4 is more than --gpus-per-node 2: each process needs a GPU of its own (NCCL refuses two"
     " ranks on one): give --nproc-per-node 2 or fewer, or more --gpus-per-node\n"),
    (["--gpus-per-node", "2", "--nproc-per-node", "4,4"], "--nproc-per-node 4 is more than --gpus-per-node 2"),
])
@pytest.mark.parametrize("to", ["slurm", "kubernetes"])
def test_a_gpu_layout_the_clusters_nodes_cannot_run_is_refused_in_exports_own_terms(to, options, refused, tmp_path,
                                                                                   capsys):
    (tmp_path / "train.py").write_text("")
    assert main(["export", "--to", to, "--nodes", "2", *options, "--workdir", str(tmp_path), "--", "train.py"],
                out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert refused in err
    assert "--share-gpus" not in err and "--cpu" not in err  # run's options, which export has not


def test_exports_help_says_what_each_option_means_on_a_real_cluster(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--help"])
    assert exit_info.value.code == 0
    raw = capsys.readouterr().out
    assert [line for line in raw.splitlines() if line.endswith(":") and not line.startswith(" ")] == [
        "options:", "the job:", "slurm:", "kubernetes:",
        "not for a real cluster (refused, saying what to do instead):"]  # the groups' headings
    text = " ".join(raw.split())  # argparse's wrapping aside
    for said in ("-o FILE, --output FILE", "--container-image IMAGE", "--time LIMIT",
                 "--container-mounts SRC:DST[,...]", "exported as DDP_TIMEOUT (default: not set)",
                 "Kubernetes: the container image, pullable by the cluster, holding your code in /workspace",
                 "(default: torch-distributed)", "Usage example: python -m orchestrate export --to kubernetes"):
        assert said in text
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--nodes", "2"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: --to" in capsys.readouterr().err


@pytest.mark.parametrize("to, options, refused", [
    ("slurm", ["--namespace", "ml"], "--namespace: for --to kubernetes only, and an export --to slurm has no place for it"),
    ("slurm", ["--trainjob", "--namespace", "ml"],
     "--namespace, --trainjob: for --to kubernetes only, and an export --to slurm has no place for them"),
    ("slurm", ["--cpus-per-node", "0.5"], "--cpus-per-node 0.5: Slurm allocates whole CPUs: give a whole number,"
                                          " e.g. --cpus-per-node 1"),
    ("slurm", ["--requirements", "requirements.txt"], "--requirements: for run only, and an export has no place for"
     " it: a cluster's nodes install nothing for the job: build an image with them and pass it as --image"
     " (Kubernetes) or --container-image (Slurm)"),
    ("kubernetes", ["--requirements", "requirements.txt"], "--requirements: for run only"),
    ("slurm", ["--mount", "/data:/data"], "--mount: for run only, and an export has no place for it: a cluster has"
     " its own storage"),
    ("kubernetes", ["--link", "delay=5ms"], "--link: for run only, and an export has no place for it: a real"
     " cluster's network has its own latency and bandwidth"),
    ("slurm", ["--image", "r.io/me/t:1"], "--image: for --to kubernetes only, and an export --to slurm has no place"
                                          " for it; --container-image runs Slurm's tasks in an image"),
    ("slurm", ["--runtime", "mine"], "--runtime: for --to kubernetes only"),
    ("kubernetes", ["--partition", "gpu", "--time", "1:00:00"],
     "--time, --partition: for --to slurm only, and an export --to kubernetes has no place for them"),
    ("kubernetes", ["--chdir", "/scratch/me"], "--chdir: for --to slurm only"),
    ("kubernetes", ["--container-image", "r.io/me/t:1"],
     "--container-image: for --to slurm only, and an export --to kubernetes has no place for it; --image names"
     " the pods' image"),
    ("kubernetes", ["--runtime", "mine"], "--runtime names the TrainJob's runtime: it needs --trainjob"),
])
def test_an_option_the_targets_job_would_leave_out_is_refused_in_one_line(to, options, refused, tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    out = io.StringIO()
    code = main(["export", "--to", to, "--workdir", str(tmp_path), *options, "-o", str(tmp_path / "job"), "--",
                 "train.py"], out=out)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {refused}") and err.count("\n") == 1, err
    assert not (tmp_path / "job").exists() and out.getvalue() == ""


KEPT_NOTHING = ("note: nothing the job writes is kept: its pods' files (a checkpoint in /workspace too) go with them"
                " when the {job} ends, a successful one too: write them to a volume of your cluster's own (a"
                " PersistentVolumeClaim mounted in the pod template) or to object storage\n")


def test_each_targets_own_options_are_taken_and_the_local_image_is_noted(tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    out = io.StringIO()
    assert main(["export", "--to", "slurm", "--workdir", str(tmp_path), "--partition", "gpu", "--time", "01:00:00",
                 "--chdir", "/scratch/me", "--container-image", "r.io/me/t:1", "--cpus-per-node", "8", "--",
                 "train.py"], out=out) == 0
    assert "#SBATCH --partition=gpu" in out.getvalue() and "--container-image=r.io/me/t:1" in out.getvalue()
    assert "#SBATCH --chdir=/scratch/me" in out.getvalue()
    assert "note:" not in capsys.readouterr().err  # an sbatch script names no image of ours

    out = io.StringIO()
    assert main(["export", "--to", "kubernetes", "--workdir", str(tmp_path), "--", "train.py"], out=out) == 0
    assert capsys.readouterr().err == KEPT_NOTHING.format(job="Job") + (
        "note: the manifests name ddp-compose-node:latest, this machine's node image, which holds none of your code:"
        " give --image an image your cluster can pull, with your code in /workspace\n")
    assert "image: ddp-compose-node:latest" in out.getvalue()

    out = io.StringIO()
    assert main(["export", "--to", "kubernetes", "--workdir", str(tmp_path), "--image", "r.io/me/t:1", "--namespace",
                 "ml", "--cpus-per-node", "4", "--trainjob", "--runtime", "mine", "--", "train.py"], out=out) == 0
    assert capsys.readouterr().err == KEPT_NOTHING.format(job="TrainJob")
    [trainjob] = list(yaml.safe_load_all(out.getvalue()))
    assert trainjob["spec"]["runtimeRef"]["name"] == "mine" and trainjob["metadata"]["namespace"] == "ml"


def srun_line(script: str) -> str:
    [line] = [line for line in script.splitlines() if line.startswith("srun ")]
    return line


def test_an_exported_sbatch_gives_each_nodes_task_the_cpus_and_memory_asked_for(make_job):
    """One task per node runs torchrun, its workers and their DataLoader workers: it asks for the
    node's CPUs (sbatch's, and srun's own: srun of Slurm 22.05 and newer does not inherit them)
    and memory; asked for none, the script leaves both to the site."""
    from orchestrate.slurm.cluster import cluster_batch_options
    from orchestrate.slurm.script import render_sbatch

    plan = make_job(nodes=2, cpus_per_node=16, memory_per_node=64 * 2**30)
    script = export_slurm(plan, ExportOptions(name="ddp-train"))
    lines = script.splitlines()
    assert "#SBATCH --cpus-per-task=16" in lines and "#SBATCH --mem=65536M" in lines
    assert lines.index("#SBATCH --cpus-per-task=16") < lines.index("set -euo pipefail")
    assert " --cpus-per-task=16 bash -c " in srun_line(script)
    plain = export_slurm(make_job(nodes=2), ExportOptions(name="ddp-train"))
    assert "--cpus-per-task" not in plain and "--mem" not in plain
    # the simulated cluster's nodes share the host's CPUs, which its Slurm binds no task to: it asks for none
    assert "--cpus-per-task" not in render_sbatch(plan, cluster_batch_options(plan))


def test_a_slurm_export_takes_the_nodes_cpus_and_says_what_a_task_gets_without_them(tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    out = io.StringIO()
    assert main(["export", "--to", "slurm", "--nodes", "2", "--cpus-per-node", "16", "--workdir", str(tmp_path),
                 "--", "train.py"], out=out) == 0
    assert "#SBATCH --cpus-per-task=16" in out.getvalue() and capsys.readouterr().err == ""
    assert main(["export", "--to", "slurm", "--workdir", str(tmp_path), "--", "train.py"], out=io.StringIO()) == 0
    assert capsys.readouterr().err == (
        "note: the script asks for no CPUs: most sites then give each node's one task (torchrun, all its workers and"
        " their DataLoader workers) a single CPU: export with --cpus-per-node N for #SBATCH --cpus-per-task=N (and"
        " srun's own, which Slurm 22.05 and newer no longer inherits)\n")


def test_an_exported_sbatch_takes_its_rendezvous_port_from_the_job_id_unless_one_is_given(make_job):
    """Two jobs whose first host is the same node (a partition that shares nodes) would both
    listen on 29500: the port is 20000 + the job's id modulo 10000, computed by the script (run
    here by bash), unless --master-port names one; the simulated cluster keeps the plan's."""
    from orchestrate.slurm.cluster import cluster_batch_options
    from orchestrate.slurm.script import render_sbatch

    script = export_slurm(make_job(nodes=2), ExportOptions(name="ddp-train"))
    assert '--master-port "$DDP_MASTER_PORT" ' in srun_line(script)
    [derive] = [line for line in script.splitlines() if line.startswith("DDP_MASTER_PORT=")]
    assert script.index(derive) < script.index("export DDP_MASTER_PORT\n") < script.index(srun_line(script))
    for job_id, port in (("123457", "23457"), ("7", "20007"), ("40000", "20000")):
        done = subprocess.run(["bash", "-c", f'{derive}; echo "$DDP_MASTER_PORT"'], capture_output=True, text=True,
                              env={"SLURM_JOB_ID": job_id}, timeout=30)
        assert done.stdout == f"{port}\n", done
    given = export_slurm(make_job(nodes=2, master_port=29999), ExportOptions(name="ddp-train"))
    assert " --master-port 29999 " in srun_line(given) and "DDP_MASTER_PORT" not in given
    elastic = export_slurm(make_job(nodes=2, rdzv="c10d", min_nodes=1, max_nodes=2), ExportOptions(name="ddp-e"))
    assert '--rdzv-endpoint "$DDP_MASTER_ADDR:$DDP_MASTER_PORT"' in srun_line(elastic)
    plan = make_job(nodes=2)
    simulated = render_sbatch(plan, cluster_batch_options(plan))
    assert " --master-port 29500 " in srun_line(simulated) and "DDP_MASTER_PORT" not in simulated


@pytest.mark.parametrize("layout, looked_for", [
    ({"mytrain/__init__.py": "", "mytrain/train.py": ""}, "mytrain/__init__.py"),
    ({"mytrain.py": ""}, "mytrain.py"),
    ({"mytrain/train.py": ""}, "mytrain/train.py"),  # a namespace package (no __init__.py): the target's own file
])
def test_an_exported_sbatch_looks_for_a_module_the_project_holds_where_it_runs(make_job, tmp_path, layout,
                                                                                looked_for):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    for relative, text in layout.items():
        (project / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / relative).write_text(text)
    elsewhere.mkdir()
    target = ("-m", "mytrain.train") if "mytrain/train.py" in layout else ("-m", "mytrain")
    script = export_slurm(make_job(nodes=2, workdir=project, target=target), ExportOptions(name="ddp-train"))
    head = script[:script.index("DDP_MASTER_ADDR=")]
    assert subprocess.run(["bash", "-c", head], cwd=project, timeout=30).returncode == 0
    missing = subprocess.run(["bash", "-c", head], cwd=elsewhere, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and missing.stderr.startswith(f"ddp-compose: no {looked_for} in {elsewhere},")
    # an image's tasks find it in the image
    imaged = export_slurm(make_job(nodes=2, workdir=project, target=target),
                          ExportOptions(name="ddp-train", container_image="r.io/me/t:1"))
    assert "if [ ! -f" not in imaged


def test_a_module_the_project_does_not_hold_is_exported_saying_where_the_job_must_find_it(tmp_path, capsys):
    """It may be installed in the cluster's Python (as app/ is in the node image): no refusal, and no
    look in the script, but a note; a module the project holds gets neither note."""
    (tmp_path / "mytrain").mkdir()
    (tmp_path / "mytrain" / "__init__.py").write_text("")
    (tmp_path / "mytrain" / "train.py").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = io.StringIO()
    assert main(["export", "--to", "slurm", "--cpus-per-node", "4", "--workdir", str(elsewhere), "--", "-m",
                 "mytrain.train"], out=out) == 0
    assert capsys.readouterr().err == (
        f"note: -m mytrain.train: neither mytrain/ nor mytrain.py is in the work directory {elsewhere}: the job finds"
        " it only where the cluster's Python has it installed; export from your project's directory (or give"
        " --workdir) for the script to look for it where sbatch is called\n")
    assert "if [ ! -f" not in out.getvalue()
    assert main(["export", "--to", "slurm", "--cpus-per-node", "4", "--workdir", str(tmp_path), "--", "-m",
                 "mytrain.train"], out=io.StringIO()) == 0
    assert capsys.readouterr().err == ""
    assert main(["export", "--to", "slurm", "--cpus-per-node", "4", "--workdir", str(elsewhere),
                 "--container-image", "r.io/me/t:1", "--", "-m", "mytrain.train"], out=io.StringIO()) == 0
    assert capsys.readouterr().err == ""  # the image holds it
    (tmp_path / "mytrain" / "__init__.py").unlink()  # a namespace package is the project's too: no note
    assert main(["export", "--to", "slurm", "--cpus-per-node", "4", "--workdir", str(tmp_path), "--", "-m",
                 "mytrain.sub.train"], out=io.StringIO()) == 0
    assert capsys.readouterr().err == ""

"""The simulated Slurm cluster's pure parts: the batch script, slurm.conf, the Compose
project, scontrol's records, the job's output lines and the summary."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest

from orchestrate.cli.main import main
from orchestrate.outcome.judge import Failure
from orchestrate.outcome.model import FaultRecord, RunResult, SlurmJob, Timings
from orchestrate.outcome.summary import format_slurm_summary
from orchestrate.slurm.backend import JobLines
from orchestrate.slurm.cluster import (CONTROLLER, cluster_batch_options, parse_scontrol, render_slurm_compose,
                                      sinfo_idle, slurm_conf)
from orchestrate.slurm.script import BatchOptions, render_sbatch

STUBS = {
    # scontrol show hostnames LIST: the allocation's hosts, one per line (the first is the master)
    "scontrol": '[ "$1 $2" = "show hostnames" ] && printf "gpu-a17\\ngpu-b03\\ngpu-c11\\n"',
    # srun: one task per node of the allocation, each with its own SLURM_NODEID
    "srun": 'while [ "${1#-}" != "$1" ]; do shift; done\n'
            'for i in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$i "$@"; done',
    "torchrun": 'echo "torchrun $*"',
}


def run_script(tmp_path: Path, script: str, nodes: int, **stubs: str) -> list[str]:
    """Run a batch script with stand-ins for scontrol, srun and torchrun on PATH (``stubs``
    replaces some of them)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {**STUBS, **stubs}.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    job = tmp_path / "job.sbatch"
    job.write_text(script)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": str(nodes),
           "SLURM_JOB_NODELIST": "gpu-a17,gpu-b03,gpu-c11", "SLURM_JOB_ID": "42"}
    proc = subprocess.run(["bash", str(job)], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_each_task_gets_its_own_node_rank_and_the_first_host_as_master(make_job, tmp_path):
    plan = make_job(nodes=3, nproc_per_node=2, target=("-m", "app.train", "--epochs", "1"))
    lines = run_script(tmp_path, render_sbatch(plan, BatchOptions()), nodes=3)
    assert lines == [
        f"torchrun --nnodes 3 --node-rank {i} --master-addr gpu-a17 --master-port {plan.master_port}"
        " --max-restarts 0 --nproc-per-node 2 --tee 3 -m app.train --epochs 1"
        for i in range(3)
    ]


def test_elastic_plans_use_c10d_on_the_first_host_with_the_job_id(make_job, tmp_path):
    plan = make_job(nodes=2, rdzv="c10d", min_nodes=1, max_nodes=2, max_restarts=3, rdzv_timeout_s=45)
    script = render_sbatch(plan, BatchOptions())
    lines = run_script(tmp_path, script, nodes=2)
    assert len(lines) == 2 and lines[0] == lines[1]
    assert ("--nnodes 1:2 --rdzv-backend c10d --rdzv-endpoint gpu-a17:29400 --rdzv-id 42"
            " --rdzv-conf join_timeout=45 --max-restarts 3") in lines[0]  # --rdzv-timeout reaches torchrun


def test_arguments_with_spaces_and_quotes_reach_torchrun_whole(make_job, tmp_path):
    plan = make_job(nodes=1, target=("-m", "app.hello", "--note", "it's a 'test' $HOME"))
    lines = run_script(tmp_path, render_sbatch(plan, BatchOptions(env={"MSG": "a b 'c'"})), nodes=1)
    assert lines[0].endswith("-m app.hello --note it's a 'test' $HOME")


def test_a_node_list_longer_than_a_pipe_holds_gives_its_first_host_without_sigpipe(make_job, tmp_path):
    # 20000 hosts (~200 KB, past the 64 KB pipe buffer): a reader that stops after the first
    # line would leave scontrol to die of SIGPIPE, and pipefail would end the job with 141.
    many = 'printf "gpu-%05d\\n" $(seq 1 20000)'
    lines = run_script(tmp_path, render_sbatch(make_job(nodes=2), BatchOptions()), nodes=2, scontrol=many)
    assert len(lines) == 2 and all("--master-addr gpu-00001 " in line for line in lines)


def test_sbatch_directives_follow_the_plan_and_options(make_job):
    plan = make_job(nodes=4, nproc_per_node=8, gpus_per_node=8, backend="nccl")
    script = render_sbatch(plan, BatchOptions(job_name="big", time_limit="04:00:00", partition="gpu",
                                              container_image="nvcr.io/me/train:1",
                                              container_mounts="/data:/data"))
    for line in ("#SBATCH --job-name=big", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --time=04:00:00", "#SBATCH --partition=gpu"):
        assert line in script.splitlines()
    assert "--container-image=nvcr.io/me/train:1 --container-mounts=/data:/data" in script
    assert script.splitlines()[1].startswith("# 4 nodes x 8 processes, world size 32,")
    assert render_sbatch(make_job(nodes=1), BatchOptions()).splitlines()[1].startswith("# 1 node x 1 process, world")


def test_each_task_of_the_clusters_script_names_its_own_node(make_job, tmp_path):
    plan = make_job(nodes=3)
    srun = ('while [ "${1#-}" != "$1" ]; do shift; done\n'
            'for i in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$i SLURMD_NODENAME=node$i "$@"; done')
    script = render_sbatch(plan, cluster_batch_options(plan))
    lines = run_script(tmp_path, script, nodes=3, srun=srun, torchrun='echo "$DDP_NODE $DDP_RUN_ID"')
    assert lines == [f"node{i} {plan.run_id}" for i in range(3)]  # not node0's name in every node
    assert "DDP_NODE=node0" not in script


def test_the_clusters_script_fails_fast_labels_each_tasks_lines_and_keeps_torchruns_logs(make_job):
    plan = make_job(nodes=2)
    options = cluster_batch_options(plan)
    lines = render_sbatch(plan, options).splitlines()
    assert lines[1].endswith(", static rendezvous; written by ddp-compose.")
    assert f"#SBATCH --output={options.output}" in lines and f"#SBATCH --chdir={options.chdir}" in lines
    assert "set -euo pipefail" in lines  # a failed scontrol ends the job, not a torchrun without a master
    srun = [line for line in lines if line.startswith("srun ")]
    # --label: the launcher reads each task's lines by it; one bad exit ends the whole step
    assert len(srun) == 1 and srun[0].startswith("srun --label --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c ")
    assert "#SBATCH --no-kill" not in lines  # a lost node ends the job (the elastic test below says why)
    assert f'--log-dir "{options.log_dir}"' in srun[0]
    elastic = render_sbatch(make_job(nodes=2, rdzv="c10d"), BatchOptions()).splitlines()
    assert elastic[1].endswith(", elastic c10d rendezvous; written by ddp-compose.")
    assert [line for line in elastic if line.startswith("srun ")] and \
        not any("--log-dir" in line for line in elastic)  # none asked for, none given


def test_an_elastic_job_asks_for_its_nodes_and_ends_when_one_is_lost(make_job):
    # Given --nodes=1-3, Slurm's cons_tres allocates 1 node with all 3 idle: ask for the plan's 3
    lines = render_sbatch(make_job(nodes=3, rdzv="c10d", min_nodes=1, max_nodes=3), BatchOptions()).splitlines()
    assert "#SBATCH --nodes=3" in lines and not any(line.startswith("#SBATCH --nodes=1") for line in lines)
    # No --no-kill: with it, losing the first host (the batch script's and the rendezvous's) left the job running
    assert not any("no-kill" in line for line in lines)
    srun = [line for line in lines if line.startswith("srun ")]
    assert len(srun) == 1 and srun[0].startswith("srun --label --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c ")


def test_a_clusters_node_range_cannot_reach_past_its_nodes(tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    args = ["--nodes", "2", "--rdzv", "c10d", "--nnodes", "1:4", "--workdir", str(tmp_path), "--", "train.py"]
    for command in (["run", "--scheduler", "slurm", "--cpu", "--dry-run"], ["export", "--to", "slurm"]):
        assert main([*command, *args]) == 2
        assert ("--nnodes 1:4 with --nodes 2: a Slurm job's allocation cannot grow past the nodes it starts on,"
                " so MAX is --nodes: give --nnodes 1:2") in capsys.readouterr().err
    fitting = ["--nodes", "2", "--rdzv", "c10d", "--nnodes", "1:2", "--workdir", str(tmp_path), "--", "train.py"]
    assert main(["export", "--to", "slurm", *fitting], out=io.StringIO()) == 0
    err = capsys.readouterr().err
    assert ("note: Slurm ends the job when one of its nodes fails (NODE_FAIL), and replaces none: torchrun's"
            " --max-restarts (3) covers failed workers within the allocation, not lost nodes; #SBATCH --no-kill would"
            " keep the job on the other nodes, but losing the first host, which runs the batch script and hosts the"
            " rendezvous, would then leave the job running until its time limit\n") in err
    assert main(["export", "--to", "kubernetes", "--image", "reg.example.com/t:1", *args], out=io.StringIO()) == 2
    assert ("--nnodes 1:4 with --nodes 2: the Indexed Job runs --nodes pods and never more, so MAX is --nodes: give"
            " --nnodes 1:2") in capsys.readouterr().err
    assert main(["export", "--to", "slurm", "--nodes", "2", "--workdir", str(tmp_path), "--", "train.py"],
                out=io.StringIO()) == 0
    assert "NODE_FAIL" not in capsys.readouterr().err  # said of elastic jobs only


def test_slurm_conf_names_every_node_and_needs_no_cgroups(make_job):
    conf = slurm_conf(make_job(nodes=3), cpus=8, memory_mb=16000)
    lines = conf.splitlines()
    assert f"SlurmctldHost={CONTROLLER}" in lines
    assert "NodeName=node[0-2] CPUs=8 RealMemory=16000 State=UNKNOWN" in lines
    assert "ProctrackType=proctrack/pgid" in lines and "TaskPlugin=task/none" in lines
    assert "JobRequeue=0" in lines  # a node failure ends the job instead of queueing it again
    assert "NodeName=node0 CPUs=1" in slurm_conf(make_job(nodes=1), cpus=1, memory_mb=1000)


def test_cluster_compose_has_a_controller_and_unprivileged_nodes(make_job):
    from orchestrate.engine.labels import OWNER_LABEL, OWNER_NAME_LABEL

    plan = make_job(nodes=2, stop_grace_s=4, run_as="1000:1000", user_name="alice")
    project = render_slurm_compose(plan, "ddp-compose-slurm:abc", "1000:1000")
    assert sorted(project["services"]) == sorted([CONTROLLER, "node0", "node1"])
    for name, service in project["services"].items():
        assert "privileged" not in service and "cap_add" not in service
        assert service["hostname"] == name
        # the cluster is the user's run: its controller and nodes name them as a Compose run's nodes do
        assert (service["labels"][OWNER_LABEL], service["labels"][OWNER_NAME_LABEL]) == ("1000", "alice")
    assert project["services"]["node1"]["command"][-2:] == ["slurmd", "-D"]
    assert project["services"][CONTROLLER]["command"][-2:] == ["slurmctld", "-D"]
    command = project["services"]["node0"]["command"]  # a lost launcher's workers get the run's grace
    assert command[command.index("--stop-grace") + 1] == "4"


def test_scontrol_records_keep_values_with_spaces():
    node = parse_scontrol("NodeName=node1 Arch=x86_64 State=DOWN+NOT_RESPONDING"
                          " Reason=Not responding [slurm@2026-11-21T16:01:10] Comment=(null)")
    assert node["State"] == "DOWN+NOT_RESPONDING"
    assert node["Reason"] == "Not responding [slurm@2026-11-21T16:01:10]"
    job = parse_scontrol("JobId=7 JobName=ddp x JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0"
                         " TRES=cpu=4,mem=1M,node=2")
    assert job == {"JobId": "7", "JobName": "ddp x", "JobState": "FAILED", "Reason": "NonZeroExitCode",
                   "ExitCode": "1:0", "TRES": "cpu=4,mem=1M,node=2"}
    assert parse_scontrol("") == {}


@pytest.mark.parametrize("output, nodes, idle", [
    ("node0 idle\nnode1 idle\n", 2, True),
    ("node0 idle\nnode1 unk*\n", 2, False),
    ("node0 idle\n", 2, False),
    ("", 1, False),
])
def test_sinfo_idle_needs_every_node_idle(output, nodes, idle):
    assert sinfo_idle(output, nodes) is idle


def rendered(lines) -> list[str]:
    return [line.render(14) for line in lines]


def test_job_output_lines_get_node_and_rank_prefixes(make_job):
    plan = make_job(nodes=2, nproc_per_node=2)
    lines = JobLines(plan, 14)
    assert rendered(lines.feed("1: [3|1]:loss 0.5")) == ["[node1/rank3]".ljust(16) + " loss 0.5"]
    assert rendered(lines.feed("0: agent says hi")) == ["[node0]".ljust(16) + " agent says hi"]
    assert rendered(lines.feed("srun: error: node1: task 1")) == ["[slurm]".ljust(16) + " srun: error: node1: task 1"]
    # a user's script may run a task per process: the label is then the task, not the node
    assert rendered(JobLines(plan, 14, tasks_are_nodes=False).feed("3: hello")) == ["[task3]".ljust(16) + " hello"]


# What torchrun prints as the launcher cancels a job (its agent's traceback), around a worker's line.
CANCELLED = ["0: I1205 11:34:20.127000 47 torch/distributed/elastic/agent/server/api.py:525] [default] Rendezvous",
             "1: [1|0]:step 3 loss 0.5",
             "0: W1205 11:35:08.586000 47 torch/distributed/elastic/agent/server/api.py:725] Received 15 death signal",
             "0: Traceback (most recent call last):",
             '1: Traceback (most recent call last):',
             '0:   File "/opt/venv/bin/torchrun", line 10, in <module>',
             '1:   File "/opt/venv/bin/torchrun", line 10, in <module>',
             "0:     sys.exit(main())",
             "0: torch.distributed.elastic.multiprocessing.api.SignalException: Process 47 got signal: 15",
             "1: torch.distributed.elastic.multiprocessing.api.SignalException: Process 30 got signal: 15",
             "srun: error: node0: task 0: Exited with exit code 1"]


def test_the_console_shows_a_jobs_lines_as_a_compose_runs_and_the_log_keeps_every_one(make_job):
    lines = JobLines(make_job(nodes=2, nproc_per_node=1), 14)
    every = [line for raw in CANCELLED for line in lines.feed(raw)] + lines.flush()
    assert len(every) == len(CANCELLED)  # (the job's log)
    shown = lines.shown(every, ended=True)
    # not torchrun's INFO record, nor its own traceback as the job is cancelled: its warning,
    # the worker's line and srun's stay
    assert [line.text for line in shown] == [
        "step 3 loss 0.5",
        "W1205 11:35:08.586000 47 torch/distributed/elastic/agent/server/api.py:725] Received 15 death signal",
        "srun: error: node0: task 0: Exited with exit code 1"]
    assert [line.prefix for line in shown] == ["node1/rank1", "node0", "slurm"]


def test_verbose_shows_every_line_of_the_job_and_a_traceback_cut_short_shows_at_its_end(make_job):
    verbose = JobLines(make_job(nodes=2, nproc_per_node=1), 14, verbose=True)
    every = [line for raw in CANCELLED for line in verbose.feed(raw)]
    assert verbose.shown(every, ended=True) == every
    # a traceback's first line is held until the next says whose: the job's end lets it out
    lines = JobLines(make_job(nodes=2, nproc_per_node=1), 14)
    assert lines.shown(lines.feed("0: Traceback (most recent call last):")) == []
    assert [line.text for line in lines.shown([], ended=True)] == ["Traceback (most recent call last):"]


def test_a_slurm_jobs_output_goes_whole_to_its_log_and_filtered_to_the_console(make_job, tmp_path):
    backend, _ = slurm_backend_following(make_job, tmp_path)
    for raw in CANCELLED:
        backend.lines.put(raw)
    log_file = io.StringIO()
    backend.drain_output(log_file, ended=True)
    assert log_file.getvalue().count("\n") == len(CANCELLED)
    assert "SignalException" in log_file.getvalue() and "Rendezvous" in log_file.getvalue()
    console = backend.out.getvalue()
    assert console.count("\n") == 3 and "step 3 loss 0.5" in console and "srun: error: node0" in console
    assert "SignalException" not in console and "Rendezvous" not in console


def test_job_output_lines_written_in_pieces_are_joined_per_task(make_job):
    lines = JobLines(make_job(nodes=2, nproc_per_node=2), 14)
    # what srun --label makes of torchrun's tee when on node1 rank 3 draws a bar ("\rstep 1",
    # "\rstep 2", no newline) while rank 2 prints "half", then " done\n"
    raws = ["1: [3|1]:", "1: [3|1]:step 1[2|0]:half[3|1]:", "0: [0|0]:other", "1: [3|1]:step 2[2|0]: done"]
    shown = rendered([line for raw in raws for line in lines.feed(raw)] + lines.flush())
    assert [line.split(maxsplit=1) for line in shown] == [
        ["[node1/rank3]"], ["[node1/rank3]", "step 1"], ["[node0/rank0]", "other"], ["[node1/rank2]", "half done"],
        ["[node1/rank3]", "step 2"]]


def test_failed_summary_says_what_slurm_reported(tmp_path):
    outcome = RunResult("r1", tmp_path, [], Timings(), slurm=SlurmJob(
        "3", job={"JobState": "NODE_FAIL", "Reason": "NodeDown", "ExitCode": "0:15"},
        nodes={"node0": {"State": "IDLE"}, "node1": {"State": "DOWN+NOT_RESPONDING", "Reason": "Not responding"}}))
    text = format_slurm_summary(outcome)
    assert outcome.exit_code == 1
    assert ("FAILED: Slurm job 3 NODE_FAIL (reason NodeDown, exit code 0:15); Slurm reports node1"
            " DOWN+NOT_RESPONDING (Not responding)") in text
    done = RunResult("r2", tmp_path, [], Timings(), slurm=SlurmJob("4", job={"JobState": "COMPLETED", "ExitCode": "0:0"}))
    assert done.exit_code == 0 and "SUCCEEDED: Slurm job 4 COMPLETED" in format_slurm_summary(done)
    assert "restarted in place" not in format_slurm_summary(done) and done.restarts_in_place == {}
    # torchrun restarted the workers within the job's tasks: Slurm's COMPLETED does not say it, the summary does
    done.slurm.restarts_in_place = {"node0": 1, "node1": 2}
    assert done.restarts_in_place == {"node0": 1, "node1": 2}
    lines = format_slurm_summary(done).splitlines()
    assert lines[lines.index("restarted in place: torchrun restarted the workers after a failure, once on node0,"
                             " 2 times on node1") + 2] == "SUCCEEDED: Slurm job 4 COMPLETED, exit code 0:0"
    # a job that completed before its fault could fire did not run what was asked
    unfired = RunResult("r3", tmp_path, [], Timings(), faults=[FaultRecord("kill:node1@t=500", "node1", False, None, None,
                                                                           reason="the job ended first")],
                        slurm=SlurmJob("5", job={"JobState": "COMPLETED", "ExitCode": "0:0"}))
    text = format_slurm_summary(unfired)
    assert unfired.exit_code == 1
    assert text.splitlines()[-1] == ("FAILED: Slurm job 5 COMPLETED, exit code 0:0, but 1 fault(s) asked for never"
                                     " fired: kill:node1@t=500")
    # Slurm gave no exit code: the job line and the verdict say so alike, and neither makes one up
    unsaid = RunResult("r4", tmp_path, [], Timings(),
                       slurm=SlurmJob("6", job={"JobState": "COMPLETED", "NodeList": "n[0-1]"}))
    lines = format_slurm_summary(unsaid).splitlines()
    assert lines[-1] == "SUCCEEDED: Slurm job 6 COMPLETED, exit code not given by Slurm"
    assert "job 6: COMPLETED (reason -), exit code not given by Slurm, on n[0-1], run time -" in lines
    unsaid.slurm.job = {"JobState": "FAILED", "Reason": "NonZeroExitCode"}
    assert format_slurm_summary(unsaid).splitlines()[-1] == ("FAILED: Slurm job 6 FAILED (reason NonZeroExitCode,"
                                                             " exit code not given by Slurm)")
    unsaid.slurm.job, unsaid.faults = {"JobState": "COMPLETED"}, unfired.faults
    assert format_slurm_summary(unsaid).splitlines()[-1] == ("FAILED: Slurm job 6 COMPLETED, exit code not given by"
                                                             " Slurm, but 1 fault(s) asked for never fired:"
                                                             " kill:node1@t=500")


def test_the_plan_of_a_slurm_run_shows_its_cluster_and_the_script_its_run_submits(make_job, tmp_path, monkeypatch):
    from orchestrate.slurm.backend import SlurmBackend
    from orchestrate.slurm.show import format_slurm_plan
    from tests.fakes import FakeDockerClient

    monkeypatch.setenv("SECRET_TOKEN", "s3cret")
    out = io.StringIO()
    assert main(["plan", "--scheduler", "slurm", "--cpu", "--nodes", "2", "--nproc-per-node", "2", "--workdir",
                 str(tmp_path), "--copy-env", "SECRET_*", "--", "-m", "app.train"], out=out) == 0
    text = out.getvalue()
    assert "$ torchrun" not in text  # no node's command is the launcher's: srun starts torchrun
    assert f"cluster: {CONTROLLER} (slurmctld) and 2 nodes with slurmd (node0, node1)" in text
    assert [ln.split() for ln in text.splitlines() if ln.startswith("node1 ")] == [["node1", "1", "0", "2"],
                                                                                  ["node1", "1", "1", "3"]]
    script = text.split("--- job.sbatch ---\n")[1]
    assert script.startswith("#!/bin/bash\n") and "--nproc-per-node 2" in script and "-m app.train" in script
    assert "SECRET_TOKEN" in text and "s3cret" not in text
    # The script shown is the one a run of the plan submits.
    plan = make_job(nodes=2, nproc_per_node=2)
    plan.run_dir.mkdir(parents=True)
    SlurmBackend(plan, FakeDockerClient(), io.StringIO(), run_as="0:0", image="img").render(plan.run_dir)
    written = (plan.run_dir / "slurm" / "job.sbatch").read_text()
    assert format_slurm_plan(plan).split("--- job.sbatch ---\n")[1] == written.rstrip("\n")


def test_the_plan_of_an_elastic_slurm_run_says_how_many_nodes_it_asks_for_and_what_a_lost_one_does(tmp_path):
    out = io.StringIO()
    assert main(["plan", "--scheduler", "slurm", "--cpu", "--nodes", "3", "--rdzv", "c10d", "--nnodes", "2:3",
                 "--workdir", str(tmp_path), "--", "-m", "app.train"], out=out) == 0
    assert ("job: job.sbatch below, 3 nodes x 1 process; c10d rendezvous on the allocation's first host, port 29400,"
            " max restarts 3 (failed workers: a lost node ends the job, Slurm's NODE_FAIL);") in out.getvalue()
    assert "#SBATCH --nodes=3\n" in out.getvalue()


def test_the_plan_of_a_users_sbatch_script_says_it_is_submitted_unchanged(tmp_path):
    job = tmp_path / "mine.sbatch"
    job.write_text("#!/bin/bash\nsrun hostname\n")
    out = io.StringIO()
    assert main(["plan", "--scheduler", "slurm", "--cpu", "--nodes", "3", "--workdir", str(tmp_path),
                 "--sbatch", str(job)], out=out) == 0
    text = out.getvalue()
    assert f"job: {job}, submitted unchanged" in text and "node2" in text
    assert "DDP_NODE" not in text  # no task's own: sbatch passes one environment to all
    assert "--- job.sbatch" not in text and "node rank" not in text  # the script decides the ranks


def test_a_users_sbatch_script_is_copied_into_the_run_as_readable_as_it_was(make_job, tmp_path):
    from orchestrate.slurm.backend import SlurmBackend
    from tests.fakes import FakeDockerClient

    mine = tmp_path / "exported.sbatch"
    mine.write_text("#!/bin/bash\nexport HF_TOKEN=t0k\nsrun hostname\n")
    mine.chmod(0o700)  # as export -o writes a job holding the user's values
    plan = make_job(nodes=2)
    plan.run_dir.mkdir(parents=True)
    SlurmBackend(plan, FakeDockerClient(), io.StringIO(), run_as="0:0", image="img", sbatch=mine).render(plan.run_dir)
    copy = plan.run_dir / "slurm" / "exported.sbatch"
    assert copy.read_bytes() == mine.read_bytes() and stat.S_IMODE(copy.stat().st_mode) == 0o700


def test_a_collective_timeout_that_reaches_a_users_sbatch_scripts_only_as_a_variable_is_said(tmp_path):
    mine = tmp_path / "mine.sbatch"
    mine.write_text("#!/bin/bash\nsrun python3 train.py\n")
    said = (f"[orchestrate] --collective-timeout 60 reaches the workers of --sbatch {mine} as DDP_TIMEOUT only (app/"
            " reads it; a script must pass it to init_process_group itself): that script starts them without the"
            " start-up hook that gives it to init_process_group")
    # the generated script starts its workers through the hook, which gives init_process_group the timeout
    for args, says in ((["--scheduler", "slurm", "--sbatch", str(mine)], True), (["--scheduler", "slurm"], False),
                       (["--scheduler", "compose"], False)):
        out = io.StringIO()
        assert main(["plan", *args, "--cpu", "--workdir", str(tmp_path), "--collective-timeout", "60"], out=out) == 0
        assert (said in out.getvalue()) == says, out.getvalue()


def test_slurm_refuses_what_it_cannot_do(tmp_path, capsys):
    out = io.StringIO()
    assert main(["run", "--scheduler", "slurm", "--detach", "--cpu"], out=out) == 2
    assert "--detach is for --scheduler compose" in capsys.readouterr().err
    assert main(["run", "--sbatch", str(tmp_path / "none.sh")], out=out) == 2
    assert "--sbatch needs --scheduler slurm" in capsys.readouterr().err
    assert main(["run", "--scheduler", "slurm", "--cpu", "--backend", "gloo", "--nccl-as-gloo", "--", "-m", "app.hello"],
                out=out) == 2
    assert "--nccl-as-gloo are for --scheduler compose" in capsys.readouterr().err
    # the watchdog and --pdb need the hook, which a script of the user's own does not start its workers through
    mine = tmp_path / "mine.sbatch"
    mine.write_text("#!/bin/bash\nsrun python3 train.py\n")
    for flags, refused in ((["--hang-timeout", "30"], "--hang-timeout and --hang-diagnose-after need"),
                           (["--hang-diagnose-after", "10"], "--hang-timeout and --hang-diagnose-after need"),
                           (["--pdb"], "--pdb needs")):
        assert main(["plan", "--scheduler", "slurm", "--cpu", "--workdir", str(tmp_path), "--sbatch", str(mine),
                     *flags], out=out) == 2
        assert f"error: {refused} the generated batch script: --sbatch {mine} starts its workers as it says," \
            in capsys.readouterr().err
        assert main(["plan", "--scheduler", "slurm", "--cpu", "--workdir", str(tmp_path), *flags, "--", "-m",
                     "app.hello"], out=out) == 0


def test_a_peers_closed_connection_after_a_dead_node_is_not_shown_as_the_cause(tmp_path):
    cause = Failure("node0", 0, None, "RuntimeError: Connection closed by peer [10.0.0.3]:6576", (),
                    traceback="Traceback (most recent call last):\n  File x\nRuntimeError: Connection closed by peer")
    outcome = RunResult("r1", tmp_path, [], Timings(), reported_failure=cause,
                        faults=[FaultRecord("kill:node1@step=3", "node1", True, 9.1, 3)],
                        slurm=SlurmJob("3", job={"JobState": "NODE_FAIL", "Reason": "NodeDown"},
                                       nodes={"node1": {"State": "DOWN", "Reason": "Not responding"}},
                                       workers_collateral=True))
    text = format_slurm_summary(replace(outcome, reported_failure=replace(cause, users_frame="t.py:3 in main: x()")))
    assert "  workers, as a result: node0 rank 0: RuntimeError: Connection closed by peer" in text
    assert "| Traceback" not in text and "in your code" not in text  # a lost peer's wait is no line of its own
    # a worker's own error: where the user's code was, above its traceback
    own = replace(cause, exception="ValueError: bad batch", users_frame="t.py:9 in main: step(batch)",
                  traceback="Traceback (most recent call last):\n  File x\nValueError: bad batch")
    failed = RunResult("r2", tmp_path, [], Timings(), reported_failure=own,
                       slurm=SlurmJob("4", job={"JobState": "FAILED", "Reason": "NonZeroExitCode", "ExitCode": "1:0"}))
    lines = format_slurm_summary(failed).splitlines()
    at = lines.index("  workers: node0 rank 0: ValueError: bad batch")
    assert lines[at + 1:at + 3] == ["  in your code: t.py:9 in main: step(batch)", "  | Traceback (most recent call last):"]
    chained = format_slurm_summary(replace(failed, reported_failure=replace(own, chain=("caused by: OSError: x",))))
    assert chained.splitlines()[at + 1:at + 3] == ["  in your code: t.py:9 in main: step(batch)", "  caused by: OSError: x"]
    assert "caused by" not in format_slurm_summary(  # nor a lost peer's, after what Slurm reported
        replace(outcome, reported_failure=replace(cause, chain=("caused by: OSError: x",))))


# --- stop RUN for a run under Slurm ----------------------------------------------------------

def slurm_run_in_engine(tmp_path: Path, *, launcher: str):
    """A Slurm run's cluster in the fake engine: the controller and two node containers,
    running, labelled as the launcher labels them; its job 7 in the queue until scancel ends it
    (a job that ignores SIGTERM: until its SIGKILL)."""
    import socket

    from orchestrate.engine.labels import (COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, CONTROLLER_ROLE,
                                           LAUNCHER_LABEL, NODE_RANK_LABEL, ROLE_LABEL, RUN_DIR_LABEL, RUN_ID_LABEL,
                                           SCHEDULER_LABEL)
    from tests.fakes import FakeDockerClient

    client = FakeDockerClient()
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    launcher_id = {"alive": f"{socket.gethostname()}:{os.getpid()}:", "gone": ""}[launcher]
    common = {RUN_ID_LABEL: "r", COMPOSE_PROJECT_LABEL: "ddp-r", SCHEDULER_LABEL: "slurm", RUN_DIR_LABEL: str(run_dir),
              LAUNCHER_LABEL: launcher_id}
    for service, extra in ((CONTROLLER, {ROLE_LABEL: CONTROLLER_ROLE}), ("node0", {NODE_RANK_LABEL: "0"}),
                           ("node1", {NODE_RANK_LABEL: "1"})):
        client.running(f"ddp-r-{service}-1", {**common, **extra, COMPOSE_SERVICE_LABEL: service}, script_as=service)
    client.command_outputs["squeue"] = (0, b"7\n")
    return client, run_dir


def job_ends_on(client, signal_option: str) -> None:
    """The fake job leaves the queue once ``scancel SIGNAL_OPTION`` reaches it."""
    real_exec = client.api.exec_create

    def exec_create(container_id, cmd, **kwargs):
        if cmd[:2] == ["scancel", signal_option]:
            client.command_outputs["squeue"] = (0, b"")
        return real_exec(container_id, cmd, **kwargs)

    client.api.exec_create = exec_create


def scancels(client) -> list[tuple]:
    return [call[2][1:] for call in client.calls if call[0] == "exec_create" and call[2][0] == "scancel"]


def test_stop_signals_a_slurm_jobs_tasks_through_slurm_and_leaves_the_cluster_to_its_launcher(tmp_path):
    import json

    from orchestrate.engine.runs import find_run
    from orchestrate.slurm.stop import stop_slurm_run

    client, run_dir = slurm_run_in_engine(tmp_path, launcher="alive")
    job_ends_on(client, "--signal=TERM")  # the tasks end on their SIGTERM
    said: list[str] = []
    assert stop_slurm_run(client, find_run(client, "r"), 10, say=said.append) == ["node0", "node1"]
    assert scancels(client) == [("--signal=TERM", "7")]
    assert said == ["sent SIGTERM to Slurm job 7 of run r (scancel --signal=TERM); SIGKILL after 10 s"]
    assert json.loads((run_dir / "stop-requested").read_text())["nodes"] == ["node0", "node1"]
    # the launcher follows the run: it says how the job ended and removes the cluster, not this stop
    assert all(c.status == "running" for c in client.containers_by_name.values())


def test_stop_kills_a_slurm_job_that_outlives_its_timeout_and_stops_a_cluster_no_launcher_follows(tmp_path):
    from orchestrate.engine.runs import find_run
    from orchestrate.slurm.stop import stop_slurm_run

    client, _ = slurm_run_in_engine(tmp_path, launcher="gone")
    job_ends_on(client, "--signal=KILL")  # SIGTERM is ignored
    said: list[str] = []
    assert stop_slurm_run(client, find_run(client, "r"), 0.3, say=said.append) == ["node0", "node1"]
    assert scancels(client) == [("--signal=TERM", "7"), ("--signal=KILL", "--full", "7"), ("7",)]
    assert said[1] == "Slurm job 7 still runs after 0.3 s: cancelling it (SIGKILL)"
    assert {c.name: c.status for c in client.containers_by_name.values()} == {
        "ddp-r-slurmctl-1": "exited", "ddp-r-node0-1": "exited", "ddp-r-node1-1": "exited"}


def test_stop_of_a_kept_slurm_run_whose_job_ended_says_it_had_ended_and_stops_its_cluster(tmp_path):
    """A kept Slurm run's cluster outlives its job: stop stops its containers, and says the run had
    already ended, and how, not that its nodes were stopped as if a job ran in them."""
    from orchestrate.cli.main import main
    from orchestrate.outcome.events import record_event

    client, run_dir = slurm_run_in_engine(tmp_path, launcher="gone")
    client.command_outputs["squeue"] = (0, b"")  # its job left the queue
    record_event(run_dir, "run-ended", exit_code=0, succeeded=True, interrupted=False, error="")
    out = io.StringIO()
    assert main(client=client, argv=["stop", "r", "--timeout", "0"], out=out) == 0
    assert out.getvalue() == ("run r had already ended (succeeded); stopped node0, node1, which outlived its job;"
                              " logs and state kept (remove it with: python -m orchestrate down r)\n")
    assert scancels(client) == []
    assert {c.status for c in client.containers_by_name.values()} == {"exited"}


def slurm_backend_following(make_job, tmp_path, sbatch: Optional[Path] = None, **options):
    """A backend whose controller answers ``client.command_outputs`` (``options``: the run's)."""
    from orchestrate.slurm.backend import SlurmBackend
    from tests.fakes import FakeDockerClient

    plan = make_job(nodes=2, **options)
    plan.run_dir.mkdir(parents=True)
    client = FakeDockerClient()
    backend = SlurmBackend(plan, client, io.StringIO(), run_as="1000:1000", image="img", sbatch=sbatch)
    backend.containers = {CONTROLLER: client.running("ddp-test-run-slurmctl-1")}
    return backend, client


@pytest.mark.parametrize("grace, ends_on, sent, said, ended", [
    (10, "--signal=TERM", [("--signal=TERM", "7")], [],  # the tasks end on their SIGTERM
     "Slurm job 7's tasks got SIGTERM and ended within the stop grace"),
    (0.3, "--signal=KILL", [("--signal=TERM", "7"), ("--signal=KILL", "--full", "7"), ("7",)],
     ["Slurm job 7 still runs after 0.3 s: cancelling it (SIGKILL)"],  # SIGTERM ignored: killed after the grace
     "Slurm job 7's tasks were killed (SIGKILL)"),
    (0, "--signal=KILL", [("--signal=KILL", "--full", "7"), ("7",)], [],  # --stop-grace 0: killed at once
     "Slurm job 7's tasks were killed (SIGKILL)"),
])
def test_an_interrupted_slurm_run_gives_its_tasks_the_runs_stop_grace(grace, ends_on, sent, said, ended, make_job,
                                                                     tmp_path):
    backend, client = slurm_backend_following(make_job, tmp_path)
    backend.job_id = "7"
    client.command_outputs["squeue"] = (0, b"7\n")
    client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n")
    job_ends_on(client, ends_on)
    heard: list[str] = []
    backend.say = heard.append
    backend.started_at = backend.clock() - 12.0
    result = backend.wind_down(grace)
    assert scancels(client) == sent
    assert heard == said
    # the summary says how the job ended, and how long it ran (not "cancelled", "job 0.0 s")
    result.interrupted, result.signal_number = True, 2
    summary = format_slurm_summary(result)
    assert f"INTERRUPTED: {ended}; every node stopped" in summary
    assert "job 7: FAILED (reason NonZeroExitCode), exit code 1:0" in summary  # Slurm's own word on it
    assert re.search(r"\| job 1[2-9]\.\d s", summary), summary


@pytest.mark.parametrize("grace", [10, 0])
def test_an_interrupted_quiet_slurm_job_is_looked_at_before_its_tasks_get_sigterm(grace, make_job, tmp_path):
    """Ctrl-C on a job that looks stuck: where every rank waits is said, and kept in the summary,
    before the cancel; with --stop-grace 0 (kill at once), no look."""
    from orchestrate.hangs.watchdog import HangWatch
    from tests.unit.test_hangs import coll, probe, snap, stack

    def answers(request: str, at: float):  # both ranks wait in the collective #3 they entered, using no CPU
        waiting = (coll(3, state="entered", at="desync.py:11"),)
        return probe(at, r0=snap(0, waiting, stack(11), cpu_s=1.0), r1=snap(1, waiting, stack(11), cpu_s=1.0))

    backend, client = slurm_backend_following(make_job, tmp_path)
    backend.job_id = "7"
    client.command_outputs["squeue"] = (0, b"7\n")
    client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15\n")
    job_ends_on(client, "--signal=TERM" if grace else "--signal=KILL")
    heard: list[str] = []
    asked: list[str] = []
    backend.say = heard.append
    backend.hangs = HangWatch(120.0, None, lambda: asked.append("r") or f"r{len(asked)}", answers,
                              backend.expected_ranks, lambda ranks: {}, heard.append, backend.clock, recheck_s=0.05,
                              answer_window_s=0.1)
    backend.hangs.progress(backend.clock() - 30.0)  # its last line 30 s ago
    result = backend.wind_down(grace)
    result.interrupted, result.signal_number = True, 2
    lines = format_slurm_summary(result).splitlines()
    if not grace:
        assert asked == [] and result.hang is None and not any("hung" in line for line in heard + lines)
        # no look, but a verdict the watchdog said before (a second Ctrl-C cut the look short) is kept
        found = backend.hangs.judge_at_the_end(answers("r1", 0.0), answers("r2", 1.0), backend.clock())
        assert found is not None and found.hung
        assert backend.wind_down(grace).hang is found and asked == []
        return
    assert len(asked) == 2 and re.fullmatch(r"no progress for 3\d s: looking where every rank waits before they"
                                            r" stop \(0\.2 s\)", heard[0])
    assert heard[1].startswith("at the interrupt, hung: no progress for 3")
    assert scancels(client)[0] == ("--signal=TERM", "7")  # then the stop
    assert result.hang is not None and result.hang.hung
    assert any(re.match(r"  while hung: no progress for 3\d s: ranks 0, 1: all_reduce at desync.py:11", line)
               for line in lines), "\n".join(lines)


def slurm_job_whose_cancel_is_refused(make_job, tmp_path):
    """A backend following Slurm job 7, whose scancel Slurm refuses; and what it says."""
    backend, client = slurm_backend_following(make_job, tmp_path)
    backend.job_id = "7"
    client.command_outputs["squeue"] = (0, b"7\n")
    client.command_outputs["scancel"] = (1, b"scancel: error: Kill job error on job id 7: Access/permission denied\n")
    heard: list[str] = []
    backend.say = heard.append
    return backend, client, heard


def test_an_interrupted_slurm_run_whose_cancel_slurm_refuses_says_so_and_is_torn_down(make_job, tmp_path):
    backend, client, heard = slurm_job_whose_cancel_is_refused(make_job, tmp_path)
    client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=RUNNING Reason=None ExitCode=0:0\n")
    result = backend.wind_down(0)
    assert heard == ["Slurm refused to stop the job of run test-run: scancel: error: Kill job error on job id 7:"
                     " Access/permission denied; the teardown removes the cluster"]
    result.interrupted = True
    summary = format_slurm_summary(result)  # not "cancelled", nor Slurm's "RUNNING" of a moment before
    assert "INTERRUPTED: Slurm job 7 went with the cluster (Slurm did not stop it); every node stopped" in summary
    assert "RUNNING" not in summary


def test_a_slurm_job_stopped_from_another_terminal_ends_as_stopped_not_failed(make_job, tmp_path):
    from orchestrate.engine.runs import mark_stop_requested

    backend, client = slurm_backend_following(make_job, tmp_path)
    plan = backend.plan
    client.command_outputs["sbatch"] = (0, b"7\n")
    ended = b"JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=0:15 NodeList=node[0-1]\n"
    client.command_outputs["scontrol"] = (0, ended)

    mark_stop_requested(plan.run_dir, ["node0", "node1"])
    result = backend.follow(timeout_s=30)
    assert (result.interrupted, result.stopped_by, result.exit_code) == (True, "python -m orchestrate stop", 143)
    assert ("STOPPED by python -m orchestrate stop (SIGTERM to Slurm job 7's tasks): every node was stopped"
            in format_slurm_summary(result))
    (plan.run_dir / "stop-requested").unlink()  # no stop: the same end is the job's failure
    failed = backend.follow(timeout_s=30)
    assert (failed.interrupted, failed.exit_code) == (False, 1)
    assert "FAILED: Slurm job 7 FAILED (reason NonZeroExitCode" in format_slurm_summary(failed)
    # a stop came, but the job had failed by itself (exit 1, no signal): its failure stands
    mark_stop_requested(plan.run_dir, ["node0", "node1"])
    client.command_outputs["scontrol"] = (0, ended.replace(b"ExitCode=0:15", b"ExitCode=1:0"))
    own = backend.follow(timeout_s=30)
    assert (own.interrupted, own.exit_code) == (False, 1)



def test_a_slurm_job_whose_tasks_took_the_stops_sigterm_and_failed_is_stopped_and_one_that_failed_before_is_not(
        make_job, tmp_path):
    """``stop RUN`` signals the job's steps: torchrun takes the SIGTERM to its workers and then ends
    with exit code 1 (a signal ends it so), and so does the job (``ExitCode=1:0``). That end,
    after the stop came, is the stop's; the same end a minute before it is the job's own failure."""
    import json
    from datetime import datetime, timezone

    from orchestrate.engine.runs import mark_stop_requested

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    mark_stop_requested(backend.plan.run_dir, ["node0", "node1"])
    asked = json.loads((backend.plan.run_dir / "stop-requested").read_text())["time"]
    # EndTime has whole seconds: an end in the stop's own second is after it
    for ended_s, stopped in ((asked + 4, True), (int(asked), True), (asked - 60, False)):
        end = datetime.fromtimestamp(ended_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        client.command_outputs["scontrol"] = (0, f"JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0"
                                                 f" EndTime={end} NodeList=node[0-1]\n".encode())
        result = backend.follow(timeout_s=30)
        assert (result.interrupted, result.exit_code) == ((True, 143) if stopped else (False, 1)), end


@pytest.mark.timeout(30)
def test_a_job_the_cluster_can_never_start_is_cancelled_and_fails_saying_why(make_job, tmp_path):
    """A batch script asking for more nodes than the run's cluster has stays pending for ever in
    Slurm (PartitionNodeLimit): cancelled once the reason has stood 2 s, the run failing (exit 2)."""
    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=PENDING Reason=PartitionNodeLimit ExitCode=0:0\n")
    real_exec = client.api.exec_create

    def exec_create(container_id, cmd, **kwargs):
        if cmd == ["scancel", "7"]:
            client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=CANCELLED Reason=PartitionNodeLimit"
                                                     b" ExitCode=0:0\n")
        return real_exec(container_id, cmd, **kwargs)

    client.api.exec_create = exec_create
    heard: list[str] = []
    backend.say = heard.append
    result = backend.follow(timeout_s=30)
    assert scancels(client) == [("7",)]
    assert heard[-1] == ("Slurm holds job 7 pending (reason PartitionNodeLimit): it asks for more nodes than the"
                         " cluster has: its #SBATCH --nodes against --nodes; cancelling it")
    assert result.error == ("Slurm cannot start job 7 in this cluster of 2 node(s): pending, reason"
                            " PartitionNodeLimit (it asks for more nodes than the cluster has: its #SBATCH --nodes"
                            " against --nodes)")
    assert result.exit_code == 2 and 2.0 <= result.timings.job_s < 10


@pytest.mark.timeout(30)
def test_a_job_pending_for_a_reason_the_cluster_may_meet_is_said_once_and_waited_for(make_job, tmp_path):
    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=PENDING Reason=Resources ExitCode=0:0\n")
    heard: list[str] = []
    looks_after: list[int] = []
    real_exec = client.api.exec_create

    def exec_create(container_id, cmd, **kwargs):
        if cmd[:3] == ["scontrol", "show", "job"] and any("pending" in h for h in heard):
            looks_after.append(1)
            if len(looks_after) == 4:  # a few looks after it was said: it starts, and ends
                client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0"
                                                         b" NodeList=node[0-1]\n")
        return real_exec(container_id, cmd, **kwargs)

    client.api.exec_create = exec_create
    backend.say = heard.append
    result = backend.follow(timeout_s=30)
    assert [h for h in heard if "pending" in h] == ["job 7 is still pending in Slurm (reason Resources)"]
    assert result.succeeded and scancels(client) == [] and result.timings.job_s >= 5.0


def test_a_reason_the_cluster_never_meets_counts_from_when_slurm_first_gave_it(make_job, tmp_path):
    """Pending 5 s for Resources, then PartitionConfig: not cancelled at its first look, 2 s later."""
    from orchestrate.outcome.model import RunResult, Timings

    backend, client = slurm_backend_following(make_job, tmp_path)
    now = [0.0]
    backend.clock, backend.job_id, backend.started_at = (lambda: now[0]), "7", 0.0
    backend.pending_reason = ("", 0.0)
    backend.say = lambda line: None
    result = RunResult("r", tmp_path, [], Timings())
    for at, reason, cancelled in ((5.0, "Resources", False), (10.0, "PartitionConfig", False),
                                  (11.5, "PartitionConfig", False), (12.0, "PartitionConfig", True)):
        now[0] = at
        backend.note_pending({"JobState": "PENDING", "Reason": reason}, True, result)
        assert bool(result.error) is cancelled, at
    assert scancels(client) == [("7",)]


def test_an_interrupt_cancels_a_pending_job_at_once_instead_of_signalling_it(make_job, tmp_path):
    """scancel --signal=TERM on a job still pending retries for 95 s before it refuses: a Ctrl-C of
    a job that never started took that long."""
    from orchestrate.slurm.stop import terminate_jobs

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=PENDING Reason=Resources ExitCode=0:0\n")
    terminate_jobs(client, backend.containers[CONTROLLER], "test-run", ["7"])
    assert scancels(client) == [("7",)]
    client.calls.clear()
    client.command_outputs["scontrol"] = (0, b"JobId=7 JobState=RUNNING Reason=None ExitCode=0:0\n")
    terminate_jobs(client, backend.containers[CONTROLLER], "test-run", ["7"])
    assert scancels(client) == [("--signal=TERM", "7")]


@pytest.mark.parametrize("directives, output", [
    ("#SBATCH --nodes=2\n", "--output=/ddp-run/slurm/slurm-%j.out"),  # Slurm's default: the work directory
    ("#SBATCH --nodes=2\n#SBATCH --output=train-%j.log\n", None),  # the script's own stands
    ("#SBATCH -o train.log\n", None),
    ("#SBATCH --open-mode=append\n", "--output=/ddp-run/slurm/slurm-%j.out"),  # (no output named)
    ("#SBATCH -N 2\nsrun hostname\n#SBATCH -o late.log\n", "--output=/ddp-run/slurm/slurm-%j.out"),  # after a command
    ("#SBATCH -N 2 # -o in a comment\n", "--output=/ddp-run/slurm/slurm-%j.out"),
    ("  #SBATCH -o not.read\n", "--output=/ddp-run/slurm/slurm-%j.out"),  # sbatch reads column 0 alone
    ('#SBATCH --comment="a -o b"\n', "--output=/ddp-run/slurm/slurm-%j.out"),
    ("#SBATCH --out=train.log\n", None),  # getopt takes a start of --output for it
])
def test_a_users_batch_script_naming_no_output_writes_it_in_the_run_directory(make_job, tmp_path, directives,
                                                                              output):
    """Every run's first job is job 1: Slurm's default slurm-1.out in the work directory was written
    over by each run."""
    from orchestrate.slurm.backend import SlurmBackend
    from orchestrate.slurm.cluster import SLURM_DIR
    from tests.fakes import FakeDockerClient

    script = tmp_path / "my_job.sbatch"
    script.write_text("#!/bin/bash\n" + directives + "srun torchrun train.py\n")
    plan = make_job(nodes=2)
    (plan.run_dir / SLURM_DIR).mkdir(parents=True)
    client = FakeDockerClient()
    backend = SlurmBackend(plan, client, io.StringIO(), run_as="1000:1000", image="img", sbatch=script)
    backend.containers = {CONTROLLER: client.running("ddp-test-run-slurmctl-1")}
    (plan.run_dir / SLURM_DIR / script.name).write_text(script.read_text())  # (the run's copy, as render makes it)
    client.command_outputs["sbatch"] = (0, b"1\n")
    assert backend.submit() == "1"
    [sbatch] = [call[2] for call in client.calls if call[0] == "exec_create" and call[2][0] == "sbatch"]
    assert sbatch == ("sbatch", "--parsable", *([output] if output else []), "/ddp-run/slurm/my_job.sbatch")


@pytest.mark.parametrize("directive, chdir", [
    ("#SBATCH --chdir={workdir}\n", "--chdir=/workspace"),  # an exported script's: the host's path
    ("#SBATCH -D {workdir}/sub\n", "--chdir=/workspace/sub"),
    ("#SBATCH -D{workdir}\n", "--chdir=/workspace"),
    ("#SBATCH --chdir '{workdir}'\n", "--chdir=/workspace"),
    ("#SBATCH --chdir={workdir}/sub/..\n", "--chdir=/workspace"),  # (not /workspace/sub/..)
    ("#SBATCH --chdir={workdir}/../{name}\n", "--chdir=/workspace"),  # (not /workspace/../name: /name)
    ("#SBATCH --chdir={link}/sub\n", "--chdir=/workspace/sub"),  # another spelling of it
    ("#SBATCH --chdir=/elsewhere\n", None),  # not the work directory's: sbatch takes it as it is
    ("#SBATCH --chdir=sub\n", None),  # relative: to where sbatch runs, the work directory already
    ("#SBATCH -N 2\nsrun hostname\n#SBATCH --chdir={workdir}\n", None),  # after a command: not read
])
def test_a_users_batch_script_changing_to_the_work_directory_runs_there_in_the_nodes(make_job, tmp_path, directive,
                                                                                      chdir):
    """An exported script names the work directory's path on the host (`#SBATCH --chdir`), which
    no node has: the nodes have it at /workspace, and sbatch's own --chdir says so."""
    from orchestrate.slurm.backend import SlurmBackend
    from orchestrate.slurm.cluster import SLURM_DIR
    from tests.fakes import FakeDockerClient

    script = tmp_path / "my_job.sbatch"
    (tmp_path / "sub").mkdir()
    link = tmp_path.parent / f"{tmp_path.name}-link"
    link.symlink_to(tmp_path)
    script.write_text("#!/bin/bash\n#SBATCH -o out.log\n"
                      + directive.format(workdir=tmp_path.resolve(), name=tmp_path.name, link=link)
                      + "srun torchrun train.py\n")
    plan = make_job(nodes=2)
    (plan.run_dir / SLURM_DIR).mkdir(parents=True)
    (plan.run_dir / SLURM_DIR / script.name).write_text(script.read_text())
    client = FakeDockerClient()
    backend = SlurmBackend(plan, client, io.StringIO(), run_as="1000:1000", image="img", sbatch=script)
    backend.containers = {CONTROLLER: client.running("ddp-test-run-slurmctl-1")}
    client.command_outputs["sbatch"] = (0, b"1\n")
    assert backend.submit() == "1"
    [sbatch] = [call[2] for call in client.calls if call[0] == "exec_create" and call[2][0] == "sbatch"]
    assert sbatch == ("sbatch", "--parsable", *([chdir] if chdir else []), "/ddp-run/slurm/my_job.sbatch")


def test_sbatch_passes_every_task_the_plans_environment_but_a_nodes_name(make_job, tmp_path):
    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    passed: dict = {}
    real_exec = client.api.exec_create

    def exec_create(container_id, cmd, **kwargs):
        if cmd[0] == "sbatch":
            passed.update(kwargs.get("environment") or {})
        return real_exec(container_id, cmd, **kwargs)

    client.api.exec_create = exec_create
    assert backend.submit() == "7"
    assert passed["DDP_RUN_ID"] == "test-run" and "DDP_NODE" not in passed  # not node0's, in every task


def test_a_job_id_that_sbatchs_output_lost_is_asked_of_slurm(make_job, tmp_path, monkeypatch):
    import orchestrate.slurm.backend as backend_module
    from orchestrate.errors import OrchestrateError

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"")  # docker's exec lost what sbatch printed
    client.command_outputs["squeue"] = (0, b"13\n12\n")  # the run's own cluster: its first job is the one
    client.command_outputs["scontrol"] = (0, b"JobId=12 JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=node[0-1]\n")
    result = backend.follow(timeout_s=30)
    assert result.slurm.job_id == "12" and result.succeeded
    asked = [c[2] for c in client.calls if c[0] == "exec_create" and c[2][0] in ("squeue", "scontrol")]
    assert asked[0] == ("squeue", "-h", "-t", "all", "-o", "%A")
    assert asked[1] == ("scontrol", "show", "job", "12", "-o")  # never the whole queue's jobs
    # a warning before the id is no id; a queue with no job ends the run saying so, in bounded
    # time whatever the clock (no sleeping here: each poll's sleep is counted instead)
    slept: list[float] = []
    monkeypatch.setattr(backend_module.time, "sleep", slept.append)
    backend.clock = lambda: 5.0  # frozen, as a caller's own clock may be
    client.command_outputs["sbatch"] = (0, b"sbatch: warning: something\n")
    client.command_outputs["squeue"] = (0, b"squeue: warning: 2 nodes\n")  # a number in a line is no id
    with pytest.raises(OrchestrateError, match=r"^sbatch gave no job id \(it said 'sbatch: warning: something'\),"
                                               r" and Slurm's queue has no job after 15 s \(squeue, exit code 0:"
                                               r" squeue: warning: 2 nodes\)$"):
        backend.follow(timeout_s=30)
    assert sum(s for s in slept if s == backend_module.JOB_LOOKUP_POLL_S) == pytest.approx(15.5)
    client.command_outputs["squeue"] = (1, b"squeue: error: slurm_load_jobs error: Unable to contact slurm controller\n")
    with pytest.raises(OrchestrateError, match=r"\(squeue, exit code 1: squeue: error: slurm_load_jobs error: Unable"):
        backend.follow(timeout_s=30)


def test_a_stop_slurm_refuses_is_an_error_and_takes_its_request_back(tmp_path):
    from orchestrate.engine.runs import find_run
    from orchestrate.errors import EngineError
    from orchestrate.slurm.stop import stop_slurm_run

    client, run_dir = slurm_run_in_engine(tmp_path, launcher="alive")
    client.command_outputs["scancel"] = (1, b"scancel: error: Kill job error on job id 7: Access/permission denied\n")
    with pytest.raises(EngineError, match="Slurm refused to stop the job of run r: scancel: error: Kill job error on"
                                          " job id 7: Access/permission denied"):
        stop_slurm_run(client, find_run(client, "r"), 10, say=lambda line: None)
    assert scancels(client) == [("--signal=TERM", "7"), ("7",)]  # then as a pending job is cancelled
    assert not (run_dir / "stop-requested").exists()  # the job's own end stands


def test_answers_that_cannot_be_empty_are_asked_again_where_docker_lost_them(make_job, tmp_path, monkeypatch):
    """docker's exec can lose a short command's output (docker/docker-py#2042): a node table
    that came back empty, and a queue a stop found empty, are asked again before believed."""
    import orchestrate.engine.client as client_module
    import orchestrate.slurm.stop as stop_module

    def answers(*texts: str) -> list[tuple]:
        given, asked = iter(texts), []

        def exec_output(client, container, argv, **kwargs):
            asked.append(tuple(argv))
            return 0, next(given)
        monkeypatch.setattr(client_module, "exec_output", exec_output)
        return asked

    backend, _ = slurm_backend_following(make_job, tmp_path)
    asked = answers("", "NodeName=node0 State=IDLE\nNodeName=node1 State=DOWN Reason=gone\n")
    assert sorted(backend.node_records()) == ["node0", "node1"] and len(asked) == 2
    asked = answers("", "", "")  # a cluster that answers no node three times: none, said so by the table
    assert backend.node_records() == {} and len(asked) == 3

    asked = answers("", "7\n")
    assert stop_module.queued_jobs(None, None) == ["7"] and len(asked) == 2
    asked = answers("", "", "")  # an empty queue, believed at the third answer
    assert stop_module.queued_jobs(None, None) == [] and len(asked) == 3


# --- the worker failure a failed Slurm job is explained by --------------------------------------

def slurm_error_file(run_dir: Path, node: str, attempt: str, message: str, timestamp: int, traceback: str = "",
                     mtime: float = 1_000.0) -> None:
    """torchrun's error file of ``node``'s local rank 0 in ``attempt``, as ``@record`` writes it."""
    path = run_dir / node / "torchrun" / "job-7" / attempt / "0" / "error.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": {
        "py_callstack": traceback or f"Traceback (most recent call last):\n{message}", "timestamp": str(timestamp)}}}))
    os.utime(path.parents[1], (mtime, mtime))


def test_a_failed_slurm_job_is_explained_by_the_workers_own_error_not_a_peers_lost_connection(make_job):
    from orchestrate.slurm.backend import SlurmBackend
    from tests.fakes import FakeDockerClient

    plan = make_job(nodes=2)
    backend = SlurmBackend(plan, FakeDockerClient(), io.StringIO(), run_as="1000:1000", image="img")
    job = {"JobState": "FAILED", "Reason": "NonZeroExitCode", "ExitCode": "1:0"}
    nothing = SlurmJob("7", job=dict(job))
    assert backend.root_cause(nothing) == Failure("", None, None, "", (),
                                                  description="Slurm job 7 FAILED (reason NonZeroExitCode)")

    # node0's lost peer came first in time; node1's own error explains it, and the line of the user's code
    slurm_error_file(plan.run_dir, "node0", "attempt_0", "RuntimeError: Connection closed by peer [10.0.0.3]:6576", 100)
    slurm_error_file(plan.run_dir, "node1", "attempt_0", "KeyError: 'from the attempt before'", 90, mtime=500.0)
    slurm_error_file(plan.run_dir, "node1", "attempt_1", "ValueError: bad batch", 105, traceback=(
        "Traceback (most recent call last):\n  File \"/workspace/data.py\", line 2, in read\nOSError: short read\n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 9, in main\n    loss = step(batch)\n"
        "  File \"/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1, in _call_impl\n"
        "    return forward(*args)\nValueError: bad batch"))
    slurm = SlurmJob("7", job=dict(job))
    failure = backend.root_cause(slurm)
    assert (failure.node, failure.rank, failure.exception) == ("node1", 1, "ValueError: bad batch")
    assert failure.users_frame == "train.py:9 in main: loss = step(batch)"
    assert failure.chain == ("caused by: OSError: short read",)
    assert failure.description == ("Slurm job 7 FAILED (reason NonZeroExitCode); workers: node1 rank 1:"
                                   " ValueError: bad batch")
    assert slurm.workers_collateral is False

    # only lost peers: the earliest is said, marked as a result of something else
    (plan.run_dir / "node1" / "torchrun").rename(plan.run_dir / "gone")
    slurm_error_file(plan.run_dir, "node1", "attempt_0", "RuntimeError: Connection closed by peer [10.0.0.2]:1", 99)
    lost = backend.root_cause(slurm)
    assert (lost.node, lost.rank, lost.users_frame) == ("node1", 1, "")
    assert slurm.workers_collateral is True


def slurm_worker_log(run_dir: Path, node: str, lines: list[str], mtime: float) -> None:
    """torchrun's stderr log of ``node``'s local rank 0 in its first attempt, written at ``mtime``."""
    path = run_dir / node / "torchrun" / "job-7" / "attempt_0" / "0" / "stderr.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    os.utime(path, (mtime, mtime))


def test_a_failed_slurm_job_without_error_files_is_explained_by_the_traceback_a_workers_log_ends_in(make_job):
    from orchestrate.slurm.backend import SlurmBackend
    from tests.fakes import FakeDockerClient

    plan = make_job(nodes=2)
    backend = SlurmBackend(plan, FakeDockerClient(), io.StringIO(), run_as="1000:1000", image="img")
    job = {"JobState": "FAILED", "Reason": "NonZeroExitCode", "ExitCode": "1:0"}
    # rank 0 lost its peer first in time; rank 1's own error (no @record: no error file) explains it
    slurm_worker_log(plan.run_dir, "node0", ["[rank0]: Traceback (most recent call last):",
                                             '[rank0]:   File "/workspace/boom.py", line 9, in main',
                                             "[rank0]:     dist.all_reduce(x)",
                                             "[rank0]: RuntimeError: Connection closed by peer [10.0.0.3]:6576"], 100.0)
    slurm_worker_log(plan.run_dir, "node1", ["some warning on stderr", "[rank1]: Traceback (most recent call last):",
                                             '[rank1]:   File "/workspace/boom.py", line 8, in main',
                                             '[rank1]:     raise ValueError("bad shard 7")',
                                             "[rank1]: ValueError: bad shard 7"], 101.0)
    slurm = SlurmJob("7", job=dict(job))
    failure = backend.root_cause(slurm)
    assert (failure.node, failure.rank, failure.exception) == ("node1", 1, "ValueError: bad shard 7")
    assert failure.users_frame == 'boom.py:8 in main: raise ValueError("bad shard 7")'
    assert failure.traceback.splitlines()[0] == "Traceback (most recent call last):"  # from its start, unprefixed
    assert slurm.workers_collateral is False
    # two errors of their own: the earlier one, by when each log was last written
    slurm_worker_log(plan.run_dir, "node0", ["[rank0]: Traceback (most recent call last):",
                                             "[rank0]: KeyError: 'step'"], 102.0)
    assert backend.root_cause(slurm).exception == "ValueError: bad shard 7"

    # a script Python could not compile: no traceback, its error's one frame; an error file wins over a log
    shutil.rmtree(plan.run_dir / "node1")
    slurm_worker_log(plan.run_dir, "node1", ['  File "/workspace/syn.py", line 7', "    if rank == 0",
                                             "               ^", "SyntaxError: expected ':'"], 99.0)
    failure = backend.root_cause(slurm)
    assert (failure.rank, failure.exception, failure.users_frame) == (1, "SyntaxError: expected ':'",
                                                                      "syn.py:7: if rank == 0")
    slurm_error_file(plan.run_dir, "node0", "attempt_0", "IndexError: 3", 98)
    assert backend.root_cause(slurm).exception == "IndexError: 3"

    # logs that end in no error explain nothing
    shutil.rmtree(plan.run_dir / "node0")
    shutil.rmtree(plan.run_dir / "node1")
    slurm_worker_log(plan.run_dir, "node1", ["W1201 a warning"], 99.0)
    assert backend.root_cause(slurm).rank is None


def test_a_slurm_summary_says_each_nodes_state_and_the_jobs_line_whole(tmp_path):
    outcome = RunResult("r1", tmp_path / "r1", [], Timings(1.0, 2.0, 3.0, 0.5), slurm=SlurmJob(
        "3", job={"JobState": "NODE_FAIL", "Reason": "NodeDown", "ExitCode": "0:15", "NodeList": "node[0-1]",
                  "RunTime": "00:00:42"},
        nodes={"node1": {"State": "DOWN+NOT_RESPONDING", "Reason": "Not responding"}, "node0": {"State": "IDLE"}}))
    assert format_slurm_summary(outcome).splitlines() == [
        "",
        "=== run r1 summary (Slurm job 3) ===",
        "node   Slurm state          reason",
        "-----  -------------------  --------------",
        "node0  IDLE                 -",
        "node1  DOWN+NOT_RESPONDING  Not responding",
        "job 3: NODE_FAIL (reason NodeDown), exit code 0:15, on node[0-1], run time 00:00:42",
        "bring-up 1.0 s | job 3.0 s",
        f"logs: {tmp_path / 'r1'}",
        "FAILED: Slurm job 3 NODE_FAIL (reason NodeDown, exit code 0:15); Slurm reports node1 DOWN+NOT_RESPONDING"
        " (Not responding)"]
    # what Slurm did not say is said as not known, and no table of nodes it said nothing of
    bare = RunResult("r2", tmp_path / "r2", [], Timings(), slurm=SlurmJob("5", job={"JobState": "TIMEOUT"}))
    assert format_slurm_summary(bare).splitlines()[1:4] == [
        "=== run r2 summary (Slurm job 5) ===",
        "job 5: TIMEOUT (reason -), exit code not given by Slurm, on -, run time -",
        "bring-up 0.0 s | job 0.0 s"]
    assert format_slurm_summary(bare).splitlines()[-1] == ("FAILED: Slurm job 5 TIMEOUT (reason -, exit code not given"
                                                           " by Slurm)")
    # the launcher's own error, and a teardown that failed after it, each in a line of its own
    refused = RunResult("r3", tmp_path / "r3", [], Timings(), error="sbatch refused the job: Invalid partition",
                        teardown_error="scancel: no such job", slurm=SlurmJob("6", job={"JobState": "FAILED"}))
    assert format_slurm_summary(refused).splitlines()[-2:] == ["TEARDOWN FAILED: scancel: no such job",
                                                               "FAILED: sbatch refused the job: Invalid partition"]
    # sbatch refused it: no job to name in the header, said so, not "Slurm job -"
    unsubmitted = RunResult("r4", tmp_path / "r4", [], Timings(), error="sbatch refused the job: Invalid partition",
                            slurm=SlurmJob(""))
    assert format_slurm_summary(unsubmitted).splitlines()[1] == (
        "=== run r4 summary (no Slurm job: it was never submitted) ===")


def test_the_clusters_script_starts_every_worker_through_the_hook_and_an_exported_one_runs_the_target(make_job,
                                                                                                      tmp_path):
    from orchestrate.export.options import ExportOptions
    from orchestrate.export.slurm import export_slurm
    from orchestrate.plan.layout import WORKER_START

    plan = make_job(nodes=2, target=("-m", "app.train", "--epochs", "2"))
    lines = run_script(tmp_path, render_sbatch(plan, cluster_batch_options(plan)), nodes=2)
    # the hook: the launcher sees the workers' steps, collectives and stacks (the hang watchdog, stacks RUN)
    assert len(lines) == 2 and all(line.endswith(f" {WORKER_START} -- -m app.train --epochs 2") for line in lines)
    exported = export_slurm(plan, ExportOptions(name="ddp-x"))  # a real cluster has no hook: the target itself
    assert WORKER_START not in exported and "--tee 3 -m app.train --epochs 2'" in exported


class WatchStub:
    """A hang watchdog that keeps what it is told and finds what it is given."""

    def __init__(self, found=None) -> None:
        self.found = found
        self.told: list[bool] = []  # each progress: moved (True) or held (False)
        self.polls = 0

    def progress(self, now, moved=True, held_by=""):
        self.told.append(moved)

    def poll(self, now):
        self.polls += 1
        return self.found


def test_a_slurm_jobs_lines_and_reports_are_its_progress_and_a_rank_being_debugged_holds_it(make_job, tmp_path):
    backend, _ = slurm_backend_following(make_job, tmp_path)
    backend.hangs = watch = WatchStub()
    log_file = io.StringIO()
    backend.watch_for_a_hang(log_file)
    assert watch.told == [] and watch.polls == 1  # nothing moved yet
    backend.job_lines.feed("1: [1|0]:step 3 loss 0.5")
    backend.watch_for_a_hang(log_file)
    backend.watch_for_a_hang(log_file)  # (the same line is one move)
    assert watch.told == [True]
    # torch's own log lines (a store's failed connect, every few seconds) are no move
    backend.job_lines.feed("0: [0|0]:[W1205 07:58:46.236000 48 torch/distributed/elastic/agent/server/api.py:725] x")
    backend.job_lines.feed("0: torchrun's agent says hi")  # and torchrun's own lines, a node's, no rank's
    backend.watch_for_a_hang(log_file)
    assert watch.told == [True] and backend.job_lines.ranks_seen == {0, 1}
    (backend.plan.run_dir / "progress").mkdir()
    (backend.plan.run_dir / "progress" / "rank0.jsonl").write_text(
        json.dumps({"rank": 0, "step": 4, "time": 1.0, "attempt": "a"}) + "\n")
    backend.progress.poll(backend.clock(), None)
    backend.watch_for_a_hang(log_file)
    assert watch.told == [True, True]  # a report
    backend.progress.debugger.attached = lambda: [1]  # a terminal debugs rank 1: held, not a hang
    backend.job_lines.feed("1: [1|0]:(Pdb) ")
    backend.watch_for_a_hang(log_file)
    assert watch.told == [True, True, False]
    # a rank dying of its collective's timeout prints its traceback: progress, but no sign the job moved
    # again (a helper's trial, session 113: it took a hang back as "a long wait", as the Compose runs did)
    backend.progress.debugger.attached = lambda: []
    backend.job_lines.feed("1: [1|0]:[rank1]: Traceback (most recent call last):")
    backend.job_lines.feed("1: [1|0]:[rank1]: torch.distributed.DistBackendError: wait timeout after 40000ms")
    backend.watch_for_a_hang(log_file)
    assert watch.told == [True, True, False, False]
    backend.job_lines.feed("0: [0|0]:[rank0]: Traceback (most recent call last):")
    backend.job_lines.feed("1: [1|0]:step 4 loss 0.4")  # with a line of the script's: it moved
    backend.watch_for_a_hang(log_file)
    assert watch.told == [True, True, False, False, True]
    backend.job_lines.feed("3: [3|0]:[rank3]: epoch 2 loss 0.3")  # a script's own lines in torch's style
    backend.watch_for_a_hang(log_file)
    assert watch.told == [True, True, False, False, True, True]


def test_a_slurm_job_found_hung_is_said_hung_then_cancelled_through_slurm_with_the_stop_grace(make_job, tmp_path):
    from orchestrate.hangs.diagnosis import HangDiagnosis
    from orchestrate.outcome.events import read_events

    backend, client = slurm_backend_following(make_job, tmp_path)
    backend.job_id = "7"
    client.command_outputs["squeue"] = (0, b"7\n")
    job_ends_on(client, "--signal=TERM")
    heard: list[str] = []
    backend.say = heard.append
    found = HangDiagnosis(20.0, [], {}, None, cause="no progress for 20 s (--hang-timeout 20)")
    backend.hangs = watch = WatchStub(found)
    backend.watch_for_a_hang(io.StringIO())
    assert heard[0] == f"HUNG: {found.headline}" and heard[-1] == (
        f"cancelling Slurm job 7: SIGTERM to its tasks, SIGKILL after {backend.plan.config.stop_grace_s:g} s")
    assert scancels(client) == [("--signal=TERM", "7")]  # the tasks took their SIGTERM: no SIGKILL
    assert [e["headline"] for e in read_events(backend.plan.run_dir) if e["event"] == "hung"] == [found.headline]
    backend.watch_for_a_hang(io.StringIO())
    assert watch.polls == 1 and backend.hang is found  # judged once: the job is ending
    assert backend.partial_result().hang is found  # a Ctrl-C meanwhile keeps the verdict
    # the summary: where the ranks waited first, then what the launcher did to the job
    job = {"JobId": "7", "JobState": "CANCELLED", "Reason": "None", "ExitCode": "0:15"}
    result = RunResult("r1", tmp_path, [], Timings(job_s=30.0), slurm=SlurmJob("7", job=job), hang=found)
    lines = format_slurm_summary(result).splitlines()
    at = lines.index(f"HUNG: {found.headline}")
    assert lines[at + 1:] == ["  the launcher then cancelled Slurm job 7 (CANCELLED, exit code 0:15)"]
    assert result.failure is not None and result.failure.describe() == f"HUNG: {found.headline}"
    assert result.exit_code == 1


def test_a_users_own_sbatch_script_has_no_hang_watchdog(make_job, tmp_path):
    from orchestrate.slurm.backend import SlurmBackend
    from tests.fakes import FakeDockerClient

    mine = tmp_path / "mine.sbatch"
    mine.write_text("#!/bin/bash\nsrun python3 train.py\n")
    plan = make_job(nodes=2)
    generated = SlurmBackend(plan, FakeDockerClient(), io.StringIO(), run_as="0:0", image="img")
    own = SlurmBackend(plan, FakeDockerClient(), io.StringIO(), run_as="0:0", image="img", sbatch=mine)
    assert generated.hangs is not None and own.hangs is None  # its workers start without the hook: none would answer
    own.watch_for_a_hang(io.StringIO())  # and it looks at nothing


def job_state_after(client, running: int, final: bytes) -> None:
    """``scontrol show job`` answers RUNNING ``running`` times, then ``final``."""
    real_exec = client.api.exec_create
    asked = []

    def exec_create(container_id, cmd, **kwargs):
        if cmd[:3] == ["scontrol", "show", "job"]:
            asked.append(cmd)
            client.command_outputs["scontrol"] = (0, final if len(asked) > running else
                                                  b"JobId=7 JobState=RUNNING Reason=None ExitCode=0:0\n")
        return real_exec(container_id, cmd, **kwargs)

    client.api.exec_create = exec_create


def test_a_hung_slurm_job_being_cancelled_is_not_cancelled_again_by_its_time_limit(make_job, tmp_path):
    from orchestrate.hangs.diagnosis import HangDiagnosis

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    client.command_outputs["squeue"] = (0, b"7\n")
    job_ends_on(client, "--signal=TERM")
    # (still RUNNING when asked again past the limit: a cancel by it would come then)
    job_state_after(client, 5, b"JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n")
    found = HangDiagnosis(20.0, [], {}, None, cause="no progress for 20 s (--hang-timeout 20)")
    backend.hangs = WatchStub(found)
    result = backend.follow(timeout_s=0.6)  # ends past the limit: the verdict came first
    assert not result.error and result.hang is found, result.error
    assert scancels(client) == [("--signal=TERM", "7")]  # one cancel, the verdict's
    assert f"HUNG: {found.headline}" in format_slurm_summary(result) and result.exit_code == 1


def test_a_slurm_job_that_stop_run_is_stopping_is_not_judged(make_job, tmp_path):
    from orchestrate.engine.runs import mark_stop_requested
    from orchestrate.hangs.diagnosis import HangDiagnosis

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    job_state_after(client, 2, b"JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=0:15\n")
    backend.hangs = watch = WatchStub(HangDiagnosis(20.0, [], {}, None, cause="no progress for 20 s"))
    mark_stop_requested(backend.plan.run_dir, ["node0", "node1"])
    result = backend.follow(timeout_s=30)
    assert watch.polls == 0 and result.hang is None and scancels(client) == []  # `stop RUN` cancels it, alone
    assert (result.interrupted, result.exit_code) == (True, 143)


def test_the_slurm_watchdog_names_the_faults_that_cut_a_nodes_network(make_job, tmp_path):
    import json as json_module
    import time

    backend, client = slurm_backend_following(make_job, tmp_path)
    backend.containers.update({name: client.running(f"ddp-test-run-{name}-1") for name in ("node0", "node1")})
    (backend.plan.run_dir / "events.jsonl").write_text(json_module.dumps(
        {"time": time.time() + 1.0, "event": "fault", "node": "node1", "spec": "disconnect:node1@t=5",
         "action": "disconnect"}) + "\n")
    assert backend.hangs is not None and backend.hangs.cut_by() == ("disconnect:node1@t=5",)
    assert [host.name for host in backend.rank_hosts()] == ["node0", "node1"]


def test_a_slurm_ranks_stops_in_its_debugger_are_recorded_for_the_report_and_its_leaving_said(make_job, tmp_path):
    from orchestrate.debugger.states import LEFT, WAITS
    from orchestrate.outcome.events import read_events
    from tests.unit.test_debugger import STOP, write_records

    backend, _ = slurm_backend_following(make_job, tmp_path)
    heard: list[str] = []
    backend.say = heard.append
    progress_dir = backend.plan.run_dir / "progress"
    progress_dir.mkdir()
    write_records(progress_dir, 1, {"debugger": STOP})
    backend.progress.poll(backend.clock(), None)
    backend.note_debugger_changes()
    assert heard == []  # the rank says where it stopped, and how to reach it, in its own lines
    write_records(progress_dir, 1, {"debugger": {"state": LEFT}})
    backend.progress.poll(backend.clock(), None)
    backend.note_debugger_changes()
    assert heard == ["rank 1 left its debugger"]
    recorded = [(e["rank"], e["node"], e["state"], e["call"]) for e in read_events(backend.plan.run_dir)
                if e["event"] == "debugger"]
    assert recorded == [(1, "node1", WAITS, "breakpoint()"), (1, "node1", LEFT, "breakpoint()")]
    # and as the launcher follows the job
    write_records(progress_dir, 0, {"debugger": STOP})
    backend.client.command_outputs["sbatch"] = (0, b"7\n")
    job_state_after(backend.client, 1, b"JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0\n")
    backend.follow(timeout_s=30)
    assert [e["rank"] for e in read_events(backend.plan.run_dir) if e["event"] == "debugger"] == [1, 1, 0]


def test_a_hung_slurm_job_whose_cancel_slurm_refuses_ends_the_run_saying_both(make_job, tmp_path):
    from orchestrate.errors import OrchestrateError
    from orchestrate.hangs.diagnosis import HangDiagnosis

    backend, client, heard = slurm_job_whose_cancel_is_refused(make_job, tmp_path)
    backend.hangs = WatchStub(HangDiagnosis(20.0, [], {}, None, cause="no progress for 20 s"))
    with pytest.raises(OrchestrateError, match="^the job was found hung, and Slurm refused to stop the job of run"
                                               " test-run: scancel: error: Kill job error"):
        backend.watch_for_a_hang(io.StringIO())
    assert heard[-1].endswith("Access/permission denied; the teardown removes the cluster")
    assert backend.partial_result().hang is not None  # the summary keeps where the ranks waited


def write_failed_records(debug: Path, written: float, *calls: tuple[str, str, int]) -> None:
    """The records the workers' hook writes as their collectives fail: rank N's ``calls[N]``
    (op, what it moves, line of desync.py), all collective #5, written at ``written`` (Unix s)."""
    debug.mkdir(parents=True, exist_ok=True)
    for rank, (op, shapes, line) in enumerate(calls):
        (debug / f"rank{rank}.json").write_text(json.dumps({
            "request": "failed", "reason": "collective failed", "rank": rank, "stacks": [], "time": written,
            "collectives": [{"seq": 5, "op": op, "group": "default", "shapes": shapes, "at": f"desync.py:{line}",
                             "state": "failed"}]}))


TIMED_OUT = "RuntimeError: [/pytorch/gloo/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete"
CALLS = (("all_reduce", "float32[4]", 9), ("barrier", "", 11))


def failed_job_result(tmp_path: Path, exception: str) -> RunResult:
    job = {"JobId": "7", "JobState": "FAILED", "Reason": "NonZeroExitCode", "ExitCode": "1:0"}
    return RunResult("r1", tmp_path, [], Timings(job_s=30.0), slurm=SlurmJob("7", job=job),
                     reported_failure=Failure("node1", 1, 1, exception, (), traceback=f"Traceback\n{exception}"))


def test_a_slurm_job_whose_collective_timed_out_is_said_hung_with_where_every_rank_waited(make_job, tmp_path):
    backend, _ = slurm_backend_following(make_job, tmp_path)
    backend.submitted_time = 1000.0
    write_failed_records(backend.plan.run_dir / "debug", 1010.0, *CALLS)
    result = failed_job_result(tmp_path, TIMED_OUT)
    backend.place_the_failure(result)
    assert result.hang is not None and result.hang.timed_out and result.hung and result.hang.run_id == "test-run"
    headline = ("a collective timed out on node1 rank 1 (Timed out waiting 20000ms for recv operation to complete):"
                " collective #5: rank 0 entered all_reduce(float32[4]) at desync.py:9; rank 1 entered barrier() at"
                " desync.py:11")
    assert result.hang.headline == headline
    lines = format_slurm_summary(result).splitlines()
    at = lines.index(f"HUNG: {headline}")
    # torch ended the wait, not the launcher: the job's own end, as Slurm says it
    assert lines[-1] == "  then Slurm job 7 ended FAILED (reason NonZeroExitCode, exit code 1:0)"
    assert lines[at + 2].startswith("  rerun with --debug-collectives") and not any("cancelled" in ln for ln in lines)
    assert result.failure is not None and result.failure.describe() == f"HUNG: {headline}" and result.exit_code == 1
    # another failure is no hang; records an earlier run left (before the job was submitted) place nothing
    other = failed_job_result(tmp_path, "ValueError: bad batch")
    backend.place_the_failure(other)
    assert other.hang is None
    backend.submitted_time = 1100.0
    late = failed_job_result(tmp_path, "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 ...")
    backend.place_the_failure(late)
    assert late.divergence == ""


@pytest.mark.parametrize("sbatch, told", [(None, 20.0), ("train.sbatch", None)])
def test_a_slurm_job_whose_collective_timed_out_is_told_of_the_runs_collective_timeout_where_it_reached(
        make_job, tmp_path, sbatch, told):
    """The hint names the run's --collective-timeout (since 2026-12-07), which does not reach the
    workers of a batch script of the user's own."""
    backend, _ = slurm_backend_following(make_job, tmp_path, sbatch=sbatch and tmp_path / sbatch,
                                         collective_timeout_s=20)
    backend.submitted_time = 1000.0
    write_failed_records(backend.plan.run_dir / "debug", 1010.0, *CALLS)
    result = failed_job_result(tmp_path, TIMED_OUT)
    backend.place_the_failure(result)
    assert result.hang is not None and result.hang.collective_timeout_s == told


def test_a_slurm_job_that_failed_on_a_mismatch_says_where_the_ranks_collectives_part(make_job, tmp_path):
    backend, _ = slurm_backend_following(make_job, tmp_path)
    backend.submitted_time = 1000.0
    write_failed_records(backend.plan.run_dir / "debug", 1010.0, *CALLS)
    result = failed_job_result(tmp_path, "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 ...")
    backend.place_the_failure(result)
    assert result.hang is None
    lines = format_slurm_summary(result).splitlines()
    assert lines[lines.index("FAILED: Slurm job 7 FAILED (reason NonZeroExitCode, exit code 1:0)") + 1].startswith(
        "  workers: node1 rank 1: RuntimeError: Detected mismatch")
    assert ("  where, by the ranks' collective records: collective #5: rank 0 entered all_reduce(float32[4]) at"
            " desync.py:9; rank 1 entered barrier() at desync.py:11") in lines


def test_a_slurm_jobs_monitored_barrier_names_where_the_late_rank_was_when_torchrun_ended_it(tmp_path):
    result = failed_job_result(tmp_path, "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 5000 ms")
    result.stopped_where = {1: "read_shard at late.py:11"}
    lines = format_slurm_summary(result).splitlines()
    assert lines[lines.index("  rank 1 did not pass the barrier in time: it was in read_shard at late.py:11 when"
                             " torchrun ended it") - 1].startswith("  workers: node1 rank 1: RuntimeError: [Rank 0]")


UNUSED = "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one."


def test_a_slurm_jobs_own_worker_error_gets_the_judges_hint_as_a_compose_runs_does(tmp_path):
    from orchestrate.outcome.record import outcome_record

    result = failed_job_result(tmp_path, UNUSED)
    result.reported_failure = replace(result.reported_failure, traceback=(
        f"Traceback\n{UNUSED}\n[rank1]: Parameter indices which did not receive grad for rank 1: 2 3"))
    lines = format_slurm_summary(result).splitlines()
    hint = ("  hint: DDP got no gradient for the parameters at 2, 3 of model.parameters() (rank 1) in a step: a model"
            " whose loss leaves parameters out on some steps needs DistributedDataParallel(model,"
            " find_unused_parameters=True)")
    said = next(line for line in lines if line.startswith("  hint:"))
    assert said.startswith(hint) and lines.index(said) < lines.index("  | Traceback")  # above the traceback
    assert outcome_record(result)["hint"].startswith(hint.strip().removeprefix("hint: "))
    # not for an error that a peer's lost connection made, where Slurm's own report is the cause
    result.slurm.workers_collateral = True
    assert not any(line.startswith("  hint:") for line in format_slurm_summary(result).splitlines())
    # nor for a job a stop ended
    stopped = failed_job_result(tmp_path, UNUSED)
    stopped.interrupted, stopped.signal_number, stopped.stopped_by = True, 15, "stop RUN"
    assert not any(line.startswith("  hint:") for line in format_slurm_summary(stopped).splitlines())
    assert outcome_record(stopped)["hint"] is None


def test_a_quiet_slurm_job_at_its_time_limit_is_looked_at_twice_and_said_hung_before_it_is_cancelled(make_job,
                                                                                                   tmp_path):
    """A time limit shorter than --hang-diagnose-after (the plugin's ``timeout``): before the
    cancel, two looks at every rank say where each waited, as a Compose run's do."""
    from orchestrate.hangs.watchdog import HangWatch
    from tests.unit.test_hangs import coll, probe, snap, stack

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    job_state_after(client, 3, b"JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15\n")
    heard: list[str] = []
    backend.say = heard.append
    asked: list[float] = []

    def answers(request: str, at: float):  # both ranks wait in the collective #3 they entered, using no CPU
        waiting = (coll(3, state="entered", at="desync.py:11"),)
        return probe(at, r0=snap(0, waiting, stack(11), cpu_s=1.0), r1=snap(1, waiting, stack(11), cpu_s=1.0))

    backend.hangs = HangWatch(120.0, None, lambda: asked.append(backend.clock()) or f"r{len(asked)}", answers,
                              backend.expected_ranks, lambda ranks: {}, heard.append, backend.clock, recheck_s=0.05,
                              answer_window_s=0.1)
    result = backend.follow(timeout_s=0.3)
    assert len(asked) == 2 and asked[1] - asked[0] >= 0.1  # two looks, an answer window apart
    assert result.error.startswith("timed out") and result.hang is not None and result.hang.hung
    look = next(i for i, line in enumerate(heard) if line.startswith("at the time limit, hung: "))
    assert heard[look + 1:][-1].startswith("the job did not end within its time limit of 0.3 s: cancelling it")
    lines = format_slurm_summary(result).splitlines()
    at = lines.index("FAILED: timed out: the job did not end within 0.3 s")
    assert re.match(r"  while hung: no progress for \d+ s: ranks 0, 1: all_reduce at desync.py:11", lines[at + 1])
    assert scancels(client) == [("7",)]  # then cancelled, once


def test_a_slurm_job_that_prints_at_its_time_limit_is_not_looked_at(make_job, tmp_path):
    from orchestrate.hangs.watchdog import HangWatch

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    job_state_after(client, 3, b"JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15\n")
    asked: list[str] = []
    backend.hangs = HangWatch(120.0, None, lambda: asked.append("r") or "r", lambda request, at: None,
                              backend.expected_ranks, lambda ranks: {}, lambda line: None, backend.clock,
                              recheck_s=60.0, answer_window_s=0.1)
    result = backend.follow(timeout_s=0.3)  # (quiet for less than a recheck: it moved a moment ago)
    assert asked == [] and result.error.startswith("timed out") and result.hang is None


def test_a_slurm_job_that_ends_during_its_time_limits_looks_is_not_cancelled_and_succeeds(make_job, tmp_path):
    from orchestrate.hangs.watchdog import HangWatch
    from tests.unit.test_hangs import coll, probe, snap, stack

    backend, client = slurm_backend_following(make_job, tmp_path)
    client.command_outputs["sbatch"] = (0, b"7\n")
    # RUNNING as the limit passes, COMPLETED when asked again after the looks
    job_state_after(client, 2, b"JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0\n")
    waiting = (coll(3, state="entered"),)
    backend.hangs = HangWatch(120.0, None, lambda: "r", lambda request, at: probe(at, r0=snap(0, waiting, stack(11)),
                                                                                   r1=snap(1, waiting, stack(11))),
                              backend.expected_ranks, lambda ranks: {}, lambda line: None, backend.clock,
                              recheck_s=0.05, answer_window_s=0.1)
    result = backend.follow(timeout_s=0.3)
    assert scancels(client) == [] and not result.error and result.succeeded and result.hang is None


def test_sbatchs_refusal_is_said_whole_on_one_line_not_its_last_line_alone():
    from orchestrate.slurm.backend import sbatch_refusal

    output = ("sbatch: error: This does not look like a batch script.  The first\n"
              "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
              "sbatch: error: For instance: #!/bin/sh\n")
    assert sbatch_refusal(output) == ("sbatch: error: This does not look like a batch script.  The first line must"
                                      " start with #! followed by the path to an interpreter. For instance: #!/bin/sh")
    assert sbatch_refusal("sbatch: error: Invalid partition name specified\n") == (
        "sbatch: error: Invalid partition name specified")
    assert sbatch_refusal("") == "no output"
    assert sbatch_refusal("sbatch: warning: can not honor --exclusive\nsbatch: error: Batch job submission failed:"
                          " Invalid partition name specified\n") == (
        "sbatch: error: Batch job submission failed: Invalid partition name specified")  # its reason, not a warning's
    assert sbatch_refusal("something else\n") == "something else"

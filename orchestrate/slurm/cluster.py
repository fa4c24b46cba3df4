"""The simulated Slurm cluster (pure): its ``slurm.conf`` and its Compose project.

A controller container runs ``slurmctld``, every node container ``slurmd``; each also runs
``munged`` with the run's own key, and every one has the Slurm client commands. No container
is privileged and none needs an added capability: processes are tracked by process group
(``proctrack/pgid``, no cgroups) and tasks are not bound (``task/none``). Each container's
main process is the node supervisor (``orchestrate/node/main.py``, the launcher's lease included) around
the daemon, after ``start.sh`` installed the key and the configuration and made the host
user, as whom the jobs run.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from orchestrate.config.run_config import RunConfig
from orchestrate.engine.compose_file import escape_interpolation, project_resources, user_mounts
from orchestrate.engine.labels import CONTROLLER_ROLE, ROLE_LABEL, SCHEDULER_LABEL, node_labels
from orchestrate.plan.layout import (
    NETWORK,
    NODE_MAIN,
    NODE_NAME_ENV,
    PROJECT_MOUNT_DIR,
    RUN_DIR_MOUNT,
    SHARED_DIR,
    SHARED_VOLUME,
    SHM_SIZE,
    WORKSPACE_DIR,
)
from orchestrate.plan.make import lease_args, worker_target
from orchestrate.plan.model import JobPlan
from orchestrate.slurm.script import BatchOptions

CONTROLLER = "slurmctl"
SLURM_DIR = "slurm"  # in the run directory: slurm.conf, munge.key, job.sbatch, the job's output
JOB_SCRIPT = "job.sbatch"  # the generated batch script, in SLURM_DIR
START_SCRIPT = f"{PROJECT_MOUNT_DIR}/orchestrate/slurm/start.sh"
# Seconds before Slurm declares a silent node DOWN (the default, 300, is too long to watch).
SLURMD_TIMEOUT_S = 10
# Seconds from a cancelled job's SIGTERM to its SIGKILL (scancel; a stop's own timeout comes first).
KILL_WAIT_S = 5


def slurm_conf(plan: JobPlan, cpus: int, memory_mb: int) -> str:
    """``slurm.conf`` for the plan's nodes. Every node offers the engine's CPUs and memory
    (nodes share the host; a user's script may ask for --cpus-per-task or --mem)."""
    last = len(plan.nodes) - 1
    names = f"node[0-{last}]" if last else "node0"
    return "\n".join([
        f"# Slurm configuration of ddp-compose run {plan.run_id}",
        "ClusterName=ddp",
        f"SlurmctldHost={CONTROLLER}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "# No cgroups, no privileges: processes are tracked by process group, tasks not bound.",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "ReturnToService=2",
        "# A job whose node fails ends (NODE_FAIL) instead of going back to the queue.",
        "JobRequeue=0",
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        "SlurmctldTimeout=10",
        "# Ended jobs stay in the controller's memory for scontrol (no accounting database).",
        "MinJobAge=86400",
        f"KillWait={KILL_WAIT_S}",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmdParameters=config_overrides",
        f"NodeName={names} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        "PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def job_environment(plan: JobPlan) -> dict[str, str]:
    """What sbatch passes to every task of the job: the plan's environment, less the node's name,
    which is each task's own (the generated script sets it from ``$SLURMD_NODENAME``)."""
    return {k: v for k, v in plan.nodes[0].env.items() if k != NODE_NAME_ENV}


def cluster_batch_options(plan: JobPlan) -> BatchOptions:
    """How the generated batch script runs on the simulated cluster: its output and torchrun's
    logs in the run directory, from the work directory, and each worker through the start-up hook
    (:func:`orchestrate.plan.make.worker_target`), as in a Compose node: its steps, collectives and
    stacks reach the launcher (the hang watchdog, faults at a step, ``stacks RUN``). The user's
    variables reach the job through sbatch's own environment (it exports it to every task): the
    script, a record of the run, never holds their values. Each task names its own node
    (``DDP_NODE``: the script is one for every node)."""
    user = plan.config.user_env
    env = {k: v for k, v in job_environment(plan).items() if k not in user}
    return BatchOptions(job_name=f"ddp-{plan.run_id}", output=f"{RUN_DIR_MOUNT}/{SLURM_DIR}/slurm-%j.out",
                        chdir=WORKSPACE_DIR, env=env, task_env={NODE_NAME_ENV: "$SLURMD_NODENAME"},
                        log_dir=f"{RUN_DIR_MOUNT}/$SLURMD_NODENAME/torchrun", worker_command=worker_target(plan.config))


def slurm_caveats(config: RunConfig, sbatch: Optional[Path]) -> list[str]:
    """What a run under the simulated Slurm does of ``config`` less than a Compose run would: a
    batch script of the user's own (``--sbatch``) starts the workers without the start-up hook,
    so a script's init_process_group gets no default timeout from it."""
    if config.collective_timeout_s is None or sbatch is None:
        return []
    return [f"--collective-timeout {config.collective_timeout_s:g} reaches the workers of --sbatch {sbatch}"
            " as DDP_TIMEOUT only (app/ reads it; a script must pass it to init_process_group itself): that script"
            " starts them without the start-up hook that gives it to init_process_group"]


def daemon_command(plan: JobPlan, daemon: list[str], run_as: str) -> list[str]:
    """start.sh (as root: key, configuration, the user, munged), then the node supervisor
    holding the launcher's lease around the daemon in the foreground."""
    return ["sh", START_SCRIPT, run_as, "python3", NODE_MAIN, "--ready-timeout", f"{plan.config.ready_timeout_s:g}",
            *lease_args(plan.config, plan.detached), "--", *daemon]


def render_slurm_compose(plan: JobPlan, image: str, run_as: str) -> dict[str, Any]:
    """The cluster's Compose project: the controller and one container per node."""
    cfg = plan.config
    volumes = [
        {"type": "bind", "source": str(cfg.workdir), "target": WORKSPACE_DIR},
        {"type": "bind", "source": str(cfg.project_root), "target": PROJECT_MOUNT_DIR, "read_only": True},
        {"type": "volume", "source": SHARED_VOLUME, "target": SHARED_DIR},
        {"type": "bind", "source": str(plan.run_dir), "target": RUN_DIR_MOUNT},
        *user_mounts(cfg),
    ]

    def service(name: str, role: str, daemon: list[str], labels: dict[str, str]) -> dict[str, Any]:
        svc: dict[str, Any] = {
            "image": image, "pull_policy": "never", "hostname": name, "init": True,
            "user": "0:0",  # the daemons run as root inside; jobs run as the host user
            "command": escape_interpolation(daemon_command(plan, daemon, run_as)),
            "working_dir": WORKSPACE_DIR, "shm_size": SHM_SIZE, "stop_grace_period": f"{cfg.stop_grace_s:g}s",
            "networks": [NETWORK], "volumes": volumes,
            "labels": escape_interpolation({**labels, ROLE_LABEL: role, SCHEDULER_LABEL: "slurm"}),
        }
        if cfg.cpus_per_node and role == "node":
            svc["cpus"] = cfg.cpus_per_node
        if cfg.memory_per_node and role == "node":
            svc["mem_limit"] = svc["memswap_limit"] = cfg.memory_per_node
        return svc

    services = {CONTROLLER: service(CONTROLLER, CONTROLLER_ROLE, ["slurmctld", "-D"],
                                    {k: v for k, v in node_labels(plan, plan.nodes[0]).items()
                                     if not k.endswith("node-rank")})}
    for node in plan.nodes:
        services[node.name] = service(node.name, "node", ["slurmd", "-D"], node_labels(plan, node))
    return {"name": plan.project_name, "services": services, **project_resources(plan)}


def sinfo_idle(sinfo_output: str, nodes: int) -> bool:
    """Whether ``sinfo -h -N -o '%N %t'`` shows every node idle (pure)."""
    states = dict(line.split()[:2] for line in sinfo_output.splitlines() if len(line.split()) >= 2)
    return len(states) >= nodes and all(state == "idle" for state in states.values())


def parse_scontrol(record: str) -> dict[str, str]:
    """``scontrol show ... -o`` output (``Key=Value`` pairs on one line) as a dict (pure).
    A value runs to the next `` Key=``, so values with spaces (``Reason=Not responding``)
    stay whole."""
    record = record.strip()
    keys = list(_SCONTROL_KEY.finditer(record))
    fields: dict[str, str] = {}
    for match, following in zip(keys, keys[1:] + [None]):
        end = following.start() if following is not None else len(record)
        fields[match["key"]] = record[match.end():end].strip()
    return fields


_SCONTROL_KEY = re.compile(r"(?:^|(?<=\s))(?P<key>[A-Za-z][A-Za-z0-9_:/.]*)=")

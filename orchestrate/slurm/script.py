"""The sbatch script of a plan (pure): what runs on the simulated cluster and on a real one.

One task per node (``srun --ntasks-per-node=1``) runs torchrun with the node's index in the
allocation as its node rank and the allocation's first host as the master, the mapping
people get wrong by hand::

    DDP_MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
    srun bash -c 'exec torchrun --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" --master-addr "$DDP_MASTER_ADDR" ...'

``$SLURM_NODEID`` is expanded by each task, not by the batch script. The first host is taken
with ``sed -n 1p``, which reads all of ``scontrol``'s output: ``head -n 1`` exits after one line,
and under ``set -o pipefail`` the SIGPIPE that ``scontrol`` may then get (whenever it has not
finished writing) fails the whole job with exit 141.

Elastic plans use the c10d rendezvous on the head host instead of node ranks, and ask for the
plan's own node count: Slurm's allocation is fixed for the job's life, and given a range
(``--nodes=1-2``) cons_tres allocates its minimum even with every node idle. torchrun's restarts
cover failed workers within the allocation; a lost node ends the job (Slurm's NODE_FAIL), as in a
static one. ``--no-kill`` would keep the job going on the other nodes, but losing the first host,
which runs this script and hosts the rendezvous, then leaves the job running with nothing to end
it until its time limit.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Optional

from orchestrate.plan.layout import RDZV_PORT
from orchestrate.plan.model import JobPlan
from orchestrate.plan.torchrun import STORE_PER_ROUND_ENV
from orchestrate.text import counted


# The rendezvous port a job derives from its id (a common practice): 20000-29999, so that two jobs whose first
# host is the same node (a partition that shares nodes) meet on one port only when their ids end alike.
JOB_PORT = "$DDP_MASTER_PORT"
JOB_PORT_LINE = "DDP_MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))"


@dataclass(frozen=True)
class BatchOptions:
    """Where and how the script runs.

    Attributes:
        job_name: ``#SBATCH --job-name``.
        output: ``#SBATCH --output`` (``%j`` is the job id); None keeps Slurm's default.
        chdir: ``#SBATCH --chdir``; None: where the job is submitted from.
        env: Variables exported to every task.
        task_env: Variables each task sets for its torchrun, expanded by the task
            (``{"DDP_NODE": "$SLURMD_NODENAME"}``: the node's own name).
        log_dir: torchrun's ``--log-dir`` (``$SLURMD_NODENAME`` is the node's name); None: none.
        container_image: Run each task in this image with the cluster's container support
            (pyxis/enroot: ``srun --container-image``).
        container_mounts: ``srun --container-mounts`` with ``container_image``.
        time_limit: ``#SBATCH --time`` (e.g. ``01:00:00``).
        partition: ``#SBATCH --partition``.
        checks_the_script: The script first looks for a script target in its directory, and where
            it is missing ends saying where to submit from (an exported job's: the simulated
            cluster's is always there). Not with ``container_image``, whose tasks find it in the image.
        module_file: With ``checks_the_script``, a module target's file to look for in the same way
            (``mytrain/__init__.py``: its top-level package, found in the project at export); None:
            none looked for (a module installed in the cluster's Python).
        cpus_per_task: ``#SBATCH --cpus-per-task`` and the same on the srun line (srun of Slurm
            22.05 and newer does not inherit it), the CPUs of each node's one task: torchrun, its
            workers and their DataLoader workers; None: the site's default, one CPU in most.
        memory_mb: ``#SBATCH --mem``, each node's memory in MiB; None: the site's default.
        port_from_job_id: The rendezvous port is derived from ``$SLURM_JOB_ID`` (two jobs whose
            first host is the same node then rarely meet on one port); False: the plan's own.
        worker_command: What torchrun runs in place of the plan's target (the simulated
            cluster's: the workers' start-up hook around it); empty: the target itself, as on any
            cluster.
    """

    job_name: str = "ddp"
    output: Optional[str] = None
    chdir: Optional[str] = None
    env: dict[str, str] = field(default_factory=dict)
    task_env: dict[str, str] = field(default_factory=dict)
    log_dir: Optional[str] = None
    container_image: Optional[str] = None
    container_mounts: Optional[str] = None
    time_limit: Optional[str] = None
    partition: Optional[str] = None
    checks_the_script: bool = False
    module_file: Optional[str] = None
    cpus_per_task: Optional[int] = None
    memory_mb: Optional[int] = None
    port_from_job_id: bool = False
    worker_command: tuple[str, ...] = ()


def torchrun_line(plan: JobPlan, options: BatchOptions) -> str:
    """The torchrun command each task runs, as shell text (task-side variables unexpanded)."""
    cfg = plan.config
    if cfg.elastic:
        port = JOB_PORT if options.port_from_job_id else str(RDZV_PORT)
        rendezvous = (f'--nnodes {cfg.min_nodes}:{cfg.max_nodes} --rdzv-backend c10d'
                      f' --rdzv-endpoint "$DDP_MASTER_ADDR:{port}" --rdzv-id "$SLURM_JOB_ID"'
                      f' --rdzv-conf join_timeout={cfg.rdzv_timeout_s:g}'
                      f' --max-restarts {cfg.max_restarts}')
    else:
        port = f'"{JOB_PORT}"' if options.port_from_job_id else str(plan.master_port)
        rendezvous = (f'--nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" --master-addr "$DDP_MASTER_ADDR"'
                      f' --master-port {port} --max-restarts 0')
    log_dir = f' --log-dir "{options.log_dir}"' if options.log_dir else ""
    assignments = "".join(f'{name}="{value}" ' for name, value in sorted(options.task_env.items()))
    return (f"{assignments}exec torchrun {rendezvous} --nproc-per-node {cfg.nproc_per_node} --tee 3{log_dir} "
            + shlex.join(options.worker_command or cfg.target))


def script_check(script: str, chdir: Optional[str]) -> list[str]:
    """The lines that look for ``script`` (or a module's file) where the job runs, and end it
    (exit 2) saying what to do where it is missing: where sbatch is called, or ``chdir``; either
    way Slurm runs a job in /tmp where the node lacks that directory (a directory the nodes do
    not share)."""
    quoted = shlex.quote(script)
    if chdir is None:
        advice, values = ("call sbatch from your project's directory, or export with --chdir DIR", "")
    else:
        advice, values = ("the job's --chdir is %s: export with your project's directory on the cluster",
                          f" {shlex.quote(chdir)}")
    return [
        "",
        f"# {script} is the project's: the job runs where sbatch is called (or in #SBATCH --chdir).",
        f"if [ ! -f {quoted} ]; then",
        f'    printf "ddp-compose: no %s in %s, where the job runs (in /tmp where the node lacks the job\'s'
        f' directory): {advice}\\n"'
        f' {quoted} "$PWD"{values} >&2',
        "    exit 2",
        "fi",
    ]


def render_sbatch(plan: JobPlan, options: BatchOptions) -> str:
    """The whole batch script."""
    cfg = plan.config
    lines = [
        "#!/bin/bash",
        f"# {counted(plan.config.nodes, 'node')} x {counted(cfg.nproc_per_node, 'process', 'processes')},"
        f" world size {plan.world_size},"
        f" {'elastic c10d' if cfg.elastic else 'static'} rendezvous; written by ddp-compose.",
        f"#SBATCH --job-name={options.job_name}",
        f"#SBATCH --nodes={cfg.nodes}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if cfg.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={cfg.gpus_per_node}")
    if options.cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={options.cpus_per_task}")
    if options.memory_mb:
        lines.append(f"#SBATCH --mem={options.memory_mb}M")
    for flag, value in (("output", options.output), ("chdir", options.chdir), ("time", options.time_limit),
                        ("partition", options.partition)):
        if value:  # (sbatch reads a directive's quotes as a shell does: a path with a space stays one word)
            lines.append(f"#SBATCH --{flag}={shlex.quote(value)}")
    lines.append("set -euo pipefail")
    script = cfg.target[0] if cfg.target and cfg.target[0] != "-m" else None
    if options.checks_the_script and script and not options.container_image:
        lines += script_check(script, options.chdir)
    if options.checks_the_script and options.module_file and not options.container_image:
        lines += script_check(options.module_file, options.chdir)
    lines += [
        "",
        "# The master is the allocation's first host; every task gets it from the environment.",
        "# (sed reads every line: with head, scontrol could die of SIGPIPE and pipefail end the job.)",
        'DDP_MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        "export DDP_MASTER_ADDR",
    ]
    if options.port_from_job_id:
        lines += ["# The rendezvous port comes from the job's id: another job's first host may be this one.",
                  JOB_PORT_LINE, "export DDP_MASTER_PORT"]
    for name, value in sorted(options.env.items()):
        if STORE_PER_ROUND_ENV.get(name) == value:  # said above its own line
            lines += ["# A store of its own for each rendezvous round: a restarted worker group then reads no"
                      " address", "# of the attempt before it from torchrun's shared store (pytorch#135712)."]
        lines.append(f"export {name}={shlex.quote(value)}")
    srun = ["srun", "--label", "--kill-on-bad-exit=1", "--ntasks-per-node=1"]
    if options.cpus_per_task:  # (srun of Slurm 22.05 and newer does not take it from the allocation)
        srun.append(f"--cpus-per-task={options.cpus_per_task}")
    if options.container_image:
        srun.append(f"--container-image={options.container_image}")
        if options.container_mounts:
            srun.append(f"--container-mounts={options.container_mounts}")
    lines += [
        "",
        "# One task per node: $SLURM_NODEID is its node rank (expanded by the task, not here).",
        f"{shlex.join(srun)} bash -c {shlex.quote(torchrun_line(plan, options))}",
        "",
    ]
    return "\n".join(lines)

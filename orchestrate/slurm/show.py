"""The plan of a Slurm run as ``plan --scheduler slurm`` prints it (pure): the simulated cluster,
who decides the ranks, and the batch script sbatch gets.

Under Slurm no torchrun command is the launcher's: srun starts one task per node, and each task
takes its node rank from ``$SLURM_NODEID``, its master from the allocation. The plan therefore
shows the script, not per-node command lines.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from orchestrate.plan.layout import NODE_NAME_ENV, RDZV_PORT, WORKSPACE_DIR
from orchestrate.plan.model import JobPlan
from orchestrate.plan.show import env_line, image_and_fault_lines, mount_lines, node_size
from orchestrate.slurm.cluster import CONTROLLER, JOB_SCRIPT, cluster_batch_options
from orchestrate.slurm.script import render_sbatch
from orchestrate.text import counted, format_table


def format_slurm_plan(plan: JobPlan, sbatch: Optional[Path] = None) -> str:
    """The Slurm run of ``plan``: the generated batch script, or the user's ``sbatch`` file,
    which is submitted unchanged."""
    cfg = plan.config
    names = ", ".join(n.name for n in plan.nodes)
    lines = [
        f"run {plan.run_id}  (compose project {plan.project_name})",
        f"image {plan.image} + Debian's Slurm and munge (built from it once)  workdir {cfg.workdir} -> {WORKSPACE_DIR}",
        *mount_lines(plan),
        f"cluster: {CONTROLLER} (slurmctld) and {counted(cfg.nodes, 'node')} with slurmd ({names}), partition sim;"
        f" each node: {node_size(plan)}; jobs run as uid:gid {cfg.run_as or '0:0'}",
    ]
    if sbatch is not None:
        lines += [f"job: {sbatch.resolve()}, submitted unchanged: its #SBATCH lines and srun decide the job's"
                  " shape and its ranks", env_line(plan, leave_out=(NODE_NAME_ENV,))]
        return "\n".join(lines + image_and_fault_lines(plan))
    if cfg.elastic:
        lines.append(f"job: {JOB_SCRIPT} below, {counted(cfg.nodes, 'node')} x"
                     f" {counted(cfg.nproc_per_node, 'process', 'processes')}; c10d rendezvous on the allocation's"
                     f" first host, port {RDZV_PORT}, max restarts {cfg.max_restarts} (failed workers: a lost node ends"
                     " the job, Slurm's NODE_FAIL); node and global ranks are decided by the rendezvous")
    else:
        lines.append(f"job: {JOB_SCRIPT} below, {counted(cfg.nodes, 'node')} x"
                     f" {counted(cfg.nproc_per_node, 'process', 'processes')}, world size W={plan.world_size};"
                     f" master: the allocation's first host, port {plan.master_port}; each node's rank is its"
                     " $SLURM_NODEID")
        lines.append("")
        rows = [(n.name, str(n.node_rank), str(local), str(n.global_ranks[local]))
                for n in plan.nodes for local in range(cfg.nprocs_of(n.node_rank))]
        lines += format_table(("node", "node rank", "local rank", "global rank"), rows)
    if cfg.user_env:
        lines.append(f"your variables, through sbatch's environment: {' '.join(sorted(cfg.user_env))}"
                     " (their values are not shown)")
    lines += image_and_fault_lines(plan)
    lines += ["", f"--- {JOB_SCRIPT} ---", render_sbatch(plan, cluster_batch_options(plan)).rstrip("\n")]
    return "\n".join(lines)

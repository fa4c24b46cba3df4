"""The same job for a real cluster (pure): an sbatch script, or Kubernetes manifests.

Slurm: :func:`orchestrate.slurm.script.render_sbatch`, the script the simulated cluster runs,
without the simulation's paths (its output file, torchrun's log directory).

Kubernetes: core objects only, so that the job runs on any cluster without an operator:

- a headless Service (``clusterIP: None``) named like the job, publishing pods before they are
  ready, so that ``<job>-0.<service>`` resolves while the workers start;
- an Indexed Job (``completionMode: Indexed``): pod ``i`` is node ``i``, its hostname
  ``<job>-<i>``, its subdomain the Service; the node rank is the completion index. A static
  job fails with its first failed pod; an elastic one replaces a lost pod as the same index
  (:func:`pod_failure_limits`).

torchrun reads its options from ``PET_*`` variables, the contract Kubeflow's PyTorch runtime
uses too: ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``,
``PET_MASTER_PORT`` (and ``PET_RDZV_*`` for the elastic c10d rendezvous). Optionally a Kubeflow
Trainer ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``) for clusters that run Kubeflow Trainer.
"""
from __future__ import annotations

from typing import Any

from orchestrate.export.options import CONTAINER_WORKDIR, ExportOptions, job_env
from orchestrate.plan.layout import RDZV_PORT
from orchestrate.plan.model import JobPlan

# A TrainJob's command: torchrun in the job's directory, the target its arguments ("$@"; "torchrun" is $0).
IN_WORKDIR = f'cd {CONTAINER_WORKDIR} && exec torchrun "$@"'

COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def _metadata(name: str, options: ExportOptions, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": options.name,
                                                     "app.kubernetes.io/managed-by": "ddp-compose"}}
    if options.namespace:
        meta["namespace"] = options.namespace
    meta.update(extra)
    return meta


def torchrun_env(plan: JobPlan, options: ExportOptions) -> list[dict[str, Any]]:
    """torchrun's options as ``PET_*`` variables (Kubeflow's contract), the rank from the
    completion index."""
    cfg = plan.config
    master = f"{options.name}-0.{options.name}"
    env: list[dict[str, Any]] = [{"name": "PET_NPROC_PER_NODE", "value": str(cfg.nproc_per_node)}]
    if cfg.elastic:
        env += [
            {"name": "PET_NNODES", "value": f"{cfg.min_nodes}:{cfg.max_nodes}"},
            {"name": "PET_RDZV_BACKEND", "value": "c10d"},
            {"name": "PET_RDZV_ENDPOINT", "value": f"{master}:{RDZV_PORT}"},
            {"name": "PET_RDZV_ID", "value": options.name},
            {"name": "PET_RDZV_CONF", "value": f"join_timeout={cfg.rdzv_timeout_s:g}"},
            {"name": "PET_MAX_RESTARTS", "value": str(cfg.max_restarts)},
        ]
    else:
        env += [
            {"name": "PET_NNODES", "value": str(cfg.nodes)},
            {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
            {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_PORT", "value": str(plan.master_port)},
        ]
    return env + [{"name": k, "value": v} for k, v in sorted(job_env(plan).items())]


def node_resources(plan: JobPlan) -> dict[str, Any]:
    cfg = plan.config
    limits: dict[str, Any] = {}
    if cfg.gpus_per_node:
        limits["nvidia.com/gpu"] = cfg.gpus_per_node
    if cfg.cpus_per_node:
        limits["cpu"] = f"{cfg.cpus_per_node:g}"
    if cfg.memory_per_node:
        limits["memory"] = f"{cfg.memory_per_node // 2**20}Mi"
    return {"limits": limits, "requests": dict(limits)} if limits else {}


def pod_failure_limits(plan: JobPlan) -> dict[str, int]:
    """How the Job meets a failed pod. A static world: one node failing fails the job, as a
    failed rank fails torchrun's static world. An elastic one: a failed pod is replaced as the
    same index (the same hostname, so it joins the rendezvous again) up to ``max_restarts``
    times, as the simulation's launcher restarts a dead node, and only once the lost pod has
    terminated; the Job stops once more indexes have failed for good than the job can lose (its
    nodes less ``min_nodes``), and ends Failed if any index failed for good."""
    cfg = plan.config
    if not cfg.elastic:
        return {"backoffLimit": 0}
    # A replacement starts only once the lost pod has gone, never beside it under the same hostname.
    return {"backoffLimitPerIndex": cfg.max_restarts, "maxFailedIndexes": cfg.nodes - cfg.min_nodes,
            "podReplacementPolicy": "Failed"}


def export_kubernetes(plan: JobPlan, options: ExportOptions) -> list[dict[str, Any]]:
    """The headless Service and the Indexed Job; or, where asked, the same job as a TrainJob alone
    (both in one file would train twice, applied together)."""
    cfg = plan.config
    name = options.name
    ports = [{"name": "rendezvous", "port": RDZV_PORT if cfg.elastic else plan.master_port}]
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": _metadata(name, options),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {"batch.kubernetes.io/job-name": name}, "ports": ports},
    }
    container: dict[str, Any] = {
        "name": "node", "image": cfg.image, "workingDir": CONTAINER_WORKDIR,
        "command": ["torchrun"], "args": list(cfg.target), "env": torchrun_env(plan, options),
        "ports": [{"name": "rendezvous", "containerPort": ports[0]["port"]}],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    resources = node_resources(plan)
    if resources:
        container["resources"] = resources
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(name, options),
        "spec": {
            "completionMode": "Indexed", "completions": cfg.nodes, "parallelism": cfg.nodes,
            **pod_failure_limits(plan),
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": name}},
                "spec": {
                    "subdomain": name, "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                },
            },
        },
    }
    if options.trainjob:
        return [trainjob(plan, options, container)]
    return [service, job]


def trainjob(plan: JobPlan, options: ExportOptions, container: dict[str, Any]) -> dict[str, Any]:
    """The same job as a Kubeflow Trainer ``TrainJob``: the runtime sets the ``PET_*``
    variables and the network itself, so only the image, command and sizes go in. A TrainJob's
    trainer has no working directory of its own and the image's may be another, so the command
    enters ``/workspace`` first (a ``-m`` target and a script's relative paths are found there, as
    in the Indexed Job and the simulation's nodes), and a script is named by its path in the image."""
    cfg = plan.config
    target = list(cfg.target)
    if target and target[0] != "-m" and not target[0].startswith("/"):
        target[0] = f"{CONTAINER_WORKDIR}/{target[0]}"
    trainer: dict[str, Any] = {
        "image": cfg.image, "command": ["sh", "-c", IN_WORKDIR, "torchrun", *target], "numNodes": cfg.nodes,
        "numProcPerNode": cfg.nproc_per_node,
        "env": [{"name": k, "value": v} for k, v in sorted(job_env(plan).items())],
    }
    if container.get("resources"):
        trainer["resourcesPerNode"] = container["resources"]
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": _metadata(options.name, options),
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                "name": options.runtime},
                 "trainer": trainer},
    }


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """Objects as one multi-document YAML stream."""
    import yaml

    return "---\n".join(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) for obj in objects)

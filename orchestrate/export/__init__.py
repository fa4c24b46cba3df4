"""``export``: the same job for a real cluster, as an sbatch script or Kubernetes manifests (pure).
May import config, plan and slurm.script."""

"""``export``: the same job for a real cluster, as an sbatch script or Kubernetes manifests (pure).
May import config, plan and slurm.script; its entry point is export.job."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan", "slurm.script")

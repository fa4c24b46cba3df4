"""A real Slurm cluster of simulated nodes, and the sbatch script that runs a plan on any Slurm.

- :mod:`orchestrate.slurm.script` renders the batch script (pure): the same for the simulated
  cluster and for ``export --to slurm``;
- :mod:`orchestrate.slurm.cluster` renders ``slurm.conf`` and the cluster's Compose project
  (pure);
- :mod:`orchestrate.slurm.show` shows a Slurm run's plan (pure);
- :mod:`orchestrate.slurm.backend` renders the cluster, submits with ``sbatch`` and follows
  the job through Slurm's own state (``scontrol``), with the hang watchdog.
"""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan", "engine", "faults", "hangs", "outcome", "supervise", "debugger")

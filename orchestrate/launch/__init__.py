"""The library's product: one object that owns a run's whole life (pre-flight, image, GPU lease,
start, follow, judge, tear down). May import every package below it; never cli."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan", "engine", "faults", "hangs", "outcome", "report", "slurm", "supervise")

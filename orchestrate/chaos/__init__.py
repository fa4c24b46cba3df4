"""``chaos``: does the training survive faults and end where an undisturbed run ends? A seeded
schedule (pure), the comparison of files, the verdict (pure) and the check that runs the two jobs.
May import every package below the CLI."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan", "engine", "outcome", "report", "launch", "node.compare_tensors", "node.params_digest")

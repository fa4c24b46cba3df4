"""Judging a run: the one result model, its root cause, summary, outcome.json and event file.
Never the engine; what it may import is MAY_IMPORT below."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("plan", "hangs", "node.peer_loss", "config.torch_versions", "config.fault_spec")

"""Following a run through the engine: node states, worker lines, logs, progress, restarts.
May import config, plan, engine, faults, hangs, outcome, debugger and the node package's constants; never
launch or cli."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan", "engine", "faults", "hangs", "outcome", "debugger", "node.main")

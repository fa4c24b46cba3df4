"""Faults at run time: doing and undoing them to nodes (inject), to one worker process (ranks)
and to the workers' writes (storage), and firing and ending them at their time or training step (scheduler). Their specs, what a user asks for, are config.fault_spec. May import config,
plan, engine, outcome and the node package's constants and in-node scripts."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan", "engine", "outcome", "node.progress", "node.rank_signal", "node.storage_faults")

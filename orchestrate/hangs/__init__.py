"""Seeing inside a stuck job: the workers' snapshots (stacks, last collectives), ranks grouped by
stack, the first divergence of their collectives, and the hang watchdog's policy; and where a
worker that crashed was. Pure but for reading and requesting snapshots and reading crash dumps
in the run's directory; may import the node package and plan.layout only."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("plan.layout", "node.snapshot", "node.ddp_collectives", "node.fsdp_collectives",
              "node.checkpoint_collectives", "node.crash_stacks", "node.collective_log", "node.shared_writes",
              "node.remote_debugger")

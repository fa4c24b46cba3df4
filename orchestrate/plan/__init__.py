"""The pure plan step: a RunConfig becomes every node's ranks, GPUs, torchrun command and environment.
May import config; never the engine."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config",)

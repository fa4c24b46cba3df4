"""Testing multi-node training from a user's own test suite: the pytest plugin and its fixture.
May import every package below the CLI (it goes through launch, as the CLI does)."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "engine", "outcome", "launch", "chaos")

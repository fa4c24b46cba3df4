"""A run's report page: its model (pure, from the run's files) and its drawing. What it may import is MAY_IMPORT below."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("outcome", "plan.layout")

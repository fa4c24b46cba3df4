"""``python -m orchestrate``: a module per command, each a thin layer over the library (launch).
May import every package."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("*",)  # every package

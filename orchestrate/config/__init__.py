"""What the user asked for, validated (pure): every run option defined once, the request, the run
configuration, GPU layout, environment, link shaping, fault specs and torch versions. Imports nothing
of orchestrate but errors."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ()

"""``bench``: the summaries and plots of the collectives, DDP and launcher benchmarks.
The runs themselves go through the library (launch); what it may import is MAY_IMPORT below."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan.layout", "engine", "report")

"""What runs inside the nodes: the node supervisor, the workers' half of the progress channel, and
the workers' start-up hook with what it installs (the collective record, the snapshots the
launcher asks for). Standard library only (any Python 3.8+), mounted into every node; imports
nothing of orchestrate outside this package."""

# What this package may import of the others: nothing at all, as it runs in the nodes
# by itself; tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ()

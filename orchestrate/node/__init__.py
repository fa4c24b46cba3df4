"""What runs inside the nodes: the node supervisor, the workers' half of the progress channel, and
the workers' start-up hook with what it installs (the collective record, the snapshots the
launcher asks for). Standard library only (any Python 3.8+), mounted into every node; imports
nothing of orchestrate outside this package."""

"""Everything that talks to the Docker engine: the client, containers' logs, Compose rendering and
driving, images, GPUs, runs found by their labels, and the host locks around them. May import
config, plan and the node package's constants (its contract with the nodes)."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("config", "plan", "node.main")

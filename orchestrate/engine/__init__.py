"""Everything that talks to the Docker engine: the client, Compose rendering and driving, images,
GPUs, runs found by their labels, and the host locks around them. May import config, plan and the
node package's constants (its contract with the nodes)."""

"""What runs inside the nodes: the node supervisor and the workers' half of the progress channel.
Standard library only (any Python 3.8+), mounted into every node; imports nothing of orchestrate."""

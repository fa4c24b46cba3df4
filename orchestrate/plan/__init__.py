"""The pure plan step: a RunConfig becomes every node's ranks, GPUs, torchrun command and environment.
May import config; never the engine."""

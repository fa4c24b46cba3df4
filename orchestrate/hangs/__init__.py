"""Seeing inside a stuck job: the workers' snapshots (stacks, last collectives), ranks grouped by
stack, the first divergence of their collectives, and the hang watchdog's policy. Pure but for
reading and requesting snapshots in the run's directory; may import the node package and
plan.layout only."""

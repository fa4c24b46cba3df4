"""Faults at run time: injecting them into nodes (one function per kind) and firing them at their
time or training step. Their specs, what a user asks for, are config.fault_spec. May import config,
plan, engine, outcome and the node package's constants."""

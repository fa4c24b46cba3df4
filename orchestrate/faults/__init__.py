"""Faults: their specs (pure), injecting them into nodes, and scheduling them by time or step.
May import config, plan and engine."""

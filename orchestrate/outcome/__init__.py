"""Judging a run: the one result model, its root cause, summary, outcome.json and event file.
May import plan, config and hangs; never the engine."""

"""Following a run through the engine: node states, worker lines, logs, progress, restarts.
May import config, plan, engine, faults, hangs, outcome and the node package's constants; never launch or cli."""

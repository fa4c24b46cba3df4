"""Following a run through the engine: node states, worker lines, logs, progress, restarts.
May import config, plan, engine, faults and outcome; never launch or cli."""

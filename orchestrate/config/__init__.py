"""What the user asked for, validated (pure, standard library only): the run configuration, GPU
layout, environment, link shaping and torch versions. Imports nothing of orchestrate but errors."""

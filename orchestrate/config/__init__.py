"""What the user asked for, validated (pure): every run option defined once, the request, the run
configuration, GPU layout, environment, link shaping, fault specs and torch versions. Imports nothing
of orchestrate but errors."""

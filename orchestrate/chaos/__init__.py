"""``chaos``: does the training survive faults and end where an undisturbed run ends? A seeded
schedule (pure), the comparison of files, the verdict (pure) and the check that runs the two jobs.
May import every package below the CLI."""

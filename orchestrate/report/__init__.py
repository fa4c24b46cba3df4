"""A run's report page: its model (pure, from the run's files) and its drawing. May import outcome."""

"""Testing multi-node training from a user's own test suite: the pytest plugin and its fixture.
May import every package below the CLI (it goes through launch, as the CLI does)."""

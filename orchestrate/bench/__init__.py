"""``bench``: the summaries and plots of the collectives, DDP and launcher benchmarks.
May import engine, outcome and report; the runs themselves go through the library (launch)."""

"""``python -m orchestrate``: a module per command, each a thin layer over the library (launch).
May import every package."""

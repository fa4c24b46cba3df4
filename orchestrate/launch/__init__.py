"""The library's product: one object that owns a run's whole life (pre-flight, image, GPU lease,
start, follow, judge, tear down). May import every package below it; never cli."""

"""The documents that cross stages: the plan's records, locks' sources, smoke results, probe reports, measured fit, known-good records, versions as values, and the checked JSON readers they share."""

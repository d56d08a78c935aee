"""The use-cases: one module per command that drives the engine or the index (build, test, run,
lock, publish, pull, catalog, report, nightly). Each takes a workspace and typed options, reports
progress to an events object, returns typed results, and never prints; cli.py and ui/ present them.
"""

"""`builder nightly`: updates -> plan -> lock -> build what changed -> test -> publish -> report,
compared with the previous run (compare.py, pure), kept in build/nightly/ (history.py), summed up
as Markdown for a CI job summary (summary.py); usecases/nightly.py runs the stages."""

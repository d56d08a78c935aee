"""All terminal output (rich): plan, build, test and doctor tables, progress. Use-cases never print."""

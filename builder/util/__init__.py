"""Helpers every stage shares: one-line errors, message hygiene, atomic files, YAML with line numbers, the query language."""

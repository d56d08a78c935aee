"""Compatibility facts (data/*.yaml, loaded with guards) and the rules that decide each combination (pure)."""

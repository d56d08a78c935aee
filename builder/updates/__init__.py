"""New framework releases: read the package index (index.py), place each release against the
compatibility rules (releases.py), and add the plannable ones to matrix.yaml (apply.py)."""

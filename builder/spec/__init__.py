"""What to build: matrix.yaml read with line numbers, validated, expanded, selected and planned (pure)."""

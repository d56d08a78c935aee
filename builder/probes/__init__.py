"""Scripts copied alone into images (stdlib only), also importable as modules of the builder."""

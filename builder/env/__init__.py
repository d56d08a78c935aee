"""A team's environment on a known-good record: gpu-env.yaml, its lock on the base's lock, the derived Dockerfile (pure)."""

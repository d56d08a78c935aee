"""The Docker engine edge: the only docker client, builds, bootstrapped bases, pushes, build contexts and settings."""

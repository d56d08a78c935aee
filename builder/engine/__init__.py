"""The Docker engine edge: the only docker client, builds, bootstrapped bases, pushes, build contexts, settings and failure diagnosis."""

"""The engine edge: the engine port (port.py) and its docker adapter (client.py, the only docker import), builds, bootstrapped bases, pushes, build contexts, settings and failure diagnosis."""

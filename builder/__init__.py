"""builder: known-good GPU container images from one matrix.yaml.

Pipeline (one module each): matrix -> expand -> rules -> plan -> render -> build -> smoke -> publish.
"""

__version__ = "0.1.0"

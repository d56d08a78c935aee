"""Plan -> build contexts: Dockerfiles from the jinja2 templates, content hashes, images/ written safely; and the plan's other outputs (plan JSON, GitHub matrix, bake file)."""

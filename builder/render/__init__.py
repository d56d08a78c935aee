"""Plan -> build contexts: Dockerfiles from the jinja2 templates, content hashes, images/ written safely."""

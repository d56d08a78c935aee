"""Lock files: each image's requirements resolved for its target (Python, platform, indexes) into
images/<id>/requirements.lock with every package pinned and hashed; checked offline."""

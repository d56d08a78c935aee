"""The support matrix: what the plan, the smoke results and the catalog say about every image,
as Markdown (docs/support-matrix.md) and a standalone HTML page (build/report/index.html).
Pure: model.py gathers, markdown.py and html.py render; no Docker."""

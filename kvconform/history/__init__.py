"""Conformance history across transformers releases (no torch, no pytest in this package).

``releases`` (which releases: parse ``--releases``) -> ``envs`` (one cached ``--target`` folder per release, the
venv's torch for all) -> ``run`` (the suite under one release, in a subprocess: its ``conformance.json``) ->
``grid`` (the history document: model × release, and per (model, check) the first bad and first fixed release,
classified by ``kvconform.diff``'s rules) -> ``render`` (Markdown, HTML); ``bisect`` drives ``run`` over one cell.
"""

"""Build: matrix specs -> models, and what their configs say each cache layer must hold.

``architecture_table`` (``architectures.yaml``: shrink fixes, exclusions, cache layouts) ->
``synthetic`` (shrunk random-weight configs) and ``checkpoint_files`` (safe local files) -> ``models``
(build or load once, other dtypes via ``from_pretrained(dtype=...)``); ``support`` decides from the
model class which cache and attention paths transformers would run; ``geometry`` reads the expected
per-layer K/V shapes off the config. Nothing here runs a forward pass.
"""

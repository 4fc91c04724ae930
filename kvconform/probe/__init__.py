"""Probe: run a model's cache paths and record what happened as plain data.

``decode`` is the core loop (prefill, N decode steps feeding the cache back, ONE uncached reference)
and its ``ProbeRecord``; each other path has its module: ``variants`` (ragged batch, prefix reuse),
``crop``, ``reorder``, ``generation`` (generate, beam search, left-padded generate), ``attention``
(eager vs sdpa agreement), ``quantized`` and ``fp8_design`` (the fp8 cache and its reference).
On a failure ``reference_health`` (prefix stability, top-k ties) and ``kv_compare`` (K/V
localization) explain it. ``cache_io`` reads and writes caches. Nothing here judges a record.
"""

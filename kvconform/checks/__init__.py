"""Checks: a probe record against what the config and the formula say.

``table`` is the one list of checks (plain data: name, when it applies, report order);
``record_checks`` binds the core and path checks to a ``ProbeRecord`` (``path_checks``: beam,
generate, attention agreement, fp8), ``formula`` is the memory formula. Each check returns a
``CheckResult`` and knows nothing of loading or pytest.
"""

"""kvconform: a regression conformance suite for the KV caches of causal language models.

PYTEST_DONT_REWRITE: this package holds no assertions for pytest to rewrite, and the ``kvconform`` command imports it
before pytest starts (pytest would warn that it is imported already).
"""

__version__ = "0.1.0"

"""Registers the kvconform plugin for every pytest run at the repository root, and pytest's ``pytester``
(the ``pytester`` fixture the self-tests run the suite with, tests/inner.py)."""

pytest_plugins = ["kvconform.plugin", "pytester"]

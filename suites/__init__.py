"""The conformance suites; an installed kvconform ships this folder as ``kvconform.suites`` (setup.py)."""

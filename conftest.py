"""Registers the kvconform plugin for every pytest run at the repository root."""

pytest_plugins = ["kvconform.plugin"]

"""kvconform: a regression conformance suite for the KV caches of causal language models."""

__version__ = "0.1.0"

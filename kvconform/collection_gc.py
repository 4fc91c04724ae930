"""Python's garbage collector paused while a test-running process collects the matrix; a worker then freezes its heap.

Collecting the matrix imports torch and transformers (millions of objects) and builds some 11,500 test items; every
full collection the new items set off walks all of it again, and in an xdist worker so does every full collection the
cells set off later and the collections at its exit (docs/performance.md). Nothing collection builds is garbage while
the run lasts, so a worker, whose process ends with its run, takes it out of every later collection
(``gc.freeze()``). A run without xdist only pauses the collector: it may run inside another process (pytester's
in-process runs of the self-tests) whose heap it must not freeze.
"""

from __future__ import annotations

import gc
from collections.abc import Generator

import pytest


class CollectionGc:
    """Registered in a process that runs tests: an xdist worker (``worker``), or a run without xdist."""

    def __init__(self, worker: bool) -> None:
        self.worker = worker
        if worker:  # paused from here: a worker's torch import comes before its collection
            gc.disable()

    @pytest.hookimpl(wrapper=True)
    def pytest_collection(self, session: pytest.Session) -> Generator[None, object, object]:
        gc.disable()
        try:
            return (yield)
        finally:
            gc.enable()
            if self.worker:
                gc.freeze()

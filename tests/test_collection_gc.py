"""The collector paused through collection; a worker's collected heap frozen after it, a nested run's left alone."""

from __future__ import annotations

import gc

import pytest

from kvconform.collection_gc import CollectionGc


@pytest.fixture
def restored_gc():
    gc.unfreeze()  # the process running these tests may have frozen its own collection
    yield
    gc.enable()
    gc.unfreeze()


def _collect(plugin: CollectionGc, fails: bool = False) -> None:
    wrapper = plugin.pytest_collection(session=None)  # type: ignore[arg-type]
    next(wrapper)
    assert not gc.isenabled(), "the collector runs during collection"
    with pytest.raises(RuntimeError if fails else StopIteration):
        wrapper.throw(RuntimeError("collection failed")) if fails else wrapper.send(None)


def test_a_worker_pauses_the_collector_from_its_configure_and_freezes_what_it_collected(restored_gc):
    plugin = CollectionGc(worker=True)
    assert not gc.isenabled(), "a worker's torch import (before its collection) ran the collector"
    _collect(plugin)
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_a_run_without_xdist_only_pauses_the_collector(restored_gc):
    plugin = CollectionGc(worker=False)
    assert gc.isenabled()
    _collect(plugin)
    assert gc.isenabled() and gc.get_freeze_count() == 0, "a run that may be nested froze its host's heap"


def test_a_failed_collection_turns_the_collector_back_on(restored_gc):
    _collect(CollectionGc(worker=True), fails=True)
    assert gc.isenabled()

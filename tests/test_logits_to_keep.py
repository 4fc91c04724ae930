"""The probe computes logits only at the positions its checks read (``logits_to_keep``), with the same verdicts."""

from __future__ import annotations

import pytest
import torch

import kvconform.probe
from kvconform.probe.cache_io import keep_logits
from kvconform.probe.decode import ProbePlan, ProbeRecord, run_probe
from tests.conftest import TOLERANCES

PLAN = ProbePlan(batch_size=2, prompt_length=6, decode_steps=8, seed=0, generate=False, ragged=True, prefix_reuse=True,
                 crop=True, reorder=True, locate_tolerance=TOLERANCES["float32"])


def _probe_counting_positions(model: torch.nn.Module, plan: ProbePlan) -> tuple[ProbeRecord, list[int]]:
    """The record and, per forward, how many positions reached the output head."""
    positions: list[int] = []
    handle = model.lm_head.register_forward_hook(lambda _m, args, _o: positions.append(args[0].shape[-2]))
    try:
        return run_probe(model, plan), positions
    finally:
        handle.remove()


def _without_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    """As for a model whose forward takes no ``logits_to_keep``: every position's logits."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(kvconform.probe.__path__):  # every probe module that imported it
        module = importlib.import_module(f"kvconform.probe.{info.name}")
        if hasattr(module, "keep_logits"):
            monkeypatch.setattr(module, "keep_logits", lambda _model, _count: {})


def test_only_the_read_positions_reach_the_head(llama):
    _, positions = _probe_counting_positions(llama, PLAN)
    assert max(positions) == PLAN.decode_steps + 1, positions  # the uncached reference: positions P-1 … P+N-1
    assert positions.count(PLAN.decode_steps + 1) == 1 + PLAN.batch_size  # the main reference, ragged's per-row ones


def test_verdict_inputs_equal_with_and_without_logits_to_keep(llama, monkeypatch):
    kept, _ = _probe_counting_positions(llama, PLAN)
    _without_keep(monkeypatch)
    full, positions = _probe_counting_positions(llama, PLAN)
    assert max(positions) == PLAN.prompt_length + PLAN.decode_steps
    assert [s.cached_argmax for s in kept.steps] == [s.cached_argmax for s in full.steps]
    assert [s.reference_argmax for s in kept.steps] == [s.reference_argmax for s in full.steps]
    for ours, theirs in zip(kept.steps, full.steps, strict=True):
        assert ours.max_abs_delta == pytest.approx(theirs.max_abs_delta, abs=1e-6)
    assert kept.logit_scale == pytest.approx(full.logit_scale, rel=1e-6)
    for name, path in kept.paths.items():
        assert path.error is None and path.not_applicable is None, (name, path.error, path.not_applicable)
        assert path.step_max_abs_delta == pytest.approx(full.paths[name].step_max_abs_delta, abs=1e-6), name
    assert kept.kv_parity is not None and full.kv_parity is not None
    assert kept.kv_parity.worst is not None and full.kv_parity.worst is not None
    assert kept.kv_parity.worst.ratio == pytest.approx(full.kv_parity.worst.ratio, abs=1e-6)


def test_a_model_without_the_keyword_gets_none():
    class Plain(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return input_ids

    assert keep_logits(Plain(), 3) == {}

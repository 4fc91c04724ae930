"""A random build's zero pad row: the ragged path's pads are not it (``build.synthetic.padding_rows_drawn``), and the
greedy decode never feeds it (``probe.cache_io.zero_pad_ids``)."""

from __future__ import annotations

import pytest
import torch

from kvconform.build.synthetic import padding_rows_drawn
from kvconform.probe.decode import ProbePlan, run_probe
from tests.conftest import TOLERANCES, tiny

PAD = 5


def test_zero_pad_rows_hold_seeded_noise_meanwhile_and_come_back() -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(8, 4, padding_idx=0), torch.nn.Embedding(8, 4))
    model[1].weight.data[3] = 0  # a zero row that is no padding_idx is left alone
    with padding_rows_drawn(model, seed=0) as drawn:
        first = model[0].weight[0].clone()
        assert drawn == 1 and first.abs().min() > 0 and not model[1].weight[3].any()
    assert not model[0].weight[0].any()
    with padding_rows_drawn(model, seed=0):
        assert torch.equal(model[0].weight[0], first)  # seeded


def test_a_trained_non_zero_pad_row_is_not_touched() -> None:
    model = torch.nn.Embedding(8, 4, padding_idx=1)
    model.weight.data[1] = 0.5
    with padding_rows_drawn(model, seed=0) as drawn:
        assert drawn == 0 and torch.equal(model.weight[1], torch.full((4,), 0.5))


def _decode_feeds(model: torch.nn.Module) -> list[int]:
    """The one-token inputs of a probe whose head always prefers ``PAD`` (by +100 on its logit)."""
    fed: list[int] = []
    hooks = [model.lm_head.register_forward_hook(lambda _m, _a, out: out.index_add(-1, torch.tensor([PAD]), torch.full((*out.shape[:-1], 1), 100.0))),
             model.get_input_embeddings().register_forward_pre_hook(lambda _m, args: fed.extend(args[0].flatten().tolist()) if args[0].shape[-1] == 1 else None)]
    try:
        record = run_probe(model, ProbePlan(batch_size=2, prompt_length=6, decode_steps=4, seed=0, generate=False, locate_tolerance=TOLERANCES["float32"]))
    finally:
        for hook in hooks:
            hook.remove()
    assert max(step.max_abs_delta for step in record.steps) < 1e-4
    return fed


@pytest.mark.parametrize("trained_pad_row", [False, True])
def test_the_decode_never_feeds_a_zero_pad_row(trained_pad_row: bool) -> None:
    model = tiny("llama", pad_token_id=PAD)
    assert not model.get_input_embeddings().weight[PAD].any()  # as _init_weights leaves it
    if trained_pad_row:
        with torch.no_grad():
            model.get_input_embeddings().weight[PAD] = 0.02
    fed = _decode_feeds(model)
    assert len(fed) == 2 * 4 and (PAD in fed) == trained_pad_row, fed  # a non-zero pad row is fed as any token is

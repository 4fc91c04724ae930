"""build.synthetic.padding_rows_drawn: the ragged path's pads are not the zero row a random build leaves."""

from __future__ import annotations

import torch

from kvconform.build.synthetic import padding_rows_drawn


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

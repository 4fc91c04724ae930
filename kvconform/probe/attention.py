"""Eager and sdpa attention must agree: the uncached logits of one sequence under both, in float32."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.probe.cache_io import input_device, make_prompt


@dataclass
class AgreementRecord:
    """Max |Δlogit| per position between two attention implementations' uncached passes."""

    implementations: tuple[str, str]
    position_max_abs_delta: list[float]
    worst_position: int
    worst_row: int
    logit_scale: float
    not_applicable: str | None = None
    """Why nothing was compared: both runs use the same implementation (a check that could not fail)."""


@torch.inference_mode()
def run_agreement(model: Model, other: Model, plan: Any) -> AgreementRecord:
    """One uncached pass of ``model`` and of ``other`` (same weights, another attention) over P+N seeded tokens."""
    implementations = (model.config._attn_implementation, other.config._attn_implementation)
    if implementations[0] == implementations[1]:
        reason = (f"the model's default attention is {implementations[1]} itself (as loaded), so this cell is its default "
                  "path and there is no other implementation to compare with")
        return AgreementRecord(implementations, [], 0, 0, 0.0, not_applicable=reason)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    ids = make_prompt(plan.batch_size, plan.prompt_length + plan.decode_steps, plan.seed, vocab, input_device(model))
    logits = model(input_ids=ids, use_cache=False).logits.float()
    reference = other(input_ids=ids, use_cache=False).logits.float()
    delta = torch.nan_to_num((logits - reference).abs(), nan=float("inf")).amax(dim=-1)  # [B, S]
    per_position = delta.amax(dim=0)
    worst = int(per_position.argmax())
    return AgreementRecord(
        implementations=implementations,
        position_max_abs_delta=per_position.tolist(), worst_position=worst, worst_row=int(delta[:, worst].argmax()),
        logit_scale=float(torch.nan_to_num(reference).abs().max()),
    )

"""Selections decided by rounding (router and indexer near-ties) are shown to be the whole difference, or not."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kvconform.build.models import model_in_dtype
from kvconform.probe.selections import NEAR_TIE_STEPS, recording, replaying
from tests.conftest import probe_and_check, tiny
from tests.faults import patched, planted


@contextmanager
def _tied_router_rounded_differently_when_cached(model: torch.nn.Module) -> Iterator[None]:
    """qwen2_moe, top-1, whose layer-1 router ties two experts at the top for every token (gate rows 1 = 2 = w,
    0 = 3 = -w), and whose cached forwards round expert 2's logit one float step up: the difference between a
    1-token and a 14-token matmul, planted."""
    router = model.model.layers[1].mlp.gate
    with torch.no_grad():
        w = 4 * router.weight[1].clone()
        router.weight.copy_(torch.stack([-w, w, w, -w]))
    original = type(router).forward
    cached: list[bool] = [False]

    def forward(self: Any, hidden_states: torch.Tensor) -> Any:
        if self is not router:
            return original(self, hidden_states)
        logits = F.linear(hidden_states.reshape(-1, self.hidden_dim), self.weight)
        if cached[0]:
            logits[:, 2] = torch.nextafter(logits[:, 2], torch.tensor(float("inf")))
        probs = torch.softmax(logits, dtype=torch.float, dim=-1)
        values, indices = torch.topk(probs, self.top_k, dim=-1)
        return logits, values.to(logits.dtype), indices

    model_forward = type(model).forward

    @functools.wraps(model_forward)
    def flagged(self: Any, *args: Any, **kwargs: Any) -> Any:
        cached[0] = bool(kwargs.get("use_cache", True))
        return model_forward(self, *args, **kwargs)

    with patched([(type(router), "forward", forward), (type(model), "forward", flagged)]):
        yield


def test_a_router_near_tie_is_replayed_and_not_blamed_on_the_cache() -> None:
    """Cached steps pick the other of two tied experts: a large logit difference that the replay of the uncached
    pass's choices shows to be the whole difference, so parity passes, with that evidence."""
    model = tiny("qwen2_moe", num_experts_per_tok=1)
    with _tied_router_rounded_differently_when_cached(model):
        parity = probe_and_check(model, dtype="float32")["parity"]
    assert max(parity.details["step_max_abs_delta"]) > parity.details["tolerance"], "the planted tie did not flip"
    assert parity.passed, parity.message
    assert parity.message.startswith("[near-tie selections] not a cache fault"), parity.message
    replay = parity.details["selection_replay"]
    assert replay["error"] is None and replay["flips"]
    assert {flip["module"] for flip in replay["flips"]} == {"model.layers.1.mlp.gate"}
    assert all(max(flip["margin"], flip["score_delta"]) <= NEAR_TIE_STEPS * max(flip["noise"], flip["rounding_step"])
               for flip in replay["flips"])
    assert max(replay["replayed_step_max_abs_delta"]) <= parity.details["tolerance"]


def test_replaying_forces_the_recorded_selections() -> None:
    """Recording a pass and replaying it into a forward with a different router gives the recorded experts."""
    model = model_in_dtype(tiny("qwen2_moe"), "float32", "cpu")
    ids = torch.randint(3, 200, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), recording(model) as recorded:
        model(input_ids=ids, use_cache=False)
    routers = {key: call for key, call in recorded[0].calls.items() if key[0].endswith("mlp.gate")}
    assert routers, "qwen2_moe's router no longer selects with torch.topk"
    gate = model.model.layers[1].mlp.gate.weight
    saved = gate.detach().clone()
    try:
        with torch.no_grad():
            gate.copy_(-saved)  # a router that would now pick the least likely experts
        with torch.inference_mode(), replaying(model, recorded, torch.float32) as flips:
            model(input_ids=ids, use_cache=True)
    finally:
        with torch.no_grad():
            gate.copy_(saved)
    assert flips and all(flip.module == "model.layers.1.mlp.gate" for flip in flips)
    assert not all(flip.by_rounding for flip in flips), "a negated router's flips are not near-ties"


@pytest.mark.parametrize("fault", ["stale_column", "write_late"])
def test_a_cache_fault_in_a_moe_model_is_still_a_cache_fault(fault: str) -> None:
    """The replay forces the selections, not the K/V: a planted fault keeps its verdict and its location."""
    with planted(fault):
        parity = probe_and_check(tiny("qwen2_moe"), dtype="bfloat16")["parity"]
    assert not parity.passed
    assert parity.details["diagnosis"] == "cache fault"
    assert parity.message.startswith("[cache fault]") and "first K/V divergence" in parity.message
    replay = parity.details["selection_replay"]
    assert max(replay["replayed_step_max_abs_delta"]) > parity.details["tolerance"]

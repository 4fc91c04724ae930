"""The suite blames a cache only when the model, built and loaded as users do, has a sound uncached reference."""

from __future__ import annotations

import pytest
import torch

from kvconform.build.geometry import cache_geometry
from kvconform.build.models import model_in_dtype
from kvconform.probe.cache_io import compute_dtype
from tests.conftest import labelled, probe_and_check, tiny


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_keeps_the_modules_the_model_keeps_in_float32(dtype) -> None:
    """inkling2's router is float32 by design (_keep_in_fp32_modules_strict); a plain .to(dtype) made it crash."""
    master = tiny("inkling2_text")
    kept = type(master)._keep_in_fp32_modules_strict
    assert kept, "inkling2_text no longer declares float32 modules: pick another model for this test"
    model = model_in_dtype(master, dtype, "cpu")
    dtypes = {name: param.dtype for name, param in model.named_parameters()}
    in_float32 = {name for name, d in dtypes.items() if d == torch.float32}
    assert in_float32 and all(any(k in name for k in kept) for name in in_float32), sorted(in_float32)
    assert {d for name, d in dtypes.items() if name not in in_float32} == {getattr(torch, dtype)}
    for name, param in model.named_parameters():  # the same weights, rounded to the dtype
        assert torch.equal(param, dict(master.named_parameters())[name].to(param.dtype)), name
    results = probe_and_check(master, dtype=dtype)
    assert all(r.passed for r in results.values()), {n: r.message for n, r in results.items() if not r.passed}


def test_the_compute_dtype_skips_embeddings_the_model_keeps_in_float32() -> None:
    """Ergo (5.25) keeps embed_tokens and its residual stream in float32 (_keep_in_fp32_modules_strict) and computes its
    attention, so its K/V, in the loaded dtype: the embeddings' dtype called the float16 model float32 (shapes, bytes)."""
    model = model_in_dtype(tiny("llama"), "float16", "cpu")
    assert compute_dtype(model) == torch.float16
    model.model.embed_tokens.float()
    assert compute_dtype(model) == torch.float32  # embeddings not declared kept: they are what the model computes in
    model._keep_in_fp32_modules_strict = {"embed_tokens", "q_proj"}
    model.model.layers[0].self_attn.q_proj.float()  # the next parameter in order, declared kept too: skipped
    assert compute_dtype(model) == torch.float16


def test_float32_is_the_master_itself() -> None:
    master = tiny("llama")
    assert model_in_dtype(master, "float32", "cpu") is master


def test_zero_initialised_weights_get_seeded_noise() -> None:
    """doge's A starts at exactly 0, which made every dt_state 1 and its top-k key selection a tie."""
    first, second = tiny("doge"), tiny("doge")
    a = first.model.layers[0].self_attn.A
    assert a.abs().min() > 0
    assert torch.equal(a, second.model.layers[0].self_attn.A)


def test_a_model_that_is_not_prefix_stable_is_not_called_a_cache_fault() -> None:
    """doge with a keep-window of 4: repeated tokens tie in its top-k key selection (see architectures.yaml)."""
    parity = probe_and_check(tiny("doge", keep_window_size=4))["parity"]
    assert not parity.passed
    assert parity.details["diagnosis"] in ("top-k ties", "not prefix-stable")
    assert "not a cache fault" in parity.message and "first K/V divergence" not in parity.message
    assert "the uncached forward is not prefix-stable: logits at position 10 change by" in parity.message


def test_exact_top_k_ties_are_reported_as_such() -> None:
    """glm_moe_dsa as the suite used to shrink it: 4 indexer heads whose 16 dims are all rotary (no content part),
    so whole rows of ReLU indexer scores are exactly 0."""
    parity = probe_and_check(tiny("glm_moe_dsa", index_n_heads=4, index_head_dim=16))["parity"]
    assert not parity.passed
    assert parity.details["diagnosis"] == "top-k ties"
    assert "top-k selections choose between exactly equal scores" in parity.message


@pytest.mark.parametrize("model_type", ["glm_moe_dsa", "dots3_note_text", "doge"])
def test_selection_models_pass_as_shrunk(model_type) -> None:
    results = probe_and_check(tiny(model_type), paths=True)
    assert all(r.passed for r in results.values()), {n: r.message for n, r in results.items() if not r.passed}


def test_recurrent_state_kept_outside_the_returned_output_is_fed_back_in_every_path() -> None:
    """recurrent_gemma returns no cache object: ragged and prefix reuse must keep an explicit one. The ragged check
    passes, or fails only as the default matrix labels it for the installed release (get_seq_length() 0 on 5.18-5.23
    and 5.25); where that label is about the length alone (5.25), the rows' logits still follow the reference."""
    results = probe_and_check(tiny("recurrent_gemma"), paths=True)
    ragged = results["ragged"]
    known = labelled("recurrent_gemma", ragged)
    assert ragged.passed or known is not None, ragged.message
    if known is None or "cached logits" not in known.expect:
        assert ragged.figure is not None and ragged.figure.unit == "logit", ragged.message
        assert ragged.figure.measured <= ragged.figure.limit, ragged.message


def test_loop_copies_of_recurrent_layers_come_after_the_model_layers() -> None:
    """DoryModel.forward appends the per-loop cache copies after its own layers."""
    geometry = cache_geometry(tiny("dory").config)
    kinds = [layer.kind for layer in geometry.layers]
    config = tiny("dory").config
    own = int(config.num_hidden_layers)
    assert kinds[:own] == ["sliding" if t == "sliding_attention" else "full" for t in config.layer_types]
    assert all("loop copy of layer" in layer.reason for layer in geometry.layers[own:])
    results = probe_and_check(tiny("dory"))
    assert results["growth"].passed and results["shapes"].passed, results["shapes"].message


def test_sliding_layers_read_their_own_kv_head_count() -> None:
    """inkling's sliding layers use swa_num_key_value_heads; a checkpoint where it differs must not be a false alarm."""
    model = tiny("inkling_text", swa_num_key_value_heads=1)
    heads = {layer.kind: layer.kv_heads for layer in cache_geometry(model.config).layers if layer.keeps_kv}
    assert heads == {"sliding": 1, "full": 2}
    results = probe_and_check(model)
    assert results["shapes"].passed and results["bytes"].passed, results["shapes"].message


def test_a_layout_the_code_hard_codes_is_declared_with_its_source() -> None:
    """mimo_v2_flash doubles the KV heads of sliding layers in its code, not its config."""
    model = tiny("mimo_v2_flash")
    heads = {layer.kind: layer.kv_heads for layer in cache_geometry(model.config).layers if layer.keeps_kv}
    assert heads["sliding"] == 2 * model.config.num_key_value_heads
    results = probe_and_check(model)
    assert results["shapes"].passed and results["bytes"].passed, results["shapes"].message

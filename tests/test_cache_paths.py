"""The cache paths users run: static (and static sliding-window), quantized, eager attention, crop, beam
search and left-padded generate(). Healthy tiny models pass in every dtype; a planted fault in each
path fails that path's check with a located message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kvconform.cells import Cell
from kvconform.checks import record_checks as checks
from kvconform.matrix import INT_QUANTIZED, QUANTIZED_KINDS, ModelSpec, Settings
from kvconform.results import CheckResult
from kvconform.runner import CellRunner
from tests.conftest import TOLERANCES, tiny
from tests.faults import planted
from tests.schema import undocumented_details

DTYPES = ("float32", "float16", "bfloat16")


def _spec(model_type: str, **config: object) -> ModelSpec:
    settings = Settings(
        dtypes=DTYPES, devices=("cpu",), caches=("dynamic", "static", *QUANTIZED_KINDS), attentions=("sdpa", "eager"),
        tolerances=TOLERANCES, generate=True, ragged=True, prefix_reuse=True, chunked_prefill=True,
        crop=True, beam=True, padded_generate=True, window_crossings=True, assisted=True,
    )
    return ModelSpec(id=model_type, source="synthetic", location=model_type, settings=settings, config=config)


LLAMA = _spec("llama")
MISTRAL = _spec("mistral", sliding_window=4)


@pytest.fixture(scope="module")
def runner() -> CellRunner:
    return CellRunner()


def run_checks(runner: CellRunner, spec: ModelSpec, dtype: str = "float32", cache: str = "dynamic",
               attn: str = "sdpa") -> dict[str, CheckResult]:
    """Probe one cell afresh (faults are planted around this call) and run every check that applies."""
    cell = Cell(spec, dtype, "cpu", cache, attn)
    runner.outcomes.pop(cell.id, None)
    outcome = runner.outcome(cell)
    assert outcome.error is None, outcome.error
    assert outcome.not_applicable is None, outcome.not_applicable
    record, tolerance = outcome.record, cell.tolerance
    results = checks.run_all(record, outcome.geometry, outcome.explanation, tolerance)
    if results["generate"].measured == "not run":
        del results["generate"]
    return results


def _failed(results: dict[str, CheckResult]) -> dict[str, str]:
    return {name: r.message for name, r in results.items() if not r.passed}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("spec", "cache", "attn"), [
    (LLAMA, "static", "sdpa"), (MISTRAL, "static", "sdpa"), (LLAMA, "quantized", "sdpa"),
    (LLAMA, "dynamic", "eager"), (MISTRAL, "static", "eager"), (LLAMA, "quanto-int4", "sdpa"), (LLAMA, "hqq-int2", "sdpa"),
], ids=["llama-static", "mistral-static-sliding", "llama-quantized", "llama-eager", "mistral-static-eager", "llama-quanto-int4",
        "llama-hqq-int2"])
def test_healthy_models_pass_every_path(runner, spec, cache, attn, dtype):
    results = run_checks(runner, spec, dtype, cache, attn)
    assert not _failed(results), _failed(results)
    assert undocumented_details(results.values()) == []  # the report's schema documents every field (quanto/HQQ's too)
    full_precision = cache not in QUANTIZED_KINDS
    if dtype == "float32":
        beam = ({"beam"} if attn == "sdpa" else set()) if cache == "dynamic" else {"reorder"}
        reuse_paths = {"generate", "padded_generate"} if attn == "sdpa" and full_precision else set()
        expected = ({"kv_parity"} if full_precision else {"quantized_kv"}) | beam | reuse_paths
        expected |= {"attn_agreement"} if attn == "eager" and cache == "dynamic" else set()
        assert expected <= set(results), sorted(results)
        # The reuse paths run with the model's own attention only (checks/table.py).
        assert attn == "sdpa" or not {"generate", "padded_generate"} & set(results), sorted(results)
    if full_precision and spec is LLAMA and attn == "sdpa":
        assert "crop" in results, "a dynamic or full-attention static cache is croppable"


def test_static_sliding_layer_is_decoded_past_its_window(runner):
    results = run_checks(runner, MISTRAL, cache="static")
    layers = {state.layer_class for step in runner.outcomes["mistral[float32-cpu-static]"].record.steps for state in step.layers}
    assert layers == {"StaticSlidingWindowLayer"}
    assert results["growth"].passed and "6→7→" in results["growth"].measured


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_windows_are_crossed_from_a_shorter_and_an_equal_prompt(runner, cache):
    """Mistral's window of 4: prompts of 2 and 4 tokens (the main decode's 6 is the longer one) decoded 3 tokens past
    it, every step checked; a model without windowed layers has no crossing to run."""
    window = run_checks(runner, MISTRAL, cache=cache)["window"]
    assert window.passed and window.message.startswith("prompts [2, 4] against windows [4], each decoded to 7 tokens"), window.message
    record = runner.outcomes[f"mistral[float32-cpu-{cache}]"].record.window
    assert [c.seq_lengths for c in record.crossings] == [[2, 3, 4, 5, 6, 7], [4, 5, 6, 7]]
    stored = [step[0].keys_shape[-2] for step in record.crossings[0].layers]
    assert stored == ([2, 3, 3, 3, 3, 3] if cache == "dynamic" else [4] * 6), stored
    assert "window" not in run_checks(runner, LLAMA, cache=cache)
    assert runner.outcomes[f"llama[float32-cpu-{cache}]"].record.window.not_applicable == (
        "the model has no sliding-window or chunked-attention layers")


def test_assisted_decoding_returns_greedys_tokens_across_the_window(runner):
    """The model as its own assistant (its last burst capped at max_length), a random assistant (most drafts rejected)
    and prompt lookup return greedy's tokens; on Mistral the 2-token prompt is shorter than the window of 4 and the
    bursts run past it. Static cells do not run it (docs/cache-paths.md), eager cells on windowed models only."""
    from kvconform.cells import check_applies
    from kvconform.probe.assisted import NO_WINDOW

    for spec, new in ((LLAMA, 6), (MISTRAL, 10)):
        result = run_checks(runner, spec)["assisted"]
        assert result.passed, result.message
        assert undocumented_details([result]) == []
        record = runner.outcomes[f"{spec.id}[float32-cpu-dynamic]"].record.extras["assisted"]
        assert record.max_new_tokens == new and len(record.prompt) == (6 if spec is LLAMA else 2)
        runs = {run.drafter: run for run in record.runs}
        assert runs.keys() == {"self", "random", "prompt_lookup"}
        assert all(run.tokens == record.greedy_tokens for run in runs.values())
        assert sum(runs["self"].rejected) == 0 and runs["self"].forwards[-1].tokens < 4  # accepted, then capped
        assert sum(runs["random"].rejected) > 0 and all(f.cached == f.start for run in runs.values() for f in run.forwards)
    assert "(the last burst capped at max_length)" in result.message and "past windows [4]" in result.message
    assert not check_applies("assisted", Cell(LLAMA, "float32", "cpu", "static"))
    assert runner.outcome(Cell(LLAMA, "float32", "cpu", "dynamic", "eager")).record.extras["assisted"].not_applicable == NO_WINDOW
    eager = run_checks(runner, MISTRAL, attn="eager")["assisted"]
    assert eager.passed and "random: 10 forwards" in eager.message and "self:" not in eager.message, eager.message


def test_quantized_cells_are_judged_against_the_fp8_design(runner):
    results = run_checks(runner, LLAMA, cache="quantized")
    record = runner.outcomes["llama[float32-cpu-quantized]"].record
    assert record.reference == "the fp8 design reference" and "the fp8 design reference" in results["parity"].message
    # The design itself leaves full precision by far more than the float32 limit: that is a finding, not the verdict.
    assert record.full_precision_delta > 100 * float(results["parity"].limit), results["parity"].message
    assert results["quantized_kv"].passed and "saturation (by design, not a fault)" in results["quantized_kv"].message


def test_integer_quantized_cells_flush_their_residual_during_the_decode(runner):
    """residual_length 3 over 8 decode steps: flushed at steps 3 and 6, so the decode ends with 2 residual tokens, and
    the bytes follow the design's split (packed bits, a scale and a zero point per group, the residual)."""
    results = run_checks(runner, LLAMA, cache="hqq-int4")
    record = runner.outcomes["llama[float32-cpu-hqq-int4]"].record
    assert record.quant_config == {"backend": "hqq", "nbits": 4, "residual_length": 3, "q_group_size": 16,
                                   "axis_key": 0, "axis_value": 0}
    assert "the hqq int4 design reference" in results["parity"].message, results["parity"].message
    assert "12 tokens quantized, 2 in the full-precision residual" in results["quantized_kv"].message
    residual = [step.layers[0].residual_bytes for step in record.steps]
    assert [b // residual[1] if residual[1] else 0 for b in residual] == [0, 1, 2, 0, 1, 2, 0, 1, 2], residual
    assert "numel × 4/8 packed bytes + a float32 scale and zero point per group of 16" in results["bytes"].message


def test_a_missing_backend_skips_its_cells_naming_the_pip_command(monkeypatch):
    import importlib.util

    from kvconform.cells import untestable

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hqq" else real(name, *a))
    reason = untestable("parity", Cell(LLAMA, "float32", "cpu", "hqq-int2"))
    assert reason is not None and "QuantizedCache(backend='hqq') needs hqq, which is not installed" in reason, reason
    assert 'pip install "kvconform[quantized]"' in reason
    assert untestable("parity", Cell(LLAMA, "float32", "cpu", "quanto-int2")) is None


def test_quantized_bytes_describe_fp8_values_and_scales(runner):
    result = run_checks(runner, LLAMA, cache="quantized")["bytes"]
    # 2 layers × (16 + 16) × 2 KV heads × 14 tokens × batch 2 × 1 byte + 2 layers × 2 float32 scales
    assert result.passed and result.measured == f"{2 * 32 * 2 * 14 * 2 + 2 * 2 * 4:,} B", result.message
    assert "float8_e4m3fn values, + 2 float32 scales" in result.message and "residual: 0 B" in result.message


def test_crop_is_not_applicable_past_a_static_window(runner):
    cell = Cell(MISTRAL, "float32", "cpu", "static")
    runner.outcomes.pop(cell.id, None)
    crop = runner.outcome(cell).record.paths["crop"]
    assert crop.not_applicable and "not croppable" in crop.not_applicable and "StaticSlidingWindowLayer" in crop.not_applicable


def test_a_prefill_split_that_follows_the_static_cache_names_it(runner):
    """gpt_neo's eager local attention with a StaticCache (a model bug, model_matrix.yaml): the cached prefill already
    differs, while a prefill into a plain DynamicCache agrees, so the diagnosis names the cell's cache class and
    blames no cache read."""
    parity = run_checks(runner, _spec("gpt_neo"), "float32", "static", "eager")["parity"]
    assert not parity.passed and parity.details["diagnosis"] == "prefill differs", parity.message
    found = re.search(r"before any cache entry was read, so this is not a cache-read fault: a prefill into an empty plain "
                      r"DynamicCache agrees \(\|Δ\| ([^)]+)\), so the prefill changes with the cell's StaticCache", parity.message)
    # The plain prefill's distance is rounding (0 on one CPU, 2e-06 on another): within the cell's limit.
    assert found and float(found.group(1)) <= parity.figure.limit, parity.message


def test_beam_is_not_applicable_where_the_models_generate_refuses_it_and_musicgen_generate_runs(runner):
    """musicgen_melody's own generate() does greedy search and sampling only (modeling_musicgen_melody.py:1071): the
    beam check is not applicable in its words. With the published decoder_start_token_id its greedy generate() and
    left-padded generate() agree with and without the cache."""
    cell = Cell(_spec("musicgen_melody"), "float32", "cpu", "dynamic")
    runner.outcomes.pop(cell.id, None)
    outcome = runner.outcome(cell)
    beam = outcome.record.extras["beam"]
    assert beam.not_applicable and "should be one of greedy or sampling" in beam.not_applicable, beam
    results = checks.run_all(outcome.record, outcome.geometry, outcome.explanation, cell.tolerance)
    assert results["generate"].passed and results["padded_generate"].passed, _failed(results)


#: fault -> (spec, cache, attn, check whose message locates it, words that message must contain, every check that fails)
PATH_FAULTS = {
    "beam_not_reordered": (LLAMA, "dynamic", "sdpa", "beam", "suspect the cache reorder between steps", {"beam"}),
    # Assisted decoding crops too: the random assistant's rejected drafts leave one column each.
    "crop_one_short": (LLAMA, "dynamic", "sdpa", "crop", "get_seq_length() trace [7, 8,", {"crop", "assisted"}),
    # Only assisted decoding crops after a multi-token forward over a filled cache (its draft verification).
    "crop_skips_verified_drafts": (LLAMA, "dynamic", "sdpa", "assisted",
                                   "computed by main-model forward 2 (at position 7, 1 token + 3 drafts; 3 drafts rejected "
                                   "before it; the cache holds 10 tokens before it where the sequence holds 7: the crop "
                                   "before it left +3 columns)", {"assisted"}),
    # Only the assistant's own cache is cropped wrong (the main model verifies every draft: its tokens and logits stay
    # greedy's); the model as its own assistant has no rejected drafts to crop.
    "assistant_crop_counted_from_its_cache": (LLAMA, "dynamic", "sdpa", "assisted",
                                              "a random assistant of the same architecture: the assistant's cache leaves "
                                              "the sequence it drafts over: its generate() call 1 (of 5) was handed a "
                                              "7-token sequence over a cache of 7 tokens", {"assisted"}),
    # The assistant's cache at the right length with a stale draft's K/V in a kept slot: nothing but its own K/V shows it.
    "assistant_crop_keeps_a_rejected_draft": (LLAMA, "dynamic", "sdpa", "assisted",
                                              "a random assistant of the same architecture: the assistant's cache after its "
                                              "last generate() call holds other K/V than a fresh pass of the assistant over "
                                              "the sequence it returned: from layer 0", {"assisted"}),
    # generate() reads the same broken window, so the greedy tokens part too (float32 cells run generate), and so do
    # the window crossings, the left-padded batch and the reused prefix, which decode past it too.
    "static_window_no_roll": (MISTRAL, "static", "sdpa", "parity", "first K/V divergence at layer 0",
                              {"parity", "kv_parity", "generate", "padded_generate", "window", "ragged", "prefix_reuse"}),
    "fp8_scale_drift": (LLAMA, "quantized", "sdpa", "quantized_kv",
                        "layer 0, position 6 (keys): the dequantized cache differs from the fp8 design", {"quantized_kv", "parity"}),
    # Only a prompt shorter than the window decodes into a sliding layer that is not yet full.
    "dynamic_window_stale_before_full": (MISTRAL, "dynamic", "sdpa", "window",
                                         "prompt 2 (shorter than window 4): cached logits leave the uncached reference from "
                                         "decode step 1", {"window", "assisted"}),
    "static_window_late_before_full": (MISTRAL, "static", "sdpa", "window",
                                       "prompt 2 (shorter than window 4): cached logits leave the uncached reference from "
                                       "decode step 1", {"window"}),
    # The crop path crops by 0 after every decode step (as assisted decoding does), so its decode fails too.
    "crop_zero_empties": (LLAMA, "dynamic", "sdpa", "crop", "crop(0) changed get_seq_length() from 9 to 0",
                          {"crop", "assisted"}),
    "static_reorder_reverses_rows": (LLAMA, "static", "sdpa", "reorder",
                                     "reorder_cache(identity [0, 1]) changed the prefilled cache: layer 0 (keys): values changed",
                                     {"reorder"}),
    "static_not_reordered": (LLAMA, "static", "sdpa", "reorder",
                             "leave the same static cache prefilled in that row order from decode step 0", {"reorder"}),
    "quantized_not_reordered": (LLAMA, "quantized", "sdpa", "reorder",
                                "leave the same prefilled quantized cache with its rows moved by hand from decode step 0", {"reorder"}),
    # The residual design decides the split at every step: the late flush (decode step 3) changes what attention
    # reads (parity, reorder, beam), what is stored (quantized_kv) and its bytes; the length and shapes stay right.
    "int_residual_flushed_late": (LLAMA, "hqq-int4", "sdpa", "bytes", "after decode step 3 the cache holds",
                                  {"parity", "bytes", "quantized_kv", "reorder", "beam"}),
    "int_block_other_scale": (LLAMA, "quanto-int2", "sdpa", "quantized_kv",
                              "layer 0, position 4 (keys): the stored packed values with their scale and zero point dequantize",
                              {"parity", "quantized_kv", "reorder", "beam"}),
    # Only a reorder followed by a flush and another update reaches it (the reorder path, beam search): the main decode
    # never reorders.
    "int_reorder_kept_after_flush": (LLAMA, "quanto-int4", "sdpa", "reorder",
                                     "leave its residual design, prefilled and reordered alike from decode step 3",
                                     {"reorder", "beam"}),
    # Only beam search reorders twice before a flush: the reorder path reorders once.
    "int_pending_reorder_replaced": (LLAMA, "hqq-int4", "sdpa", "beam",
                                     "against the same beam search through the cache's residual design: cached beams leave "
                                     "the design's beams at generated token", {"beam"}),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fault", sorted(PATH_FAULTS))
def test_planted_path_fault_fails_its_check(runner, fault, dtype):
    """Exactly the checks the fault reaches fail (each a verdict, not a crash); every other check of the cell passes."""
    spec, cache, attn, check, located, fails = PATH_FAULTS[fault]
    if check in ("beam", "reorder", "window", "assisted") and dtype != "float32":
        pytest.skip(f"{check} is compared in float32 cells only")
    if cache in INT_QUANTIZED and dtype != "float32":
        pytest.skip("the integer backends' faults are dtype-free index and flush logic: float32 cells show them")
    with planted(fault):
        results = run_checks(runner, spec, dtype, cache, attn)
    assert _failed(results).keys() == fails & results.keys(), _failed(results)
    assert located in results[check].message, results[check].message
    assert all(results[name].measured != "error" for name in fails & results.keys()), _failed(results)


def test_a_release_without_the_fp8_backend_lists_quantized_cells_as_not_applicable(monkeypatch):
    """transformers 5.20 has no ``QuantizedCache(backend="fp8")`` nor ``BaseQuantizedLayer``: a listed reason, no crash."""
    import transformers
    from transformers import cache_utils

    from kvconform.build import support
    from kvconform.probe.layer_state import snapshot_layers

    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=64)
    assert support.cache_support(transformers.LlamaForCausalLM, config, "quantized") is None
    monkeypatch.delattr(cache_utils, "Fp8QuantizedLayer")
    monkeypatch.delattr(cache_utils, "BaseQuantizedLayer")
    reason = support.cache_support(transformers.LlamaForCausalLM, config, "quantized")
    assert reason is not None and f"transformers {transformers.__version__} has no QuantizedCache backend 'fp8'" in reason
    cache = transformers.DynamicCache(config=config)
    cache.update(torch.ones(1, 2, 3, 8), torch.ones(1, 2, 3, 8), 0)
    assert [state.keys_shape for state in snapshot_layers(cache)][:1] == [(1, 2, 3, 8)]


def test_flex_attention_cells_run_on_cpu(runner):
    """flex_attention is an opt-in attention (it compiles once per model and worker): where compiled flex agrees
    with the math reference on this CPU, a dynamic-cache cell of a healthy Llama passes every check that applies,
    including its agreement with sdpa; where it does not (torch 2.13 on avx2, or no vector ISA), the cell is not
    applicable with the measured Δ, never a failure blamed on the model."""
    from kvconform.build.flex_check import flex_disagreement

    compiler = flex_disagreement(torch.float32)
    if compiler is not None:
        cell = Cell(LLAMA, "float32", "cpu", "dynamic", "flex_attention")
        outcome = runner.outcome(cell)
        assert (outcome.error, outcome.not_applicable) == (None, compiler)
        assert compiler.startswith("compiled flex_attention on this CPU (inductor vector ISA ")
        return
    results = run_checks(runner, LLAMA, "float32", "dynamic", "flex_attention")
    assert {"parity", "growth", "kv_parity", "attn_agreement"} <= results.keys()
    assert not {"crop", "generate"} & results.keys(), "the reuse paths run with the model's own attention only"
    assert _failed(results) == {}


def test_attn_agreement_never_compares_an_attention_with_itself(tmp_path) -> None:
    """gemma2 has no sdpa: a gemma2 checkpoint's eager cells are its default path (no agreement cell is planned),
    and where the loaded model runs the cell's attention already, the agreement records why it compared nothing.
    A llama checkpoint (sdpa by default) keeps its eager-vs-sdpa agreement."""
    from kvconform.build.model_types import model_attention
    from kvconform.cells import check_applies, expand_cells
    from kvconform.checks import path_checks
    from kvconform.cli_models import spec_from_argument
    from kvconform.matrix import Matrix
    from kvconform.probe.attention import run_agreement
    from kvconform.probe.decode import ProbePlan
    from tests.conftest import tiny

    planned = {}
    for model_type in ("gemma2", "llama"):
        tiny(model_type).save_pretrained(tmp_path / model_type, safe_serialization=True)
        spec = spec_from_argument(str(tmp_path / model_type), LLAMA.settings)
        cells = expand_cells(Matrix(path=tmp_path / "m.yaml", defaults=LLAMA.settings, models=(spec,), excluded={}), model_attention)
        planned[model_type] = sorted({(c.attn, c.model_attn) for c in cells if check_applies("attn_agreement", c)})
    assert planned == {"gemma2": [], "llama": [("eager", "sdpa")]}

    plan = ProbePlan(batch_size=2, prompt_length=4, decode_steps=2, seed=0)
    gemma2 = tiny("gemma2")
    same = run_agreement(gemma2, gemma2, plan)
    assert same.implementations == ("eager", "eager") and same.not_applicable, same
    assert "default attention is eager itself" in same.not_applicable
    assert path_checks.attention_agreement(same, TOLERANCES["float32"]).measured == "not run"
    llama = tiny("llama")
    other = run_agreement(llama.__class__.from_pretrained(tmp_path / "llama", attn_implementation="eager"), llama, plan)
    assert other.implementations == ("eager", "sdpa") and other.not_applicable is None and other.position_max_abs_delta


@pytest.mark.parametrize("cache", ["dynamic", "static", "quantized", "quanto-int2", "hqq-int4"])
def test_generate_calls_through_one_model_leave_no_state(runner, cache):
    """Healthy Llama: continued from its returned cache, a second padded prompt (dynamic); the same arguments twice,
    the user's cache_config dict unchanged (static, quantized: fp8's dict, quanto's and HQQ's with every documented key)."""
    result = run_checks(runner, LLAMA, cache=cache)["between_calls"]
    assert result.passed, result.message
    expected = (["generate() of 4 tokens continued for 4", "a second prompt (seed + 1) with 3 extra masked pad columns"]
                if cache == "dynamic" else ["generate() again with the same arguments", "came back unchanged"])
    assert all(words in result.message for words in expected), result.message


def test_a_cache_kept_between_generate_calls_fails_between_calls(runner):
    """Planted: generate() hands its previous cache, not reset, to the next greedy call of the same batch size. The next
    call (the first after the generate check's) gets 14 stale tokens and so little of its prompt is fed that the model
    raises: between_calls names that call (the left-padded generate() check's, assisted decoding's and the chunked
    prefill's generate() calls meet it too); the decode loop, crop, beam search (another batch size) and the generate
    check's first call do not."""
    with planted("generate_reuses_cache"):
        results = run_checks(runner, LLAMA)
    assert _failed(results).keys() == {"between_calls", "padded_generate", "assisted", "chunked_prefill"}, _failed(results)
    message = results["between_calls"].message
    assert message.startswith("generate() of 4 tokens (to be continued) raised RuntimeError"), message


def test_a_continuation_that_refeeds_the_sequence_fails_between_calls_on_its_logits(runner):
    """Planted: generate() continued from its returned cache feeds the whole sequence again (the 5.3+ encoder-decoder and
    the 5.0-5.24 Mamba bugs' shape). The continued call's logits leave the one long call's from its first token, whatever
    its tokens do; nothing else continues a returned cache, so every other check passes."""
    with planted("continuation_refeeds_sequence"):
        results = run_checks(runner, LLAMA)
    assert _failed(results).keys() == {"between_calls"}, _failed(results)
    message = results["between_calls"].message
    assert "generate() of 4 tokens continued for 4 from the cache it returned" in message, message
    assert "its logits leave the one long call's from generated token 4" in message, message


def test_a_consumed_cache_config_dict_fails_between_calls(runner):
    """Planted: generate() pops ``backend`` from the user's cache_config dict; the next call with it builds the default
    quanto backend (not installed here, or another cache). Only between_calls fails, naming the dict before and after."""
    with planted("cache_config_consumed"):
        results = run_checks(runner, LLAMA, cache="quantized")
    assert _failed(results).keys() == {"between_calls"}, _failed(results)
    assert ("generate() changed the user's arguments: cache_implementation='quantized', cache_config={'backend': 'fp8'} "
            "came back as cache_implementation='quantized', cache_config={}") in results["between_calls"].message


@pytest.mark.parametrize("cache", ["quanto-int4", "hqq-int2"])
def test_a_consumed_integer_cache_config_dict_fails_between_calls(runner, cache):
    """Planted: generate() pops ``backend`` from the user's quanto/HQQ dict (transformers 5.0-5.18's shape). Only
    between_calls fails, naming the dict as given and as it came back; HQQ's second call builds the default quanto
    backend, and its tokens part too. The beam check builds its own dict per call and passes."""
    with planted("cache_config_consumed"):
        results = run_checks(runner, LLAMA, cache=cache)
    assert _failed(results).keys() == {"between_calls"}, _failed(results)
    backend, nbits = INT_QUANTIZED[cache]
    options = f"'nbits': {nbits}, 'residual_length': 3, 'q_group_size': 16, 'axis_key': 0, 'axis_value': 0"
    message = results["between_calls"].message
    assert (f"generate() changed the user's arguments: cache_implementation='quantized', cache_config={{'backend': "
            f"'{backend}', {options}}} came back as cache_implementation='quantized', cache_config={{{options}}}") in message, message
    assert ("tokens part from a first generate()" in message) == (backend == "hqq"), message


def test_beam_search_on_an_integer_cache_follows_its_residual_design(runner):
    """quanto/HQQ cells: beam search with the cache returns the beams of the same search through its residual design
    (int_design.py), every flush and deferred reorder included; the uncached beams are no reference (not full precision)."""
    for cache in ("quanto-int2", "hqq-int4"):
        beam = run_checks(runner, LLAMA, cache=cache)["beam"]
        assert beam.passed and beam.details["reference"] == "design", beam.message
        assert "against the same beam search through the cache's residual design: the same beams" in beam.message


def test_a_rolled_window_that_refuses_its_crop_makes_assisted_not_applicable(monkeypatch) -> None:
    """Up to 5.14 a sliding layer past its window refuses assisted decoding's crop in its own words: not applicable,
    in those words (a release limitation users meet as that error), never a cache fault."""
    from transformers.cache_utils import DynamicSlidingWindowLayer

    from kvconform.probe.assisted import ROLLED_WINDOW, run_assisted
    from kvconform.probe.decode import ProbePlan
    from tests.conftest import tiny

    def refuse(self, *args, **kwargs):
        if self.cumulative_length > self.sliding_window:
            raise ValueError(f"{ROLLED_WINDOW} sliding window (otherwise some states are lost)")

    monkeypatch.setattr(DynamicSlidingWindowLayer, "crop", refuse)
    plan = ProbePlan(batch_size=2, prompt_length=6, decode_steps=8, seed=0, cache="dynamic", locate_tolerance=None)
    record = run_assisted(tiny("mistral", sliding_window=4), plan, ("random",))
    assert record.not_applicable is not None and ROLLED_WINDOW in record.not_applicable, record


def test_the_random_assistant_keeps_every_kind_of_block() -> None:
    """A stack of mixed blocks keeps its depth in the assistant: RecurrentGemma before transformers 5.24 names its
    blocks in ``layers_block_type`` (no ``layer_types``), and two of its three layers have no attention block, which
    its forward needs (``'attention' is not in list``)."""
    from types import SimpleNamespace

    from kvconform.probe.assisted import _one_uniform_stack

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList(torch.nn.Identity() for _ in range(3))
    mixed = SimpleNamespace(layer_types=None, layers_block_type=["recurrent", "recurrent", "attention"])
    assert not _one_uniform_stack(model, mixed, 3)
    assert _one_uniform_stack(model, SimpleNamespace(layer_types=None), 3)
    assert not _one_uniform_stack(model, SimpleNamespace(layer_types=["sliding_attention", "full_attention"] * 2), 3)


def test_the_random_assistant_is_a_smaller_build_of_a_uniform_stack() -> None:
    """A uniform stack's random assistant has fewer layers than the model (1 of a shrunk build's 2), and its cache
    matches it; a BART-style config, whose ``num_hidden_layers`` is the encoder's count, keeps its decoder's depth."""
    from kvconform.probe.assisted import random_assistant

    llama = tiny("llama")
    assistant = random_assistant(llama, seed=0)
    assert llama.config.num_hidden_layers == 2 and len(assistant.model.layers) == assistant.config.num_hidden_layers == 1
    bart = tiny("bart")
    assert len(random_assistant(bart, seed=0).model.decoder.layers) == len(bart.model.decoder.layers)


def test_quanto_builds_its_cpu_kernel_once_per_machine_not_per_environment(monkeypatch, tmp_path):
    """A quanto cell's cache_config points quanto's CPU unpack kernel (60 s of compiling on 2 cores) at kvconform's cache
    folder, keyed by the Python, torch and quanto versions, so a fresh environment (each CI job's venv) reuses the build;
    a kernel already loaded is left where it is."""
    extensions = pytest.importorskip("optimum.quanto.library.extensions")
    from transformers import LlamaConfig

    from kvconform.build import quanto_kernel
    from kvconform.build.support import int_cache_config

    extension = extensions.get_extension(quanto_kernel.EXTENSION)
    monkeypatch.setenv("KVCONFORM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(extension, "_lib", None)
    monkeypatch.setattr(extension, "build_directory", "/venv/optimum/quanto/library/extensions/cpp/build")
    config = LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=1)
    int_cache_config(config, "quanto-int4")
    folder = Path(extension.build_directory)
    assert folder.parent == tmp_path / "quanto-cpp" and f"torch{torch.__version__}" in folder.name, folder
    monkeypatch.setattr(extension, "_lib", object())
    monkeypatch.setattr(extension, "build_directory", "/where/it/was/loaded")
    int_cache_config(config, "quanto-int2")
    assert extension.build_directory == "/where/it/was/loaded"

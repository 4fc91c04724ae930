"""Checks on hand-made probe records (plain data, no model): each can pass and each can fail."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kvconform.build.geometry import FULL, NO_KV, SLIDING, CacheGeometry, LayerGeometry
from kvconform.checks import record_checks as checks
from kvconform.matrix import Tolerance
from kvconform.probe.decode import GenerateRecord, ProbePlan, ProbeRecord, StepRecord
from kvconform.probe.layer_state import LayerState
from kvconform.report import finite_or_null
from kvconform.results import Figure

PLAN = ProbePlan(batch_size=2, prompt_length=4, decode_steps=2, seed=0)
TOL = Tolerance(atol=1e-5, rtol=1e-4)
GEOMETRY = CacheGeometry(
    layers=(LayerGeometry(0, FULL, "full", 2, 8, 8), LayerGeometry(1, NO_KV, "layer_types[1]='linear_attention'")),
    query_heads=4,
)


def _layers(length: int, heads: int = 2, dtype: str = "float32") -> list[LayerState]:
    shape = (2, heads, length, 8)
    return [
        LayerState(0, "DynamicLayer", shape, shape, dtype, 2 * 2 * heads * length * 8 * 4),
        LayerState(1, "LinearAttentionLayer", None, None, None, 0, ((2, 8),)),
    ]


def _record(deltas=(1e-6, 2e-6, 3e-6), lengths=(4, 5, 6), scale=10.0, generate=None, dtype="float32") -> ProbeRecord:
    steps = [
        StepRecord(step=k, seq_length=n, layers=_layers(n), max_abs_delta=d, worst_row=1, worst_vocab_id=7,
                   cached_argmax=[1, 2], reference_argmax=[1, 2], reference_top2_margin=[0.5, 0.5])
        for k, (d, n) in enumerate(zip(deltas, lengths, strict=False))
    ]
    return ProbeRecord(plan=PLAN, dtype=dtype, cache_class="DynamicCache", max_cache_len=None, steps=steps,
                       prefix_instability=None, topk_ties=None,
                       logit_scale=scale, nonfinite=None, located=False, divergence=None, generate=generate)


def test_parity_limit_scales_with_the_logits():
    limit = TOL.limit(10.0)
    assert checks.parity(_record(deltas=(0, 0, limit * 0.99)), TOL).passed
    failed = checks.parity(_record(deltas=(0, 0, limit * 1.01)), TOL)
    assert not failed.passed
    assert "decode step 2 (cache length 6, token position 5)" in failed.message
    assert "batch row 1, vocab id 7" in failed.message
    assert failed.details["step_max_abs_delta"][2] > failed.details["tolerance"]
    assert failed.figure == Figure(limit * 1.01, limit, "logit", "at_most")
    assert failed.figure.ratio == pytest.approx(1.01) and failed.measured == f"{limit * 1.01:.2e}"


def test_parity_fails_on_non_finite_logits():
    record = replace(_record(), nonfinite="cached logits at step 1 are not finite")
    result = checks.parity(record, TOL)
    assert not result.passed and "not finite" in result.message
    row, nonfinite = finite_or_null(result.to_dict())  # as the plugin stores it: null with a flag, never Infinity
    assert row["figure"]["measured"] is None and row["figure"]["ratio"] is None
    assert nonfinite == ["figure.measured", "figure.ratio"]


def test_parity_names_the_reference_margin_where_greedy_argmax_differs():
    record = _record(deltas=(0.0, 0.03, 0.0))
    record.steps[1] = replace(record.steps[1], cached_argmax=[1, 5], reference_top2_margin=[0.5, 0.0156])
    result = checks.parity(record, TOL)
    assert result.details["argmax_disagree_steps"] == [1] and not result.details["argmax_agree"]
    assert "greedy argmax differs at steps [1] (the reference's top-2 margin: 0.0156 at step 1, whose |Δ| is 0.03)" in result.message
    assert "greedy argmax agrees at every step" in checks.parity(_record(), TOL).message


def test_growth_passes_and_fails_with_the_step():
    assert checks.growth(_record(), GEOMETRY).passed
    stuck = checks.growth(_record(lengths=(4, 5, 5)), GEOMETRY)
    assert not stuck.passed
    assert "after decode step 2, expected 6 (grew by 0 instead of 1)" in stuck.message
    assert stuck.figure == Figure(5, 6, "tokens", "equal")


def test_growth_shows_each_layer_kind_stored_across_a_window_and_fails_on_one_that_keeps_too_many():
    """A window of 6 crossed by a 4-token prompt decoded 4 steps: the sliding layer stops at window-1 = 5."""
    geometry = CacheGeometry(layers=(LayerGeometry(0, SLIDING, "window 6", 2, 8, 8, 6), LayerGeometry(1, FULL, "full", 2, 8, 8),
                                     LayerGeometry(2, SLIDING, "window 6", 2, 8, 8, 6)), query_heads=4)
    plan = replace(PLAN, decode_steps=4)

    def record(sliding: list[int]) -> ProbeRecord:
        base = _record(deltas=(0,) * 5, lengths=(4, 5, 6, 7, 8))
        for step, stored in zip(base.steps, sliding, strict=True):
            shapes = [(2, 2, n, 8) for n in (stored, step.seq_length, stored)]
            step.layers = [LayerState(i, "DynamicLayer", shape, shape, "float32", 0) for i, shape in enumerate(shapes)]
        return replace(base, plan=plan)

    ok = checks.growth(record([4, 5, 5, 5, 5]), geometry)
    assert ok.passed, ok.message
    assert ok.message.endswith("(2 sliding layers (window 6): 4→5→5→5→5; 1 full layer: 4→5→6→7→8)"), ok.message
    assert ok.details["stored_lengths"][-1] == [5, 8, 5]
    kept_all = checks.growth(record([4, 5, 6, 6, 6]), geometry)
    assert not kept_all.passed
    assert "layer 0 (window 6) stores 6 positions after decode step 2 (6 tokens seen), expected 5" in kept_all.message


def test_shapes_list_no_kv_layers_and_catch_head_expansion():
    ok = checks.shapes(_record(), GEOMETRY, "H_kv=2")
    assert ok.passed and "layers keeping no K/V: [1]" in ok.message
    record = _record()
    for step in record.steps:
        step.layers = _layers(step.seq_length, heads=4)
    bad = checks.shapes(record, GEOMETRY, "H_kv=2")
    assert not bad.passed and "expanded to the query-head count" in bad.message
    assert bad.figure == Figure([2, 4, 4, 8], [2, 2, 4, 8], "[B, H_kv, S_layer, head_dim]", "equal")
    assert (bad.measured, bad.limit) == ("[2, 4, 4, 8]", "[2, 2, 4, 8]")
    assert ok.figure == Figure([2, 2, 6, 8], [2, 2, 6, 8], "[B, H_kv, S_layer, head_dim]", "equal")


def test_shapes_fail_when_a_no_kv_layer_stores_kv():
    record = _record()
    record.steps[0].layers[1] = LayerState(1, "DynamicLayer", (2, 2, 4, 8), (2, 2, 4, 8), "float32", 512)
    result = checks.shapes(record, GEOMETRY, "")
    assert not result.passed and "keeps no K/V" in result.message


def test_shapes_fail_on_kv_stored_in_another_dtype():
    record = _record()
    record.steps[1].layers = _layers(5, dtype="float16")
    result = checks.shapes(record, GEOMETRY, "")
    assert not result.passed and "stored as float16" in result.message


def test_bytes_exact_and_off_by_a_factor():
    assert checks.cache_bytes(_record(), GEOMETRY).passed
    record = _record()
    record.steps[2].layers[0].kv_bytes *= 2
    result = checks.cache_bytes(record, GEOMETRY)
    assert not result.passed and "(× 2)" in result.message and "decode step 2" in result.message
    assert result.figure == Figure(3072, 1536, "B", "equal") and result.figure.ratio == 2.0


def _generate(first: int | None, margin: float | None) -> GenerateRecord:
    cached = [[1, 2, 3], [4, 5, 6]]
    uncached = [row[:] for row in cached]
    if first is not None:
        uncached[1][first] = 9
    return GenerateRecord(cached, uncached, first, margin)


def test_generate_is_strict_in_float32_and_forgives_near_ties_elsewhere():
    assert checks.generate(_record(generate=_generate(None, None)), TOL).passed
    assert not checks.generate(_record(generate=_generate(1, 1e-6)), TOL).passed
    half = Tolerance(atol=1e-3, rtol=4e-2)
    near_tie = checks.generate(_record(generate=_generate(1, 0.01), dtype="float16"), half)
    assert near_tie.passed and "near-tie" in near_tie.message
    clear = checks.generate(_record(generate=_generate(1, 5.0), dtype="float16"), half)
    assert not clear.passed and "generated token 1 (rows [1])" in clear.message
    assert clear.figure == Figure(1, 3, "tokens", "equal")


def test_the_suite_has_one_test_per_check_of_the_table() -> None:
    """The check table is the one list of checks: the suites' tests, the cells and the report columns follow it.

    ``suites/test_conformance.py`` holds the checks that read a ``ProbeRecord`` (every check a causal-LM
    cell can run), ``suites/test_families.py`` the ones only other families run; together, the table.
    """
    import ast
    from pathlib import Path

    from kvconform.checks.table import CHECK_ORDER, FAMILY_CHECKS, RECORD_CHECKS
    from kvconform.report.views import CHECK_ORDER as REPORT_ORDER

    def tests_of(name: str) -> list[str]:
        suite = ast.parse((Path(__file__).resolve().parents[1] / "suites" / name).read_text())
        return [node.name.removeprefix("test_") for node in suite.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]

    assert tests_of("test_conformance.py") == list(RECORD_CHECKS)
    assert tests_of("test_families.py") == list(FAMILY_CHECKS)
    assert sorted(RECORD_CHECKS + FAMILY_CHECKS) == sorted(CHECK_ORDER)
    assert REPORT_ORDER is CHECK_ORDER


def test_run_all_follows_the_table_and_runs_only_the_paths_the_probe_ran() -> None:
    results = checks.run_all(_record(), GEOMETRY, "x", TOL)
    assert list(results) == ["parity", "growth", "shapes", "bytes", "generate"]


def _kv_pairs(delta: float = 0.0, layer: int = 1, position: int = 3, tensor: str = "values"):
    """Two K/V layers (max |value| 1 in KV head 1, dim 2) and one without K/V; ``delta`` added to one stored value there."""
    import torch

    from kvconform.probe.kv_compare import kv_parity

    generator = torch.Generator().manual_seed(0)
    pairs: list = []
    for index in range(2):
        ref_k, ref_v = (torch.rand(2, 2, 6, 4, generator=generator) * 2 - 1 for _ in range(2))
        ref_k[0, 1, 0, 2] = ref_v[0, 1, 0, 2] = 1.0
        keys, values = ref_k.clone(), ref_v.clone()
        if index == layer:
            (values if tensor == "values" else keys)[1, 1, position, 2] += delta
        pairs.append((keys, values, ref_k, ref_v))
    pairs.append(None)
    return kv_parity(pairs, valid_length=6)


def test_kv_parity_names_layer_position_head_dim_tensor_and_the_limit():
    import torch

    from kvconform.probe.kv_compare import KV_ROUNDING_STEPS

    rtol = KV_ROUNDING_STEPS[torch.float32] * torch.finfo(torch.float32).eps
    limit = 1e-6 + rtol * 1.0  # float32: atol + rtol × max|V| of KV head 1, dim 2
    healthy = checks.kv_parity(replace(_record(), kv_parity=_kv_pairs(0.5 * limit)))
    assert healthy.passed and healthy.figure.ratio == pytest.approx(0.5, rel=1e-3), healthy.message
    assert healthy.details["kv_layers"] == 2
    failed = checks.kv_parity(replace(_record(), kv_parity=_kv_pairs(3 * limit)))
    assert not failed.passed
    assert "from layer 1, position 3 (values): worst |Δ|" in failed.message and "1 of 2 K/V layers over the limit [1]" in failed.message
    assert f"at position 3, KV head 1, dim 2 > limit {limit:.3g} = 1e-06 + {rtol:.3g} × max|V| of that head dimension 1" in failed.message
    assert failed.figure.ratio == pytest.approx(3, rel=1e-3) and failed.details["kv_worst"]["tensor"] == "values"


def test_kv_parity_without_kv_layers_passes_with_the_reason_and_shape_problems_fail():
    from kvconform.probe.kv_compare import KVParity, kv_parity

    none = checks.kv_parity(replace(_record(), kv_parity=kv_parity([None, None], valid_length=6)))
    assert none.passed and none.measured == "no K/V" and "no K/V layers" in none.message
    short = KVParity(1, 1e-4, None, problem="layer 0 (keys): decoded (2, 2, 5, 4) vs fresh pass (2, 2, 6, 4)")
    failed = checks.kv_parity(replace(_record(), kv_parity=short))
    assert not failed.passed and "layer 0 (keys): decoded (2, 2, 5, 4)" in failed.message
    assert checks.kv_parity(_record()).measured == "not run"


def test_assisted_tells_a_cache_fault_from_a_near_tie_and_from_greedy_itself():
    """Logits over the limit fail, located at the forward; tokens that part where every logit is within the limit are a
    near tie (margin within twice the limit) or greedy's own departure (greedy's logits off), never a cache fault."""
    from kvconform.checks.path_checks import assisted
    from kvconform.matrix import Tolerance
    from kvconform.probe.assisted import AssistedRecord, AssistedRun, Forward

    tolerance = Tolerance(1e-5, 3e-5)
    forwards = [Forward(0, 9, 0), Forward(6, 4, 6), Forward(7, 4, 10)]

    def record(run: AssistedRun, greedy_delta: float = 1e-6) -> AssistedRecord:
        return AssistedRecord([5, 6, 7, 5, 6, 7], 6, [1, 2, 3, 4, 5, 6], greedy_delta, 10.0, [], [run])

    fault = assisted(record(AssistedRun("random", [1, 2, 9], [0.0, 1e-6, 2.0], forwards, margin_at_part=3.0)), tolerance)
    assert not fault.passed and "at generated token 2 (|Δ| 2 > limit" in fault.message, fault.message
    assert "main-model forward 2 (at position 7, 1 token + 3 drafts; 3 drafts rejected before it; the cache holds 10" in fault.message
    tie = assisted(record(AssistedRun("random", [1, 2, 9], [0.0, 1e-6, 1e-5], forwards, margin_at_part=1e-5)), tolerance)
    assert tie.passed and "[near tie] a random assistant" in tie.message, tie.message
    greedy = assisted(record(AssistedRun("self", [1, 9], [0.0, 1e-6], forwards[:2], margin_at_part=2.0), 1.5), tolerance)
    assert greedy.passed and "greedy left the reference" in greedy.message, greedy.message
    # Up to 5.13 prompt lookup could return the bonus token past max_new_tokens: greedy's tokens and one more.
    overlong = assisted(record(AssistedRun("prompt_lookup", [1, 2, 3, 4, 5, 6, 7], [0.0] * 6, forwards)), tolerance)
    assert not overlong.passed and overlong.details["diagnosis"] == "generate() length", overlong.message
    assert "[length] prompt lookup: returns 7 new tokens where max_new_tokens asks for 6 (greedy returns 6)" in overlong.message


def test_a_result_carries_plain_data_even_when_a_check_left_a_tensor_in_it() -> None:
    """On 5.14-5.17 ``get_seq_length()`` returns a tensor; a report (and xdist) takes builtins only."""
    import json

    from kvconform.results import CheckResult

    result = CheckResult(name="growth", passed=True, message="ok", measured="1", limit="1",
                         details={"lengths": [torch.tensor(6), torch.tensor(7)], "pair": (torch.tensor([1, 2]), "a")})
    data = result.to_dict()
    assert data["details"] == {"lengths": [6, 7], "pair": ([1, 2], "a")}
    assert type(data["details"]["lengths"][0]) is int
    json.dumps(data)


def test_media_calls_names_where_the_text_prompt_parts_from_its_first_call():
    """State that reaches cached and uncached passes alike shows only as other tokens the second time: the check says
    from which generated token and row, and passes when the calls agree."""
    from types import SimpleNamespace

    from kvconform.families.checks import media_calls
    from kvconform.families.media_calls import GenerateCall
    from kvconform.matrix import Tolerance

    def calls(again: list[list[int]]) -> SimpleNamespace:
        return SimpleNamespace(calls=[GenerateCall("the text-only prompt", [[1, 2, 3]], 1e-6, 5.0),
                                      GenerateCall("an image", [[4, 5, 6]], 2e-6, 5.0),
                                      GenerateCall("the text-only prompt again", again, 1e-6, 5.0)])

    tolerance = Tolerance(1e-5, 3e-5)
    assert media_calls(calls([[1, 2, 3]]), tolerance).passed
    leaked = media_calls(calls([[1, 9, 3]]), tolerance)
    assert not leaked.passed
    assert ("the text-only prompt again returns other tokens than the first time, from generated token 1 (rows [0]: [9] "
            "vs [2]): state an earlier call left on the model") in leaked.message, leaked.message

"""Checks: a probe record against an expectation -> ``CheckResult`` (no transformers loading, no pytest).

Each check reads the same ``ProbeRecord``; none runs the model. Failure messages are diagnoses:
which step, which layer, which position, measured vs limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple

from kvconform.build.geometry import REFERENCE_SLIDING, CacheGeometry, LayerGeometry
from kvconform.checks import path_checks
from kvconform.checks.formula import int_quantized_bytes, residual_split
from kvconform.checks.table import PATH_CHECKS, RECORD_CHECKS
from kvconform.matrix import Tolerance
from kvconform.probe.decode import GenerateRecord, ProbeRecord, StepRecord
from kvconform.probe.kv_compare import KV_ABSOLUTE_LIMIT, KVDelta
from kvconform.probe.layer_state import LayerState
from kvconform.probe.quantized import SCALES_PER_LAYER
from kvconform.probe.selections import SelectionReplay
from kvconform.results import CheckResult, Figure

BYTES_PER_VALUE = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "int8": 1}
#: What a cache kind stores its K/V as, where that is not the model's dtype.
STORED_DTYPE = {"quantized": "float8_e4m3fn", "quanto-int4": "int4", "quanto-int2": "int2", "hqq-int4": "int4",
                "hqq-int2": "int2"}
#: Bytes of one quantization scale (float32).
SCALE_BYTES = 4
#: The diagnosis of a parity failure that starts at the prefill, before any cache entry was read.
PREFILL_DIFFERS = "prefill differs"
#: Extra paths whose step 0 is a prefill into an empty cache (the others' first step reads a cache).
PREFILL_PATHS = ("ragged",)


def parity(record: ProbeRecord, tolerance: Tolerance) -> CheckResult:
    """Every step's cached logits within ``atol + rtol * max|reference logit|`` of the uncached pass."""
    limit = tolerance.limit(record.logit_scale)
    deltas = [step.max_abs_delta for step in record.steps]
    worst = max(record.steps, key=lambda s: s.max_abs_delta)
    disagree = [s.step for s in record.steps if s.cached_argmax != s.reference_argmax]
    details = {
        "step_max_abs_delta": deltas,
        "tolerance": limit,
        "logit_scale": record.logit_scale,
        "argmax_agree": not disagree,
        "argmax_disagree_steps": disagree,
    }
    if record.full_precision_delta is not None:
        details["full_precision_delta"] = record.full_precision_delta
    if record.replay is not None:
        details["selection_replay"] = replay_details(record.replay)
    measured, shown_limit = f"{worst.max_abs_delta:.2e}", f"{limit:.2e}"
    if record.nonfinite:
        figure = Figure(float("inf"), limit, "logit")
        return CheckResult("parity", False, "non-finite", shown_limit, f"{record.nonfinite} ({record.dtype})", details, figure)
    figure = Figure(worst.max_abs_delta, limit, "logit")
    failing = [s for s in record.steps if s.max_abs_delta > limit]
    argmax_note = _argmax_note(record.steps, disagree)
    if not failing:
        message = f"max |Δlogit| {measured} at step {worst.step} ≤ {shown_limit} ({_limit_text(tolerance, record)}); {argmax_note}"
        if record.full_precision_delta is not None:
            message += (f"; against {record.reference}; the full-precision uncached pass "
                        f"differs by {record.full_precision_delta:.3g} by design")
        return CheckResult("parity", True, measured, shown_limit, message, details, figure)
    first = failing[0]
    if record.replay is not None and record.replay.agrees(limit):
        replayed = max(record.replay.step_max_abs_delta)
        message = (f"[near-tie selections] not a cache fault: {record.replay.describe(limit)}; without the replay |Δ| "
                   f"{measured} at step {worst.step} > {shown_limit} ({_limit_text(tolerance, record)}), from rounding alone")
        return CheckResult("parity", True, f"{replayed:.2e}", shown_limit, message, details, Figure(replayed, limit, "logit"))
    lines = [
        f"cached logits diverge from {record.reference} at {record.plan.step_name} {first.step} "
        f"({_step_name(first, record)}): |Δ| {first.max_abs_delta:.3g} at batch row {first.worst_row}, "
        f"vocab id {first.worst_vocab_id} > limit {shown_limit} ({_limit_text(tolerance, record)})",
        f"steps over the limit: {[s.step for s in failing]} of {len(record.steps)}; worst |Δ| {measured} at step {worst.step}",
        argmax_note,
        "per-step max |Δ|: " + ", ".join(f"{d:.2e}" for d in deltas),
    ]
    details["diagnosis"] = diagnosis = _diagnosis(record)
    if record.topk_ties is not None:
        lines.append(f"not a cache fault: {record.topk_ties.describe()}")
    if record.prefix_instability is not None:
        lines.append(f"not a cache fault: {record.prefix_instability.describe()}, so no cache can match it")
    if diagnosis == PREFILL_DIFFERS and record.prefill_split is not None:
        lines.append(record.prefill_split.describe())
        if record.divergence is not None:  # a located fact, but the prefill split comes first
            lines.append(f"stored K/V at the end of the decode: {record.divergence.describe()}")
            details["divergence"] = record.divergence.describe()
    # Only a sound reference lets the K/V localization blame the cache.
    if diagnosis == "cache fault" and record.divergence is not None:
        lines.append(record.divergence.describe())
        details["divergence"] = record.divergence.describe()
    elif diagnosis == "cache fault" and record.located:
        lines.append("stored K/V match a fresh pass at every layer and position: suspect the attention mask or positions")
    if record.replay is not None:
        lines.append(record.replay.describe(limit))
    lines[0] = f"[{diagnosis}] " + lines[0]
    return CheckResult("parity", False, measured, shown_limit, "\n".join(lines), details, figure)


def _argmax_note(steps: list[StepRecord], disagree: list[int]) -> str:
    """Where greedy argmax differs, with the reference's top-2 margin at the first three such steps: a margin within
    the step's |Δ| is a near-tie that any rounding can swap, a wide one a real change of the greedy token."""
    if not disagree:
        return "greedy argmax agrees at every step"
    margins = []
    for step in [s for s in steps if s.step in disagree][:3]:
        rows = [r for r, (a, b) in enumerate(zip(step.cached_argmax, step.reference_argmax, strict=True)) if a != b]
        margins.append(f"{min(step.reference_top2_margin[r] for r in rows):.3g} at step {step.step}, whose |Δ| is {step.max_abs_delta:.3g}")
    more = "; …" if len(disagree) > len(margins) else ""
    return f"greedy argmax differs at steps {disagree} (the reference's top-2 margin: {'; '.join(margins)}{more})"


def replay_details(replay: SelectionReplay) -> dict[str, Any]:
    """The selection replay as plain data for the report."""
    return {
        "selections": replay.selections,
        "near_ties": replay.near_ties,
        "flips": [{"module": f.module, "op": f.op, "k": f.k, "position": f.position, "row": f.row, "margin": f.margin,
                   "score_delta": f.score_delta, "rounding_step": f.rounding, "noise": f.noise} for f in replay.flips],
        "replayed_step_max_abs_delta": replay.step_max_abs_delta,
        "error": replay.error,
    }


def _diagnosis(record: ProbeRecord) -> str:
    """What kind of failure this is: only ``cache fault`` blames the cache."""
    if record.topk_ties is not None:
        return "top-k ties"
    if record.prefix_instability is not None:
        return "not prefix-stable"
    if record.prefill_split is not None:
        return PREFILL_DIFFERS
    return "cache fault"


def _limit_text(tolerance: Tolerance, record: ProbeRecord) -> str:
    return f"{record.dtype}: {tolerance.atol:g} + {tolerance.rtol:g} × max|logit| {record.logit_scale:.3g}"


def _step_name(step: StepRecord, record: ProbeRecord) -> str:
    plan = record.plan
    if plan.cropped_to is not None:
        return f"cache length {step.seq_length}: {plan.positions_per_step} positions over the prefix of {plan.cropped_to}"
    return "prefill" if step.step == 0 else f"cache length {step.seq_length}, token position {plan.prompt_length + step.step - 1}"


def kv_parity(record: ProbeRecord) -> CheckResult:
    """Every layer's stored K/V within ``atol + rtol × scale`` of one fresh pass at every element, ``scale`` the max
    |fresh-pass value| of the element's KV head and head dimension (``rtol``: rounding steps × the dtype's eps)."""
    kv = record.kv_parity
    if kv is None:
        return CheckResult("kv_parity", True, "not run", "", "K/V parity is not run for this cell (its cache is judged by design)")
    if kv.problem is not None:
        return CheckResult("kv_parity", False, "error", "", f"decoded K/V cannot be compared with a fresh pass: {kv.problem}",
                           {"kv_layers": kv.kv_layers})
    if kv.worst is None:
        return CheckResult("kv_parity", True, "no K/V", "", "no K/V layers: the cache keeps no keys and values to compare",
                           {"kv_layers": kv.kv_layers})
    worst = kv.worst
    details: dict[str, Any] = {"kv_layers": kv.kv_layers, "kv_rtol": kv.rtol, "kv_worst_ratio": worst.ratio,
                               "kv_worst": _kv_delta(worst), "kv_failing_layers": [d.layer for d in kv.failing]}
    figure = Figure(worst.ratio, 1.0, "× K/V limit")
    measured, limit = f"{worst.ratio:.2e}×", "1×"
    where = lambda d: f"layer {d.layer}, position {d.position}, KV head {d.head}, dim {d.dim} ({d.tensor})"  # noqa: E731
    bound = lambda d: (f"{d.limit:.3g} = {KV_ABSOLUTE_LIMIT:g} + {kv.rtol:.3g} × max|{d.tensor[0].upper()}| of that head "  # noqa: E731
                       f"dimension {d.scale:.3g}")
    if not kv.failing:
        message = (f"{kv.kv_layers} K/V layers match a fresh pass at every position ({record.dtype}); worst |Δ| {worst.delta:.3g} "
                   f"at {where(worst)} ≤ {bound(worst)} ({worst.ratio:.2g} of the limit)")
        return CheckResult("kv_parity", True, measured, limit, message, details, figure)
    first = kv.failing[0]
    message = (f"stored K/V differ from a fresh pass over the final sequence from layer {first.layer}, position {first.first} "
               f"({first.tensor}): worst |Δ| {first.delta:.3g} at position {first.position}, KV head {first.head}, dim {first.dim} "
               f"> limit {bound(first)} "
               f"({first.ratio:.3g}× the limit, {record.dtype}); {len(kv.failing)} of {kv.kv_layers} "
               f"K/V layers over the limit {[d.layer for d in kv.failing]}; worst {worst.ratio:.3g}× at {where(worst)}")
    return CheckResult("kv_parity", False, measured, limit, message, details, figure)


def _kv_delta(delta: KVDelta) -> dict[str, Any]:
    return {"layer": delta.layer, "position": delta.position, "first_over": delta.first, "tensor": delta.tensor,
            "head": delta.head, "dim": delta.dim, "delta": delta.delta, "limit": delta.limit, "scale": delta.scale}


def growth(record: ProbeRecord, geometry: CacheGeometry) -> CheckResult:
    """``get_seq_length()`` is P after prefill and P+k after step k; each layer stores what its type keeps."""
    trace = [step.seq_length for step in record.steps]
    expected = [record.plan.seen(k) for k in range(len(record.steps))]
    measured = "→".join(map(str, trace))
    limit = "→".join(map(str, expected))
    details = {"seq_length_trace": trace, "expected_trace": expected}
    if all(length is None for length in trace) and not geometry.kv_layers:
        return _recurrent_growth(record, limit, details)
    # A state-only cache may count its tokens too (5.25's linear-attention layers: cumulative_length_linear); its
    # trace is then checked as any cache's, and its state must still keep its shape.
    state_change = None if geometry.kv_layers else _state_shape_change(record)
    if trace != expected:
        k = next(i for i, (a, b) in enumerate(zip(trace, expected, strict=False)) if a != b)
        now, previous = trace[k], trace[k - 1] if k else 0
        grew = "an unknown number" if now is None or previous is None else now - previous
        message = (
            f"get_seq_length() is {trace[k]} after {record.plan.when(k)}, expected {expected[k]}"
            f" (grew by {grew} instead of {expected[k] - (expected[k - 1] if k else 0)}); trace {measured}"
        )
        return CheckResult("growth", False, measured, limit, message, details, Figure(trace[k], expected[k], "tokens", "equal"))
    problem = _first_length_problem(record, geometry)
    if problem:
        text, got, want = problem
        return CheckResult("growth", False, measured, limit, text, details, Figure(got, want, "positions", "equal"))
    if record.mask_problems:
        details["mask_problems"] = record.mask_problems
        message = (f"{record.mask_problems[0]}: the attention mask is sized for other keys than attention receives "
                   f"({len(record.mask_problems)} layer-steps); trace {measured}")
        return CheckResult("growth", False, measured, limit, message, details)
    if state_change is not None:
        return CheckResult("growth", False, "state grows", "constant state", f"{state_change}; trace {measured}", details)
    figure = Figure(trace[-1], expected[-1], "tokens", "equal")
    details["stored_lengths"] = [[None if s.keys_shape is None else s.keys_shape[-2] for s in step.layers] for step in record.steps]
    message = f"cache length {measured}; every layer stores what its type keeps ({_stored_summary(record, geometry)})"
    if not geometry.kv_layers:
        message += "; recurrent state shapes constant over every step"
    if record.mask_compared:
        message += f"; get_mask_sizes = the K/V update() returned at every decode step ({record.mask_compared} layer-steps)"
    return CheckResult("growth", True, measured, limit, message, details, figure)


def _stored_summary(record: ProbeRecord, geometry: CacheGeometry) -> str:
    """Positions stored per step by each kind of layer, e.g. ``15 sliding layers (window 512): 508→…→511``."""
    groups: dict[tuple[str, int | None], list[int]] = {}
    for layer in geometry.kv_layers:
        groups.setdefault((layer.kind, layer.window), []).append(layer.index)
    parts = []
    for (kind, window), indices in groups.items():
        first = indices[0]
        lengths = [step.layers[first].keys_shape for step in record.steps if first < len(step.layers)]
        stored = "→".join("?" if shape is None else str(shape[-2]) for shape in lengths)
        parts.append(f"{len(indices)} {kind} layer{'s' * (len(indices) > 1)}{f' (window {window})' if window else ''}: {stored}")
    return "; ".join(parts) or "no K/V layers"


def _state_shape_change(record: ProbeRecord) -> str | None:
    """The first decode step whose recurrent state shapes differ from the prefill's, as a message, or ``None``."""
    states = [[layer.state_shapes for layer in step.layers] for step in record.steps]
    changed = next((k for k, shapes in enumerate(states) if shapes != states[0]), None)
    return None if changed is None else f"recurrent state changes shape at decode step {changed}: {states[0]} -> {states[changed]}"


def _recurrent_growth(record: ProbeRecord, limit: str, details: dict[str, Any]) -> CheckResult:
    """Caches with only recurrent state: no token count, and the state must not grow with the sequence."""
    message = _state_shape_change(record)
    if message is not None:
        return CheckResult("growth", False, "state grows", "constant state", message, details)
    message = "recurrent state only (no get_seq_length): state shapes constant over every step"
    return CheckResult("growth", True, "constant state", "constant state", message, details)


def _first_length_problem(record: ProbeRecord, geometry: CacheGeometry) -> tuple[str, int, int] | None:
    """The first layer storing another length than its type keeps: ``(message, stored, expected)``."""
    for step in record.steps:
        seen = record.plan.seen(step.step)
        for layer, state in zip(geometry.layers, step.layers, strict=False):
            if not layer.keeps_kv or state.keys_shape is None:
                continue
            want = layer.stored_length(seen, record.max_cache_len, record.plan.prompt_length)
            got = state.keys_shape[-2]
            if got != want:
                rule = "the preallocated length" if record.max_cache_len else (
                    f"the prompt + min(decoded tokens, window-1) for window {layer.window}" if layer.kind == REFERENCE_SLIDING
                    else f"min(tokens, window-1) for window {layer.window}" if layer.window else "every token seen"
                )
                return (
                    f"layer {layer.index} ({layer.reason}) stores {got} positions after "
                    f"{record.plan.when(step.step)} ({seen} tokens seen), expected {want} ({rule})",
                    got, want,
                )
    return None


def shapes(record: ProbeRecord, geometry: CacheGeometry, explanation: str) -> CheckResult:
    """Every layer's K and V are ``[B, H_kv, S_layer, head_dim]`` from the config; no-K/V layers keep none."""
    batch = record.plan.batch_size
    no_kv = [layer.index for layer in geometry.layers if not layer.keeps_kv]
    details = {"no_kv_layers": no_kv, "kv_layers": len(geometry.kv_layers), "geometry": explanation}
    for step in record.steps:
        omitted = geometry.layers[len(step.layers):]
        if len(step.layers) > len(geometry.layers) or any(layer.keeps_kv for layer in omitted):
            message = f"cache has {len(step.layers)} layers, the config has {len(geometry.layers)} decoder layers"
            figure = Figure(len(step.layers), len(geometry.layers), "layers", "equal")
            return CheckResult("shapes", False, f"{len(step.layers)} layers", f"{len(geometry.layers)} layers", message, details, figure)
        seen = record.plan.seen(step.step)
        for layer, state in zip(geometry.layers, step.layers, strict=False):
            problem = _layer_shape_problem(layer, state, batch, seen, record)
            if problem:
                when = record.plan.when(step.step)
                message = f"after {when}, layer {layer.index} ({state.layer_class}; {layer.reason}): {problem.text}; {explanation}"
                figure = Figure(problem.got, problem.want, SHAPE_UNIT, "equal")
                return CheckResult("shapes", False, _shape_text(problem.got), _shape_text(problem.want), message, details, figure)
    last = record.steps[-1]
    first_kv = next((s for s, layer in zip(last.layers, geometry.layers, strict=False) if layer.keeps_kv), None)
    shape = list(first_kv.keys_shape) if first_kv and first_kv.keys_shape else None
    listed = f"; layers keeping no K/V: {no_kv}" if no_kv else ""
    message = f"{len(geometry.kv_layers)} K/V layers match [B, H_kv, S_layer, head_dim] ({explanation}){listed}"
    figure = Figure(shape, shape, SHAPE_UNIT, "equal")
    return CheckResult("shapes", True, _shape_text(shape), _shape_text(shape), message, details, figure)


#: Unit of a shapes figure (the keys of one layer).
SHAPE_UNIT = "[B, H_kv, S_layer, head_dim]"


def _shape_text(shape: list[int] | None) -> str:
    return str(shape) if shape is not None else "no K/V"


class _ShapeProblem(NamedTuple):
    text: str
    got: list[int] | None
    """The stored shape (``None``: no K/V)."""
    want: list[int] | None
    """The shape the config asks for (``None``: no K/V)."""


def _layer_shape_problem(layer: LayerGeometry, state: LayerState, batch: int, seen: int, record: ProbeRecord) -> _ShapeProblem | None:
    if not layer.keeps_kv:
        if state.keys_shape is not None:
            text = f"config says this layer keeps no K/V, but the cache stores keys {list(state.keys_shape)}"
            return _ShapeProblem(text, list(state.keys_shape), None)
        return None
    want_k, want_v = layer.expected_shapes(batch, seen, record.max_cache_len, record.plan.prompt_length)
    if state.keys_shape is None or state.values_shape is None:
        return _ShapeProblem("expected K/V tensors, the cache layer holds none", None, list(want_k))
    stored: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = (
        ("keys", state.keys_shape, want_k), ("values", state.values_shape, want_v),
    )
    for name, got, want in stored:
        if tuple(got) != want:
            hint = ""
            if len(got) == 4 and got[1] != want[1] and got[1] % max(want[1], 1) == 0:
                hint = f" (stores {got[1]} heads: expanded to the query-head count instead of H_kv={want[1]}?)"
            return _ShapeProblem(f"{name} {list(got)} != expected {list(want)} [B, H_kv, S, head_dim]{hint}", list(got), list(want))
    want_dtype = STORED_DTYPE.get(record.plan.cache, record.dtype)
    if state.dtype != want_dtype:
        return _ShapeProblem(f"K/V stored as {state.dtype}, expected {want_dtype} (the model runs in {record.dtype}, cache "
                             f"{record.plan.cache})", list(state.keys_shape), list(want_k))
    return None


def cache_bytes(record: ProbeRecord, geometry: CacheGeometry) -> CheckResult:
    """Measured K/V tensor bytes equal ``2 × L × H_kv × d_head × N × B × bytes`` (per layer), exactly."""
    if record.quant_config is not None:
        return _int_quantized_bytes(record, geometry, record.quant_config)
    stored = STORED_DTYPE.get(record.plan.cache)
    per_value = BYTES_PER_VALUE[stored or record.dtype]
    scales = SCALES_PER_LAYER * SCALE_BYTES * len(geometry.kv_layers) if stored else 0
    batch = record.plan.batch_size
    trace = []
    for step in record.steps:
        seen = record.plan.seen(step.step)
        measured = sum(state.kv_bytes for state in step.layers)
        expected = geometry.expected_bytes(batch, seen, record.max_cache_len, per_value, record.plan.prompt_length) + scales
        trace.append((measured, expected))
        if measured != expected:
            ratio = measured / expected if expected else float("inf")
            message = (
                f"after {record.plan.when(step.step)} ({seen} tokens) the cache holds "
                f"{measured:,} bytes of K/V, the formula gives {expected:,} (× {ratio:.3g}); "
                + _formula_text(geometry, batch, seen, record, per_value)
            )
            figure = Figure(measured, expected, "B", "equal")
            return CheckResult("bytes", False, f"{measured:,} B", f"{expected:,} B", message, {"bytes_trace": trace}, figure)
    measured, expected = trace[-1]
    message = f"{measured:,} bytes = formula at every step; " + _formula_text(geometry, batch, record.plan.seen(record.steps[-1].step), record, per_value)
    figure = Figure(measured, expected, "B", "equal")
    return CheckResult("bytes", True, f"{measured:,} B", f"{expected:,} B", message, {"bytes_trace": trace}, figure)


def _formula_text(geometry: CacheGeometry, batch: int, seen: int, record: ProbeRecord, per_value: int) -> str:
    kv = geometry.kv_layers
    if not kv:
        return "no layer keeps K/V"
    first = kv[0]
    text = (
        f"Σ over {len(kv)} K/V layers of (d_k {first.k_head_dim} + d_v {first.v_head_dim}) × H_kv {first.kv_heads}"
        f" × S_layer × B {batch} × {per_value} bytes (S_layer = {first.stored_length(seen, record.max_cache_len, record.plan.prompt_length)} for layer {first.index})"
    )
    stored = STORED_DTYPE.get(record.plan.cache)
    if stored is None:
        return text
    residual = sum(state.residual_bytes for state in record.steps[-1].layers)
    return (
        f"{text} of {stored} values, + {SCALES_PER_LAYER} float32 scales ({SCALE_BYTES} B each) per layer; "
        f"full-precision residual: {residual:,} B (the fp8 backend keeps none)"
    )


def _int_quantized_bytes(record: ProbeRecord, geometry: CacheGeometry, config: dict[str, Any]) -> CheckResult:
    """quanto/HQQ: packed bits + a scale and a zero point per group + the full-precision residual, at every step, with
    the quantized/residual split the design gives (``formula.residual_split``), not the one the cache reports."""
    batch, value_bytes = record.plan.batch_size, BYTES_PER_VALUE[record.dtype]
    trace = []
    for step in record.steps:
        quantized, residual = residual_split(record.plan.prompt_length, step.step, config["residual_length"])
        measured = sum(state.kv_bytes for state in step.layers)
        expected = sum(int_quantized_bytes(layer, batch, quantized, residual, config, value_bytes) for layer in geometry.kv_layers)
        trace.append((measured, expected))
        text = (f"Σ over {len(geometry.kv_layers)} K/V layers of {quantized} tokens as {config['backend']} int{config['nbits']} "
                f"(numel × {config['nbits']}/8 packed bytes + a {record.dtype} scale and zero point per group of "
                f"{config['q_group_size']}) + {residual} residual tokens in {record.dtype} (residual_length {config['residual_length']})")
        if measured != expected:
            when = record.plan.when(step.step)
            message = f"after {when} the cache holds {measured:,} bytes of K/V, the design gives {expected:,}: {text}"
            return CheckResult("bytes", False, f"{measured:,} B", f"{expected:,} B", message, {"bytes_trace": trace},
                               Figure(measured, expected, "B", "equal"))
    measured, expected = trace[-1]
    return CheckResult("bytes", True, f"{measured:,} B", f"{expected:,} B", f"{measured:,} bytes = the design at every step; {text}",
                       {"bytes_trace": trace}, Figure(measured, expected, "B", "equal"))


def generate(record: ProbeRecord, tolerance: Tolerance, gen: GenerateRecord | None = None, name: str = "generate") -> CheckResult:
    """``generate()`` with and without the cache give the same greedy tokens (``gen``: another run than the probe's).

    A divergence is accepted only outside float32 and only at a near-tie: where the uncached top-2
    logit margin is within the dtype's parity limit, rounding alone can pick either token.
    """
    gen = record.generate if gen is None else gen
    if gen is None:
        return CheckResult(name, True, "not run", "", "generate parity disabled for this cell")
    if gen.error is not None:
        return CheckResult(name, False, "error", "", f"generate() raised {gen.error}")
    steps = len(gen.cached_tokens[0]) if gen.cached_tokens else 0
    details = {"cached_tokens": gen.cached_tokens, "uncached_tokens": gen.uncached_tokens}
    if gen.first_divergence is None:
        figure = Figure(steps, steps, "tokens", "equal")
        return CheckResult(name, True, f"{steps}/{steps} equal", f"{steps}/{steps}", f"the same {steps} greedy tokens in every row", details, figure)
    limit = tolerance.limit(record.logit_scale)
    k = gen.first_divergence
    rows = [r for r, (a, b) in enumerate(zip(gen.cached_tokens, gen.uncached_tokens, strict=False)) if a[k] != b[k]]
    message = (
        f"greedy tokens part at generated token {k} (rows {rows}): cached {[gen.cached_tokens[r][k] for r in rows]} vs "
        f"uncached {[gen.uncached_tokens[r][k] for r in rows]}; uncached top-2 logit margin there {gen.margin_at_divergence:.3g}"
    )
    figure = Figure(k, steps, "tokens", "equal")
    near_tie = record.dtype != "float32" and gen.margin_at_divergence is not None and gen.margin_at_divergence <= limit
    if near_tie:
        return CheckResult(name, True, f"{k}/{steps} equal", f"{steps}/{steps}", message + f" ≤ parity limit {limit:.3g}: a near-tie", details, figure)
    return CheckResult(name, False, f"{k}/{steps} equal", f"{steps}/{steps}", message + f" > parity limit {limit:.3g}", details, figure)


def path_check(record: ProbeRecord, name: str, tolerance: Tolerance, geometry: CacheGeometry) -> CheckResult:
    """An extra cache path (ragged batch, prefix reuse): parity at every step, growth by one, shapes at the end."""
    path = record.paths.get(name)
    if path is None:
        return CheckResult(name, True, "not run", "", f"{name} is not enabled for this cell")
    if path.error is not None:
        return CheckResult(name, False, "error", "", f"the {name} path raised {path.error}")
    limit = tolerance.limit(path.logit_scale)
    worst = path.step_max_abs_delta[path.worst_step]
    details = {"step_max_abs_delta": path.step_max_abs_delta, "tolerance": limit, "logit_scale": path.logit_scale,
               "seq_length_trace": path.seq_lengths}
    problems = []
    over = [k for k, d in enumerate(path.step_max_abs_delta) if d > limit]
    if path.replay is not None:
        details["selection_replay"] = replay_details(path.replay)
    states_differ = path.states is not None and bool(path.states.differing)
    replayed_differ = path.replayed_states is not None and bool(path.replayed_states.differing)
    rescued = bool(over or states_differ) and path.replay is not None and path.replay.agrees(limit) and not replayed_differ
    if rescued and path.replay is not None:
        replayed = max(path.replay.step_max_abs_delta)
        note = (f"[near-tie selections] not a cache fault: {path.replay.describe(limit)}; without the replay |Δ| {worst:.3g} "
                f"> {limit:.3g}, from rounding alone")
        over, worst = [], replayed
    if over:
        problems.append(
            f"cached logits leave {path.reference} from decode step {over[0]} (worst |Δ| {worst:.3g} at step "
            f"{path.worst_step}, batch row {path.worst_row}) > limit {limit:.3g}; per-step max |Δ|: "
            + ", ".join(f"{d:.2e}" for d in path.step_max_abs_delta)
        )
        details["diagnosis"] = "top-k ties" if path.topk_ties is not None else "cache fault"
        if path.topk_ties is not None:
            problems.append(f"[top-k ties] not a cache fault: {path.topk_ties.describe()}")
        elif over[0] == 0 and name in PREFILL_PATHS and record.prefill_split is not None:
            details["diagnosis"] = PREFILL_DIFFERS
            problems.append(f"[{PREFILL_DIFFERS}] its step 0 is a prefill into an empty cache, and the main decode's prefill "
                            f"differs already: {record.prefill_split.describe()}")
        if path.replay is not None:
            problems.append(path.replay.describe(limit))
    if states_differ and not rescued and path.states is not None:
        problems.append(f"after the extend the copy's cache differs from one prefill of the same {path.first_length} tokens: "
                        f"{path.states.summary()}")
    problems += _original_problems(path, limit)
    if path.api is not None:
        problems += path.api.problems
        problems += [f"{what}: |Δlogit| {delta:.3g} > limit {limit:.3g} against the uncached reference"
                     for what, delta in path.api.deltas.items() if delta > limit]
        details["api_deltas"] = path.api.deltas
        details["api_notes"] = path.api.notes
    expected = [path.first_length + k for k in range(len(path.seq_lengths))]
    if any(length is not None for length in path.seq_lengths) and path.seq_lengths != expected:
        problems.append(f"get_seq_length() trace {path.seq_lengths}, expected {expected}")
    seen = expected[-1]
    sized = replace(record, max_cache_len=path.max_cache_len) if path.max_cache_len is not None else record
    for layer, state in zip(geometry.layers, path.final_layers, strict=False):
        problem = _layer_shape_problem(layer, state, path.batch or record.plan.batch_size, seen, sized)
        if problem:
            problems.append(f"after the last step, layer {layer.index} ({layer.reason}): {problem.text}")
            break
    if not problems:
        message = f"{path.description}: max |Δlogit| {worst:.2e} ≤ {limit:.2e}; cache grew by one per step; shapes match"
        if path.states is not None and not states_differ:
            message += f"; after the extend {path.states.summary()}; the original prefix, extended again, gives the copy's logits"
        if path.api is not None:
            message += "; " + "; ".join([f"{what}: |Δ| {delta:.2e}" for what, delta in path.api.deltas.items()] + path.api.notes)
        if rescued:
            message += f"; {note}"
        return CheckResult(name, True, f"{worst:.2e}", f"{limit:.2e}", message, details, Figure(worst, limit, "logit"))
    text = f"{path.description}: " + "; ".join(problems)
    return CheckResult(name, False, f"{worst:.2e}", f"{limit:.2e}", text, details, Figure(worst, limit, "logit"))


def _original_problems(path: Any, limit: float) -> list[str]:
    """prefix_reuse: the original prefix cache must be left as it was while its copy is extended and decoded."""
    problems = []
    if path.original_changed is not None:
        problems.append(f"the original prefix cache's {path.original_changed} changed while its copy was extended and decoded: "
                        "the copy shares it (copy.deepcopy did not copy it)")
    if path.original_delta is not None and path.original_delta > limit:
        outside = "" if path.original_changed else " although none of its cache tensors changed: the copy advanced state kept outside the cache"
        problems.append(f"the original prefix cache, extended again by the same tokens, leaves the copy's extend by |Δ| "
                        f"{path.original_delta:.3g} > limit {limit:.3g}{outside}")
    return problems


def window(record: ProbeRecord, tolerance: Tolerance, geometry: CacheGeometry) -> CheckResult:
    """Each crossing (a prompt shorter than or equal to a window): parity, ``get_seq_length()`` P+k,
    every layer's stored shape, and mask sizes equal to the K/V ``update()`` returned, at every step."""
    crossed = record.window
    if crossed is None or crossed.not_applicable:
        return CheckResult("window", True, "not run", "", (crossed.not_applicable if crossed else None) or "window crossings disabled")
    if crossed.error is not None:
        return CheckResult("window", False, "error", "", f"the window crossings raised {crossed.error}")
    limit = tolerance.limit(crossed.logit_scale)
    worst = max(max(c.step_max_abs_delta) for c in crossed.crossings)
    details = {"windows": crossed.windows, "tolerance": limit, "logit_scale": crossed.logit_scale,
               "crossings": {c.prompt_length: {"step_max_abs_delta": c.step_max_abs_delta, "seq_length_trace": c.seq_lengths}
                             for c in crossed.crossings},
               **({"refused": crossed.refused} if crossed.refused else {})}
    decode = crossed.decode or record  # the decode whose prompt crossed (its cache length sets the expected shapes)
    problems = [f"prompt {c.prompt_length} ({_against(c.prompt_length, crossed.windows)}): {problem}"
                for c in crossed.crossings for problem in _crossing_problems(c, decode, geometry, limit)[:1]]
    figure = Figure(worst, limit, "logit")
    prompts = [c.prompt_length for c in crossed.crossings]
    through = f"{crossed.through}: " if crossed.through else ""
    if not problems:
        ends = sorted({c.prompt_length + len(c.step_max_abs_delta) - 1 for c in crossed.crossings})
        message = (f"{through}prompts {prompts} against windows {crossed.windows}, each decoded to {'/'.join(map(str, ends))} "
                   f"tokens: max |Δlogit| {worst:.2e} ≤ {limit:.2e}; get_seq_length() P+k, every layer's stored shape and "
                   "get_mask_sizes = the K/V update() returned, at every step")
        return CheckResult("window", True, f"{worst:.2e}", f"{limit:.2e}", message, details, figure)
    return CheckResult("window", False, f"{worst:.2e}", f"{limit:.2e}", through + "; ".join(problems), details, figure)


def chunked_prefill(record: ProbeRecord, tolerance: Tolerance, geometry: CacheGeometry) -> CheckResult:
    """The prompt prefilled in chunks equals one prefill: every chunk's logits at its positions, ``get_seq_length()``
    after each chunk, the stored shapes, every K/V and conv/recurrent state after the last chunk, and
    ``generate(prefill_chunk_size=...)``'s tokens (dynamic cells)."""
    chunked = record.chunked
    if chunked is None or chunked.not_applicable:
        why = (chunked.not_applicable if chunked else None) or "chunked_prefill is not enabled for this cell"
        return CheckResult("chunked_prefill", True, "not run", "", why)
    if chunked.error is not None:
        return CheckResult("chunked_prefill", False, "error", "", f"the chunked prefill raised {chunked.error}")
    limit = tolerance.limit(chunked.logit_scale)
    deltas = chunked.step_max_abs_delta
    worst = max(deltas)
    sizes = "+".join(str(step.length) for step in chunked.steps)
    what = f"the {record.plan.prompt_length}-token prompt in {len(chunked.steps)} cached forwards ({sizes}, prefill_chunk_size={chunked.chunk_size})"
    details: dict[str, Any] = {"chunk_max_abs_delta": deltas, "tolerance": limit, "logit_scale": chunked.logit_scale,
                               "seq_length_trace": [step.seq_length for step in chunked.steps]}
    if chunked.replay is not None:
        details["selection_replay"] = replay_details(chunked.replay)
    states = chunked.states
    if states is not None:
        details["states"] = {"compared": states.compared, "kv_compared": states.kv_compared,
                             "differing": [d.describe() for d in states.differing]}
    problems = _chunk_problems(chunked, record, geometry, limit)
    figure = Figure(worst, limit, "logit")
    rescued = bool(problems) and chunked.replay is not None and chunked.replay.agrees(limit) and not (
        chunked.replayed_states is not None and chunked.replayed_states.differing) and not _generate_problem(chunked, limit)
    if rescued and chunked.replay is not None:
        note = (f"[near-tie selections] not a cache fault: {chunked.replay.describe(limit)}; without the replay: "
                + "; ".join(problems))
        return CheckResult("chunked_prefill", True, f"{max(chunked.replay.step_max_abs_delta):.2e}", f"{limit:.2e}",
                           f"{what}: {note}", details, figure)
    if problems:
        details["diagnosis"] = diagnosis = "top-k ties" if chunked.topk_ties is not None else "cache fault"
        if chunked.topk_ties is not None:
            problems.append(f"not a cache fault: {chunked.topk_ties.describe()}")
        elif _first_chunk_over(chunked, limit) and record.prefill_split is not None:
            details["diagnosis"] = diagnosis = PREFILL_DIFFERS
            problems.append("its reference is one prefill into an empty cache, and the main decode's prefill differs "
                            f"already: {record.prefill_split.describe()}")
        if chunked.replay is not None:
            problems.append(chunked.replay.describe(limit))
        return CheckResult("chunked_prefill", False, f"{worst:.2e}", f"{limit:.2e}", f"[{diagnosis}] {what}: " + "; ".join(problems),
                           details, figure)
    message = (f"{what} equals one prefill: max |Δlogit| {worst:.2e} ≤ {limit:.2e} over every chunk's positions; "
               f"get_seq_length() {'→'.join(str(step.seq_length) for step in chunked.steps)}; {states.summary() if states else ''}")
    gen = chunked.generate
    if gen is not None:
        message += (f"; generate(prefill_chunk_size={chunked.chunk_size}): {gen.not_applicable}" if gen.not_applicable else
                    f"; generate(prefill_chunk_size={chunked.chunk_size}) picks the plain generate()'s {len(gen.plain_tokens[0])} tokens"
                    + (f", logits within {max(gen.step_max_abs_delta):.2e}" if gen.step_max_abs_delta else ""))
    return CheckResult("chunked_prefill", True, f"{worst:.2e}", f"{limit:.2e}", message, details, figure)


def _first_chunk_over(chunked: Any, limit: float) -> bool:
    """Whether the first chunk whose logits leave one prefill reads a cache (a later chunk, not the first)."""
    return next((k for k, step in enumerate(chunked.steps) if step.max_abs_delta > limit), 0) > 0


def _chunk_problems(chunked: Any, record: ProbeRecord, geometry: CacheGeometry, limit: float) -> list[str]:
    """What the chunked prefill got wrong, first the first chunk whose logits leave one prefill, then the caches."""
    problems = []
    over = [k for k, step in enumerate(chunked.steps) if step.max_abs_delta > limit]
    if over:
        step = chunked.steps[over[0]]
        writers = "chunk 1" if over[0] == 1 else f"chunks 1-{over[0]}"
        reads = f", the first to read the cache {writers} wrote" if over[0] else ""
        problems.append(
            f"chunk {over[0] + 1} (tokens {step.start}-{step.start + step.length - 1}{reads}) leaves one prefill: |Δ| "
            f"{step.max_abs_delta:.3g} at position {step.worst_position}, batch row {step.worst_row} > limit {limit:.3g}; "
            "per-chunk max |Δ|: " + ", ".join(f"{d:.2e}" for d in chunked.step_max_abs_delta))
    states = chunked.states
    if states is not None and states.differing:
        problems.append(f"after the last chunk the cache differs from one prefill's: {states.summary()}")
        if chunked.boundary is not None:
            tokens, first = chunked.boundary
            problems.append(f"first at the chunk boundary after {tokens} tokens (against one prefill of {tokens}): {first.differing[0].describe()}")
    elif over:
        problems.append("every K/V and conv/recurrent state equals one prefill's: suspect the chunk's attention mask or positions")
    trace = [step.seq_length for step in chunked.steps]
    expected = [step.start + step.length for step in chunked.steps]
    if any(length is not None for length in trace) and trace != expected:
        problems.append(f"get_seq_length() after each chunk {trace}, expected {expected}")
    for layer, state in zip(geometry.layers, chunked.final_layers, strict=False):
        problem = _layer_shape_problem(layer, state, record.plan.batch_size, record.plan.prompt_length, record)
        if problem:
            problems.append(f"after the last chunk, layer {layer.index} ({state.layer_class}; {layer.reason}): {problem.text}")
            break
    generated = _generate_problem(chunked, limit)
    return problems + ([generated] if generated else [])


def _generate_problem(chunked: Any, limit: float) -> str | None:
    """Where ``generate(prefill_chunk_size=...)`` leaves the plain cached generate(): its tokens, else its logits."""
    gen = chunked.generate
    if gen is None or gen.not_applicable:
        return None
    call = f"generate(prefill_chunk_size={chunked.chunk_size})"
    if gen.error is not None:
        return f"{call} raised {gen.error}"
    over = [k for k, delta in enumerate(gen.step_max_abs_delta) if delta > limit]
    logits = (f"its logits leave the plain call's from generated token {over[0]} (|Δ| {gen.step_max_abs_delta[over[0]]:.3g} > "
              f"limit {limit:.3g}; per-token max |Δ|: " + ", ".join(f"{d:.2e}" for d in gen.step_max_abs_delta) + ")") if over else ""
    if gen.first_divergence is None:
        return f"{call}'s greedy tokens equal the plain cached generate()'s, but {logits}" if over else None
    k = gen.first_divergence
    rows = [r for r, (a, b) in enumerate(zip(gen.chunked_tokens, gen.plain_tokens, strict=True)) if a[k] != b[k]]
    return (f"{call}'s greedy tokens part from the plain cached generate()'s at generated token {k} (rows {rows}: "
            f"{[gen.chunked_tokens[r][k] for r in rows]} vs {[gen.plain_tokens[r][k] for r in rows]})"
            + (f"; {logits}" if over else ""))


def _against(prompt: int, windows: list[int]) -> str:
    return ", ".join(f"{'shorter than' if prompt < w else 'equal to' if prompt == w else 'longer than'} window {w}" for w in windows)


def _crossing_problems(crossing: Any, record: ProbeRecord, geometry: CacheGeometry, limit: float) -> list[str]:
    """What went wrong in one crossing, first problem first: logits, length trace, stored shapes, mask sizes."""
    problems = []
    over = [k for k, delta in enumerate(crossing.step_max_abs_delta) if delta > limit]
    if over:
        k = over[0]
        problems.append(f"cached logits leave the uncached reference from {'the prefill' if k == 0 else f'decode step {k}'} "
                        f"(|Δ| {crossing.step_max_abs_delta[k]:.3g} > limit {limit:.3g}; steps over the limit {over}; "
                        "per-step max |Δ|: " + ", ".join(f"{d:.2e}" for d in crossing.step_max_abs_delta) + ")")
    expected = [crossing.prompt_length + k for k in range(len(crossing.seq_lengths))]
    if any(length is not None for length in crossing.seq_lengths) and crossing.seq_lengths != expected:
        problems.append(f"get_seq_length() trace {crossing.seq_lengths}, expected {expected}")
    for step, states in enumerate(crossing.layers):
        seen = crossing.prompt_length + step
        for layer, state in zip(geometry.layers, states, strict=False):
            problem = _layer_shape_problem(layer, state, record.plan.batch_size, seen, record)
            if problem:
                when = "the prefill" if step == 0 else f"decode step {step}"
                problems.append(f"after {when} ({seen} tokens seen), layer {layer.index} ({state.layer_class}; {layer.reason}): {problem.text}")
                break
        else:
            continue
        break
    problems += crossing.mask_problems[:1]
    return problems


def between_calls(record: ProbeRecord, tolerance: Tolerance) -> CheckResult:
    """``generate()`` called again through the same model gives the tokens it must, and leaves the user's arguments; a
    call continued from its returned cache also gives the one long call's logits within the parity limit."""
    calls = record.calls
    if calls is None:
        return CheckResult("between_calls", True, "not run", "", "between_calls is not enabled for this cell")
    checked, problems = list(calls.checked), list(calls.problems)
    details: dict[str, Any] = {"checked": checked, "problems": problems, "not_made": calls.not_made}
    continued = calls.continued
    if continued is not None:
        limit = tolerance.limit(continued.logit_scale)
        details["continued_max_abs_delta"] = max(continued.deltas, default=0.0)
        leaving = next((k for k, delta in enumerate(continued.deltas) if delta > limit), None)
        if leaving is None and continued.what in checked:
            checked[checked.index(continued.what)] = (f"{continued.what} (its logits within {limit:.3g} of the one long "
                                                      f"call's: max |Δlogit| {max(continued.deltas, default=0.0):.3g})")
        elif leaving is not None:
            words = (f"its logits leave the one long call's from generated token {continued.head + leaving} (max |Δlogit| "
                     f"{continued.deltas[leaving]:.3g}, limit {limit:.3g}; {max(continued.deltas):.3g} over its "
                     f"{len(continued.deltas)} tokens)")
            if continued.what in checked:
                checked.remove(continued.what)
                problems.insert(0, f"{continued.what}: the same tokens, but {words}")
            else:
                problems = [f"{problem}; {words}" if problem.startswith(f"{continued.what}:") else problem for problem in problems]
    compared = calls.compared
    if not compared and calls.error is None:
        return CheckResult("between_calls", True, "not run", "", "; ".join(calls.not_made), details)
    if calls.error is not None:
        done = f" (after {len(checked)} comparisons that held: {'; '.join(checked)})" if checked else ""
        failed = "; ".join(problems) + "; " if problems else ""
        return CheckResult("between_calls", False, "error", "", f"{failed}{calls.error}{done}", details)
    if problems:
        message = "state left between generate() calls: " + "; ".join(problems)
        return CheckResult("between_calls", False, f"{len(problems)}/{compared} differ", f"0/{compared}", message, details)
    not_made = f" ({'; '.join(calls.not_made)})" if calls.not_made else ""
    return CheckResult("between_calls", True, f"0/{compared} differ", f"0/{compared}",
                       "; ".join(checked) + f": the same tokens{not_made}", details)


def _padded_generate(record: ProbeRecord, tolerance: Tolerance) -> CheckResult:
    gen = record.extras.get("padded_generate")
    if gen is None:
        return CheckResult("padded_generate", True, "not run", "", "padded_generate is not enabled for this cell")
    return generate(record, tolerance, gen, "padded_generate")


def _with_own_caches(record: ProbeRecord, geometry: CacheGeometry, explanation: str,
                     check: Callable[[ProbeRecord, CacheGeometry, str], CheckResult],
                     ran: Callable[[ProbeRecord], bool] = lambda own: True) -> CheckResult:
    """``check`` on the record's cache, then on each cache a part of the model keeps of its own (``own_caches``: a
    streaming audio encoder's, Bark's coarse stage) where ``ran`` says it ran there, each against its own config: the
    first that fails fails the check, named."""
    result = check(record, geometry, explanation)
    for own in record.own_caches if result.passed else []:
        if not ran(own.record):
            continue
        theirs = check(own.record, own.geometry, own.explanation)
        details = {**result.details, "own_caches": {**result.details.get("own_caches", {}), own.name: theirs.details}}
        if not theirs.passed:
            return replace(theirs, name=result.name, message=f"{own.name}: {theirs.message}", details=details)
        result = replace(result, message=f"{result.message}; {own.name}: {theirs.message}", details=details)
    return result


def _path(name: str, record: ProbeRecord, geometry: CacheGeometry, explanation: str, tolerance: Tolerance) -> CheckResult:
    """The path on the record's cache and on each own cache it ran on (Bark's coarse stage)."""
    return _with_own_caches(record, geometry, explanation, lambda r, g, e: path_check(r, name, tolerance, g),
                            ran=lambda own: name in own.paths)


#: Each check of the table, called with (record, geometry, config explanation, tolerance).
_RUN: dict[str, Callable[[ProbeRecord, CacheGeometry, str, Tolerance], CheckResult]] = {
    "parity": lambda record, geometry, explanation, tolerance: parity(record, tolerance),
    "kv_parity": lambda record, geometry, explanation, tolerance: kv_parity(record),
    "growth": lambda record, geometry, explanation, tolerance: _with_own_caches(
        record, geometry, explanation, lambda r, g, e: growth(r, g)),
    "shapes": lambda record, geometry, explanation, tolerance: _with_own_caches(record, geometry, explanation, shapes),
    "bytes": lambda record, geometry, explanation, tolerance: _with_own_caches(
        record, geometry, explanation, lambda r, g, e: cache_bytes(r, g)),
    "generate": lambda record, geometry, explanation, tolerance: generate(record, tolerance),
    **{name: partial(_path, name) for name in PATH_CHECKS},
    "beam": lambda record, geometry, explanation, tolerance: path_checks.beam(record.extras.get("beam"), tolerance, record.logit_scale),
    "padded_generate": lambda record, geometry, explanation, tolerance: _padded_generate(record, tolerance),
    "attn_agreement": lambda record, geometry, explanation, tolerance: path_checks.attention_agreement(
        record.extras.get("attn_agreement"), tolerance),
    "assisted": lambda record, geometry, explanation, tolerance: path_checks.assisted(record.extras.get("assisted"), tolerance),
    "quantized_kv": lambda record, geometry, explanation, tolerance: path_checks.quantized_kv(record.quantized),
    "window": lambda record, geometry, explanation, tolerance: window(record, tolerance, geometry),
    "chunked_prefill": lambda record, geometry, explanation, tolerance: chunked_prefill(record, tolerance, geometry),
    "between_calls": lambda record, geometry, explanation, tolerance: between_calls(record, tolerance),
}
#: Checks that read a record the runner adds beside the probe's (``ProbeRecord.extras``).
EXTRA_CHECKS = ("beam", "padded_generate", "attn_agreement", "assisted")
if set(_RUN) != set(RECORD_CHECKS):  # the check table and its functions must name the same checks
    raise ImportError(f"kvconform.checks.record_checks binds {sorted(_RUN)}, the check table's record checks are {sorted(RECORD_CHECKS)}")


def run_check(name: str, record: ProbeRecord, geometry: CacheGeometry, explanation: str, tolerance: Tolerance) -> CheckResult:
    """One check of the table on one record."""
    return _RUN[name](record, geometry, explanation, tolerance)


def run_all(record: ProbeRecord, geometry: CacheGeometry, explanation: str, tolerance: Tolerance) -> dict[str, CheckResult]:
    """Every check on one record that its cell ran (the extra paths and records the probe made), keyed by check name."""
    return {name: run_check(name, record, geometry, explanation, tolerance) for name in RECORD_CHECKS if ran(name, record)}


def ran(name: str, record: ProbeRecord) -> bool:
    """Whether the cell's record holds a result of ``name`` (an extra path it ran and could take, an extra record)."""
    if name in PATH_CHECKS:
        return name in record.paths and not record.paths[name].not_applicable
    if name in EXTRA_CHECKS:
        return name in record.extras
    if name == "kv_parity":
        return record.kv_parity is not None
    if name == "window":
        return record.window is not None and not record.window.not_applicable
    if name == "chunked_prefill":
        return record.chunked is not None and not record.chunked.not_applicable
    if name == "between_calls":  # a call that raised counts: it is the check's failure
        return record.calls is not None and bool(record.calls.compared or record.calls.error)
    return name != "quantized_kv" or record.quantized is not None

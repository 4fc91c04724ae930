"""Checks of the generation paths and attention implementations (records from generation.py / attention.py)."""

from __future__ import annotations

from kvconform.matrix import Tolerance
from kvconform.probe.attention import AgreementRecord
from kvconform.probe.generation import BeamRecord
from kvconform.probe.quantized import IntQuantizedRecord, QuantizedKVRecord
from kvconform.results import CheckResult, Figure

#: A beam score is the mean log-probability of its tokens; a log-softmax moves by at most twice the
#: largest logit change, so cached and uncached scores may differ by twice the parity limit.
SCORE_LIMIT_FACTOR = 2.0


def beam(record: BeamRecord | None, tolerance: Tolerance, logit_scale: float) -> CheckResult:
    """Cached and uncached beam search return the same beams with scores within twice the parity limit."""
    if record is None:
        return CheckResult("beam", True, "not run", "", "beam search disabled for this cell")
    if record.error is not None:
        return CheckResult("beam", False, "error", "", f"beam search (num_beams={record.num_beams}) raised {record.error}")
    limit = SCORE_LIMIT_FACTOR * tolerance.limit(logit_scale)
    delta = record.max_score_delta
    details = {"cached_tokens": record.cached_tokens, "uncached_tokens": record.uncached_tokens,
               "cached_scores": record.cached_scores, "uncached_scores": record.uncached_scores, "tolerance": limit}
    what = f"num_beams={record.num_beams}, {len(record.cached_tokens)} returned beams"
    if record.first_divergence is not None:
        k = record.first_divergence
        rows = [r for r, (a, b) in enumerate(zip(record.cached_tokens, record.uncached_tokens, strict=False)) if a[k] != b[k]]
        message = (
            f"{what}: cached beams leave the uncached beams at generated token {k} (returned beams {rows}: cached "
            f"{[record.cached_tokens[r][k] for r in rows]} vs uncached {[record.uncached_tokens[r][k] for r in rows]}); "
            f"scores cached {_scores(record.cached_scores)} vs uncached {_scores(record.uncached_scores)}: "
            "suspect the cache reorder between steps (reorder_cache)"
        )
        return CheckResult("beam", False, f"token {k} differs", "same beams", message, details)
    if delta > limit:
        message = (f"{what}: same tokens, but beam scores differ by {delta:.3g} > {limit:.3g} (2 × parity limit): cached "
                   f"{_scores(record.cached_scores)} vs uncached {_scores(record.uncached_scores)}")
        return CheckResult("beam", False, f"{delta:.2e}", f"{limit:.2e}", message, details, Figure(delta, limit, "score"))
    message = f"{what}: the same beams, scores within {delta:.2e} ≤ {limit:.2e}"
    return CheckResult("beam", True, f"{delta:.2e}", f"{limit:.2e}", message, details, Figure(delta, limit, "score"))


def _scores(scores: list[float]) -> str:
    return "[" + ", ".join(f"{s:.4f}" for s in scores) + "]"


def attention_agreement(record: AgreementRecord | None, tolerance: Tolerance) -> CheckResult:
    """Two attention implementations' uncached logits agree within the float32 parity limit."""
    if record is None or record.not_applicable:
        why = (record.not_applicable if record else None) or "attn_agreement runs on cells of another attention only"
        return CheckResult("attn_agreement", True, "not run", "", why)
    limit = tolerance.limit(record.logit_scale)
    worst = record.position_max_abs_delta[record.worst_position]
    first, second = record.implementations
    details = {"position_max_abs_delta": record.position_max_abs_delta, "tolerance": limit, "logit_scale": record.logit_scale}
    over = [p for p, d in enumerate(record.position_max_abs_delta) if d > limit]
    if not over:
        message = f"uncached logits under {first} and {second} agree: max |Δ| {worst:.2e} ≤ {limit:.2e} over {len(record.position_max_abs_delta)} positions"
        return CheckResult("attn_agreement", True, f"{worst:.2e}", f"{limit:.2e}", message, details, Figure(worst, limit, "logit"))
    message = (
        f"uncached logits under {first} and {second} differ from position {over[0]} on (positions over the limit: {over}); "
        f"worst |Δ| {worst:.3g} at position {record.worst_position}, batch row {record.worst_row} > limit {limit:.3g} "
        f"(float32: {tolerance.atol:g} + {tolerance.rtol:g} × max|logit| {record.logit_scale:.3g})"
    )
    return CheckResult("attn_agreement", False, f"{worst:.2e}", f"{limit:.2e}", message, details, Figure(worst, limit, "logit"))


def quantized_kv(record: QuantizedKVRecord | IntQuantizedRecord | None) -> CheckResult:
    """The fp8 cache stores what its documented design stores: the frozen scale, and every value's float8 round trip."""
    if record is None:
        return CheckResult("quantized_kv", False, "not run", "", "no quantized layer was filled (the model never updated the cache)")
    if isinstance(record, IntQuantizedRecord):
        return int_quantized_kv(record)
    details = {"worst_excess": record.worst_excess, "first_layer": record.first_layer,
               "saturated_fraction": record.saturated_fraction, "max_ratio_to_scale": record.max_ratio_to_scale}
    saturation = (f"saturation (by design, not a fault): {record.saturated_fraction:.1%} of the K/V values exceed 448 × their "
                  f"frozen scale (up to {record.max_ratio_to_scale:.3g} ×) and are stored as ±448 × scale")
    if record.scale_problem is not None:
        return CheckResult("quantized_kv", False, "scale", "amax/448", f"{record.scale_problem}; {saturation}", details)
    if record.worst_excess <= 1.0:
        message = (f"every layer stores the float8_e4m3fn round trip of the design's {record.tokens} tokens with scales frozen at "
                   f"the first update's amax / 448 (worst {record.worst_excess:.2f} of one rounding step); {saturation}")
        return CheckResult("quantized_kv", True, f"{record.worst_excess:.2f} step", "1 step", message, details,
                           Figure(record.worst_excess, 1.0, "fp8 step"))
    message = (f"layer {record.first_layer}, position {record.first_position} ({record.first_tensor}): the dequantized cache "
               f"differs from the fp8 design (worst {record.worst_excess:.3g} rounding steps); {saturation}")
    return CheckResult("quantized_kv", False, f"{record.worst_excess:.3g} step", "1 step", message, details,
                       Figure(record.worst_excess, 1.0, "fp8 step"))


def int_quantized_kv(record: IntQuantizedRecord) -> CheckResult:
    """A quanto/HQQ cache stores what its residual design stores: the tokens since the last flush in full precision,
    the rest as packed integers whose scale and zero point (read by kvconform) give the design's quantized part."""
    limit = record.relative_limit * record.worst_scale
    details = {"worst_delta": record.worst_delta, "limit": limit, "quantized_tokens": record.quantized_tokens,
               "residual_tokens": record.residual_tokens, "round_trip_delta": record.round_trip_delta}
    split = f"{record.quantized_tokens} tokens quantized, {record.residual_tokens} in the full-precision residual"
    design = f"the quantization's own error (design vs full precision): {record.round_trip_delta:.3g}"
    figure = Figure(record.worst_delta, limit, "value")
    if record.problem is not None:
        return CheckResult("quantized_kv", False, f"{record.worst_delta:.3g}", f"{limit:.2g}",
                           f"{record.problem}; the design holds {split}; {design}", details, figure)
    message = (f"the design's split ({split}); the packed values dequantized with their own group's scale and zero "
               f"point give the design's quantized part (max |Δ| {record.worst_delta:.2g} ≤ {limit:.2g}); {design}")
    return CheckResult("quantized_kv", True, f"{record.worst_delta:.2g}", f"{limit:.2g}", message, details, figure)

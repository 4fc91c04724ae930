"""Checks of the generation paths and attention implementations (records from generation.py / attention.py)."""

from __future__ import annotations

from kvconform.matrix import Tolerance
from kvconform.probe.assisted import DRAFT_TOKENS, AssistedRecord, AssistedRun
from kvconform.probe.attention import AgreementRecord
from kvconform.probe.generation import BeamRecord
from kvconform.probe.quantized import IntQuantizedRecord, QuantizedKVRecord
from kvconform.results import CheckResult, Figure

#: A beam score is the mean log-probability of its tokens; a log-softmax moves by at most twice the
#: largest logit change, so cached and uncached scores may differ by twice the parity limit.
SCORE_LIMIT_FACTOR = 2.0


def beam(record: BeamRecord | None, tolerance: Tolerance, logit_scale: float) -> CheckResult:
    """Cached beam search returns the beams of the uncached one (quanto/HQQ: of the same search through the cache's
    residual design) with scores within twice the parity limit."""
    if record is None:
        return CheckResult("beam", True, "not run", "", "beam search disabled for this cell")
    if record.error is not None:
        return CheckResult("beam", False, "error", "", f"beam search (num_beams={record.num_beams}) raised {record.error}")
    limit = SCORE_LIMIT_FACTOR * tolerance.limit(logit_scale)
    delta = record.max_score_delta
    other = "uncached" if record.reference == "uncached" else "design's"
    details = {"cached_tokens": record.cached_tokens, "uncached_tokens": record.uncached_tokens,
               "cached_scores": record.cached_scores, "uncached_scores": record.uncached_scores, "tolerance": limit,
               "reference": record.reference}
    what = f"num_beams={record.num_beams}, {len(record.cached_tokens)} returned beams"
    if record.reference == "design":
        what += " against the same beam search through the cache's residual design"
    if record.first_divergence is not None:
        k = record.first_divergence
        rows = [r for r, (a, b) in enumerate(zip(record.cached_tokens, record.uncached_tokens, strict=False)) if a[k] != b[k]]
        message = (
            f"{what}: cached beams leave the {other} beams at generated token {k} (returned beams {rows}: cached "
            f"{[record.cached_tokens[r][k] for r in rows]} vs {other} {[record.uncached_tokens[r][k] for r in rows]}); "
            f"scores cached {_scores(record.cached_scores)} vs {other} {_scores(record.uncached_scores)}: "
            "suspect the cache reorder between steps (reorder_cache)"
        )
        return CheckResult("beam", False, f"token {k} differs", "same beams", message, details)
    if delta > limit:
        message = (f"{what}: same tokens, but beam scores differ by {delta:.3g} > {limit:.3g} (2 × parity limit): cached "
                   f"{_scores(record.cached_scores)} vs {other} {_scores(record.uncached_scores)}")
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


def assisted(record: AssistedRecord | None, tolerance: Tolerance) -> CheckResult:
    """Every drafter's assisted ``generate()`` returns greedy's tokens, its logits within the parity limit of one
    uncached pass up to where the tokens part; a part where every logit is within the limit is a near-tie."""
    if record is None or record.not_applicable:
        return CheckResult("assisted", True, "not run", "", (record.not_applicable if record else None) or "assisted decoding disabled")
    if record.error is not None:
        return CheckResult("assisted", False, "error", "", record.error)
    limit = tolerance.limit(record.logit_scale)
    worst = max((max(run.step_max_abs_delta, default=0.0) for run in record.runs), default=0.0)
    details = {"prompt": record.prompt, "greedy_tokens": record.greedy_tokens, "greedy_delta": record.greedy_delta,
               "tolerance": limit, "logit_scale": record.logit_scale,
               "runs": {run.drafter: {"tokens": run.tokens, "step_max_abs_delta": run.step_max_abs_delta,
                                      "forwards": [[f.start, f.tokens, f.cached] for f in run.forwards], "rejected": run.rejected,
                                      "assistant_calls": [[c.sequence, c.cached_before, c.returned, c.cached_after]
                                                          for c in run.assistant_calls],
                                      "assistant_kv_ratio": (run.assistant_kv.worst.ratio if run.assistant_kv is not None
                                                             and run.assistant_kv.worst is not None else None)}
                        for run in record.runs}}
    windows = f", past windows {record.windows}" if record.windows else ""
    what = (f"greedy generate() of {record.max_new_tokens} tokens after a {len(record.prompt)}-token prompt{windows}, "
            f"drafts of {DRAFT_TOKENS}")
    problems, notes = [], []
    for run in record.runs:
        problem, note = _assisted_run(run, len(record.prompt), limit, record.greedy_delta)
        problem = problem or _overlong(run, record.greedy_tokens, record.max_new_tokens)
        problems += [problem] if problem else []
        notes += [note] if note else []
    figure = Figure(worst, limit, "logit")
    coverage = "; ".join(_coverage(run) for run in record.runs if run.error is None)
    if problems:
        details["diagnosis"] = "cache fault" if any(not p.startswith("[length]") for p in problems) else "generate() length"
        return CheckResult("assisted", False, f"{worst:.2e}", f"{limit:.2e}", f"{what}: " + "; ".join(problems + notes)
                           + f" (coverage: {coverage})", details, figure)
    message = (f"{what}: every drafter returns greedy's tokens, logits within {worst:.2e} ≤ {limit:.2e} of the uncached "
               f"pass ({coverage})")
    if notes:
        message = f"{what}: " + "; ".join(notes) + f"; otherwise within {worst:.2e} ≤ {limit:.2e} ({coverage})"
    return CheckResult("assisted", True, f"{worst:.2e}", f"{limit:.2e}", message, details, figure)


def _assisted_run(run: AssistedRun, prompt: int, limit: float, greedy_delta: float) -> tuple[str | None, str | None]:
    """(problem, note) of one drafter's run: the main model's logits first, then the assistant's own cache."""
    name = _DRAFTER_NAMES.get(run.drafter, run.drafter)
    rollback = "; ".join(fault for fault in (_assistant_rollback(run), _assistant_kv_fault(run)) if fault) or None
    if run.error is not None:
        before = f"; before it, {rollback}" if rollback else ""
        return f"{name}: generate() raised {run.error}{before}", None
    problem, note = _main_logits(run, name, prompt, limit, greedy_delta)
    if problem is not None:
        return problem + (f"; and {rollback}" if rollback else ""), note
    if rollback:
        tokens = ("its tokens and logits equal greedy's (the main model verifies every draft)" if note is None
                  else "its tokens part from greedy's where the logits are within the limit")
        return f"[cache fault] {name}: {rollback}; {tokens}", note
    return None, note


def _main_logits(run: AssistedRun, name: str, prompt: int, limit: float, greedy_delta: float) -> tuple[str | None, str | None]:
    """(problem, note) of the main model's logits against the uncached reference."""
    over = [k for k, delta in enumerate(run.step_max_abs_delta) if delta > limit]
    part = len(run.step_max_abs_delta) - 1 if run.margin_at_part is not None else None
    if over and run.replay is not None and run.replay.agrees(limit):
        return None, f"[near-tie selections] {name}: not a cache fault: {run.replay.describe(limit)}"
    if over:
        k = over[0]
        tokens = (f"its tokens part from greedy's at generated token {part}" if part is not None
                  else "its tokens equal greedy's")
        replay = f"; {run.replay.describe(limit)}" if run.replay is not None else ""
        return (f"[cache fault] {name}: logits leave the uncached reference at generated token {k} (|Δ| "
                f"{run.step_max_abs_delta[k]:.3g} > limit {limit:.3g}), {_produced_by(run, prompt + k - 1)}; {tokens}; "
                "per-token max |Δ|: " + ", ".join(f"{d:.2e}" for d in run.step_max_abs_delta) + replay), None
    if part is not None and run.margin_at_part is not None and run.margin_at_part > 2 * limit:
        return None, (f"{name}: its tokens part from greedy's at generated token {part}, where its logits are within the "
                      f"limit of the uncached pass and greedy generate()'s are not (greedy's worst |Δ| {greedy_delta:.3g}): "
                      "greedy left the reference, which the generate and parity checks judge")
    if part is not None:
        return None, (f"[near tie] {name}: its tokens part from greedy's at generated token {part}, where every logit is "
                      f"within the limit (the uncached top-2 margin there {run.margin_at_part:.3g}): not a cache fault")
    return None, None


def _assistant_rollback(run: AssistedRun) -> str | None:
    """The first assistant ``generate()`` call whose cache leaves the sequence it drafts over, located."""
    faulty = next(((k, call) for k, call in enumerate(run.assistant_calls) if call.fault), None)
    if faulty is None:
        return None
    k, call = faulty
    return (f"the assistant's cache leaves the sequence it drafts over: its generate() call {k} (of "
            f"{len(run.assistant_calls)}) {call.fault}")


def _assistant_kv_fault(run: AssistedRun) -> str | None:
    """The assistant's cache after its last call, where its K/V leave a fresh pass of the assistant, located."""
    kv = run.assistant_kv
    if kv is None:
        return None
    if kv.problem is not None:
        return f"the assistant's cache after its last generate() call: {kv.problem}"
    if not kv.failing:
        return None
    first = min(kv.failing, key=lambda delta: (delta.first if delta.first is not None else delta.position, delta.layer))
    at = first.first if first.first is not None else first.position
    return (f"the assistant's cache after its last generate() call holds other K/V than a fresh pass of the assistant over "
            f"the sequence it returned: from layer {first.layer}, position {at} ({first.tensor}), worst |Δ| {first.delta:.3g} > "
            f"limit {first.limit:.3g} ({len(kv.failing)} of {kv.kv_layers} K/V layers over)")


def _overlong(run: AssistedRun, greedy: list[int], asked: int) -> str | None:
    """A run that equals greedy's tokens but returns more of them than ``max_new_tokens`` asked for."""
    if run.error is not None or len(run.tokens) <= len(greedy) or run.tokens[: len(greedy)] != greedy:
        return None
    return (f"[length] {_DRAFTER_NAMES.get(run.drafter, run.drafter)}: returns {len(run.tokens)} new tokens where "
            f"max_new_tokens asks for {asked} (greedy returns {len(greedy)}), its first {len(greedy)} greedy's: the accepted "
            "drafts and the bonus token overshot the length budget (a generate() fault, not the cache's)")


_DRAFTER_NAMES = {"self": "the model as its own assistant", "random": "a random assistant of the same architecture",
                  "prompt_lookup": "prompt lookup"}


def _produced_by(run: AssistedRun, position: int) -> str:
    """Which main-model forward computed the logits at ``position`` (the last one covering it) and the crop before it."""
    index = max((i for i, f in enumerate(run.forwards) if f.start <= position < f.start + f.tokens), default=None)
    if index is None:
        return "from no recorded forward of the main model"
    forward = run.forwards[index]
    fed = "the prefill with the first drafts" if index == 0 else f"1 token + {forward.tokens - 1} drafts"
    crop = f"; {run.rejected[index - 1]} drafts rejected before it" if index > 0 else ""
    held = (f"; the cache holds {forward.cached} tokens before it where the sequence holds {forward.start}: the crop before "
            f"it left {forward.cached - forward.start:+d} columns" if forward.cached != forward.start else "")
    return f"computed by main-model forward {index} (at position {forward.start}, {fed}{crop}{held})"


def _coverage(run: AssistedRun) -> str:
    capped = (" (the last burst capped at max_length)"
              if run.drafter != "prompt_lookup" and run.forwards and run.forwards[-1].tokens <= DRAFT_TOKENS else "")
    kv = run.assistant_kv
    held = (f", the assistant's K/V {kv.worst.ratio:.2g}× their limit" if kv is not None and kv.worst is not None and kv.problem is None
            else f", the assistant's K/V {run.assistant_kv_not_compared}" if run.assistant_kv_not_compared else "")
    return f"{run.drafter}: {len(run.forwards)} forwards, {sum(run.rejected)} drafts rejected{capped}{held}"

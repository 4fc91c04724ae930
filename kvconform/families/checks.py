"""The checks a family adds: the cross-attention half, the encoder running once, a text-only prompt.

Each reads a ``FamilyProbe`` (plain records); the shape and byte rules are the core checks' own,
applied to the cross-attention layers with the encoder length as their stored length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kvconform.checks import record_checks as checks
from kvconform.checks.table import CHECK_TABLE, FAMILY_CHECKS, PATH_CHECKS
from kvconform.families import CROSS_HALF
from kvconform.families.probe import CrossHalf, FamilyProbe
from kvconform.matrix import Tolerance
from kvconform.probe.calls import parted_at
from kvconform.results import CheckResult


def _cross(probe: FamilyProbe) -> CrossHalf:
    if probe.cross is None:
        raise ValueError("not an encoder-decoder cell: no cross-attention half")
    return probe.cross


def _as_cross(result: CheckResult, name: str) -> CheckResult:
    return replace(result, name=name, message=f"{CROSS_HALF} half: {result.message}", details={**result.details, "half": CROSS_HALF})


def _when(step: int) -> str:
    return "prefill" if step == 0 else f"decode step {step}"


def cross_growth(probe: FamilyProbe) -> CheckResult:
    """Every cross-attention layer holds the encoder length from the prefill on and never grows."""
    cross = _cross(probe)
    length = cross.encoder_length
    first = [next((s.keys_shape[-2] for s in step.layers if s.keys_shape is not None), None) for step in cross.record.steps]
    measured = "→".join(map(str, first))
    limit = "→".join([str(length)] * len(first))
    details = {"half": CROSS_HALF, "cross_length_trace": first, "encoder_length": length}
    if not cross.record.steps[0].layers:
        return CheckResult("cross_growth", False, "no cross cache", limit,
                           f"{CROSS_HALF} half: the cache has no cross-attention layers after the prefill", details)
    for step in cross.record.steps:
        for layer, state in zip(cross.geometry.layers, step.layers, strict=False):
            got = state.keys_shape[-2] if state.keys_shape is not None else 0
            if got != length:
                message = (f"{CROSS_HALF} half: layer {layer.index} stores {got} positions after {_when(step.step)}, "
                           f"expected the encoder length {length} (computed once at the prefill, never grown); "
                           f"layer-0 trace {measured}")
                return CheckResult("cross_growth", False, measured, limit, message, details)
    message = f"{CROSS_HALF} half: every layer holds the encoder length {length} from the prefill on; trace {measured}"
    return CheckResult("cross_growth", True, measured, limit, message, details)


def cross_shapes(probe: FamilyProbe) -> CheckResult:
    """Cross-attention K/V are ``[B, H_kv, encoder length, head_dim]`` with the decoder's heads from the config."""
    cross = _cross(probe)
    return _as_cross(checks.shapes(cross.record, cross.geometry, cross.explanation), "cross_shapes")


def cross_bytes(probe: FamilyProbe) -> CheckResult:
    """Cross-attention K/V bytes equal ``2 × L × H_kv × d_head × encoder length × B × bytes`` at every step."""
    cross = _cross(probe)
    return _as_cross(checks.cache_bytes(cross.record, cross.geometry), "cross_bytes")


def encoder_once(probe: FamilyProbe) -> CheckResult:
    """The encoder ran once, and the cross-attention K/V written at the prefill are the tensors every step reads."""
    cross = _cross(probe)
    steps = len(cross.storage) - 1
    details = {"half": CROSS_HALF, "encoder_calls": cross.encoder_calls}
    if cross.encoder_calls != 1:
        message = f"the encoder ran {cross.encoder_calls} times during prefill and {steps} decode steps, expected once"
        return CheckResult("encoder_once", False, f"{cross.encoder_calls} runs", "1 run", message, details)
    for step, pointers in enumerate(cross.storage[1:], start=1):
        changed = [i for i, (now, then) in enumerate(zip(pointers, cross.storage[0], strict=False)) if now != then]
        if changed:
            message = (f"{CROSS_HALF} K/V of layer {changed[0]} were rewritten at decode step {step} (new tensors; "
                       f"layers {changed}): the cross-attention cache must be computed once at the prefill")
            return CheckResult("encoder_once", False, f"rewritten at step {step}", "written once", message, details)
    message = f"the encoder ran once; {CROSS_HALF} K/V written at the prefill are the same tensors at all {steps} decode steps"
    return CheckResult("encoder_once", True, "1 run", "1 run", message, details)


def text_only(probe: FamilyProbe, tolerance: Tolerance) -> CheckResult:
    """A text-only prompt (no image) on the vision-language model: parity and growth as for a causal LM, and its window
    crossings where the cell runs them (a prompt holding the image whole is longer than a shrunk window)."""
    if probe.text_only is None:
        raise ValueError("not a vision-language cell: no text-only record")
    parity = checks.parity(probe.text_only, tolerance)
    growth = checks.growth(probe.text_only, probe.geometry)
    crossed = checks.window(probe.text_only, tolerance, probe.geometry) if checks.ran("window", probe.text_only) else None
    passed = parity.passed and growth.passed and (crossed is None or crossed.passed)
    parts = [f"parity: {parity.message}"] + ([] if growth.passed else [f"growth: {growth.message}"])
    parts += [f"window: {crossed.message}"] if crossed is not None else []
    details = {**parity.details, "seq_length_trace": growth.details.get("seq_length_trace")}
    if crossed is not None:
        details["window"] = crossed.details
    return CheckResult("text_only", passed, parity.measured, parity.limit, "text-only prompt: " + "\n".join(parts), details)


def media_calls(probe: FamilyProbe, tolerance: Tolerance) -> CheckResult:
    """generate() through one model instance (text, an image, another image, text again): each call's logits within the
    parity limit of one uncached pass over its tokens, and the text-only prompt's tokens the same both times."""
    if probe.calls is None:
        raise ValueError("not a multimodal cell: no generate() calls recorded")
    calls = probe.calls
    details = {"generate_calls": [{"what": call.what, "tokens": call.tokens, "max_abs_delta": call.max_abs_delta,
                                   "error": call.error} for call in calls]}
    problems = [f"{call.what}: {call.error}" for call in calls if call.error]
    limits = {call.what: tolerance.limit(call.logit_scale) for call in calls}
    problems += [f"{call.what}: cached logits leave the uncached pass over its tokens (max |Δ| {call.max_abs_delta:.3g} > "
                 f"limit {limits[call.what]:.3g})" for call in calls if not call.error and call.max_abs_delta > limits[call.what]]
    first, again = calls[0], calls[-1]
    parted = None if first.error or again.error else parted_at(again.tokens, first.tokens)
    if parted is not None:
        problems.append(f"{again.what} returns other tokens than the first time, {parted}: state an earlier call left "
                        "on the model")
    worst = max((call.max_abs_delta for call in calls if not call.error), default=0.0)
    limit = min(limits.values()) if limits else 0.0
    order = ", ".join(call.what for call in calls)
    if problems:
        return CheckResult("media_calls", False, f"{worst:.3g}", f"{limit:.3g}",
                           f"generate() through one model instance ({order}): " + "; ".join(problems), details)
    return CheckResult("media_calls", True, f"{worst:.3g}", f"{limit:.3g}",
                       f"generate() through one model instance ({order}): every call within {worst:.3g} of its uncached "
                       "pass, the text-only prompt's tokens the same both times", details)


def codebook_parity(probe: FamilyProbe, tolerance: Tolerance) -> CheckResult:
    """Each codebook head's logits (rows ``b * K + k``) within the parity limit at every step; names the first head
    and step that leave it, and the heads that stay within it. A stage that decodes the heads with a cache of its own
    (Bark's coarse model) is judged on its own logit scale (its cache: the growth, shapes and bytes rows' ``own_caches``)."""
    heads = probe.codebook
    if heads is None:
        raise ValueError("not a codebook-decoder cell: no codebook heads")
    stage, k = heads.stage, heads.codebooks
    record = stage.record if stage is not None else probe.record
    limit = tolerance.limit(record.logit_scale)
    worst = [max(max(step[row] for row in range(head, len(step), k)) for step in heads.row_deltas) for head in range(k)]
    per_head = ", ".join(f"{head}: {delta:.2e}" for head, delta in enumerate(worst))
    details = {"codebook_max_abs_delta": worst, "tolerance": limit, "codebook_delays": list(heads.delays)}
    measured = f"{max(worst):.2e}"
    failing = [(step, row % k) for step, deltas in enumerate(heads.row_deltas) for row, delta in enumerate(deltas) if delta > limit]
    depth = heads.depth.problem(record.plan.batch_size) if heads.depth is not None else None
    if depth is not None:
        details["depth_cache"] = depth
        return CheckResult("codebook_parity", False, measured, f"{limit:.2e}", f"{depth}; max |Δlogit| per head {per_head}", details)
    owner = f"{stage.name}: " if stage is not None else ""
    if not failing:
        depth_heads = heads.depth
        where = (f" (head 0 the {depth_heads.owner}'s, heads 1..K-1 the {depth_heads.name}'s, its cache one position per "
                 "codebook, empty every frame)") if depth_heads is not None else ""
        if stage is not None:
            where = f" of its own cache ({stage.explanation})"
        message = f"{owner}every one of the {k} codebook heads within {limit:.2e} at every step{where}; max |Δlogit| per head {per_head}"
        return CheckResult("codebook_parity", True, measured, f"{limit:.2e}", message, details)
    step, head = failing[0]
    bad = sorted({h for _, h in failing})
    healthy = [h for h in range(k) if h not in bad]
    located = f"; {stage.record.divergence.describe()}" if stage is not None and stage.record.divergence is not None else ""
    message = (f"{owner}codebook head {head} leaves the uncached pass first, at {_when(step)} (delay {heads.delays[head]}); "
               f"heads {bad} exceed {limit:.2e}" + (f", heads {healthy} stay within it" if healthy else "")
               + f"; max |Δlogit| per head {per_head}{located}")
    details.update(first_failing_step=step, first_failing_codebook=head, failing_codebooks=bad)
    if located:
        details["divergence"] = located.removeprefix("; ")
    return CheckResult("codebook_parity", False, measured, f"{limit:.2e}", message, details)


def codebook_generate(probe: FamilyProbe, tolerance: Tolerance) -> CheckResult:
    """Greedy ``generate()`` on the text prompt: the same codes (MusicGen: the same waveform) with and without the
    cache, and every step's scores within the parity limit, with the guidance published checkpoints generate with."""
    heads = probe.codebook
    if heads is None:
        raise ValueError("not a codebook-decoder cell: no codebook heads")
    run = heads.generate
    details: dict[str, object] = {"generate_config": run.config}
    if run.error is not None:
        return CheckResult("codebook_generate", False, "raised", "same output", f"generate({run.config}) raised with {run.error}", details)
    limit = tolerance.limit(run.score_scale)
    scores = "scores not comparable" if run.score_delta is None else f"max |Δscore| {run.score_delta:.2e} (limit {limit:.2e})"
    details.update(score_max_abs_delta=run.score_delta, tolerance=limit)
    if not run.equal:
        return CheckResult("codebook_generate", False, "differs", "same output",
                           f"generate({run.config}): {run.output} with and without the cache differ: {run.detail}; {scores}", details)
    if run.score_delta is None or run.score_delta > limit:
        return CheckResult("codebook_generate", False, scores, "same scores",
                           f"generate({run.config}): the same {run.output}, but {scores} with and without the cache", details)
    return CheckResult("codebook_generate", True, f"{run.score_delta:.2e}", f"{limit:.2e}",
                       f"generate({run.config}) returns the same {run.output} with and without the cache; {scores}", details)


#: Each family-only check of the table, called with (family probe, tolerance).
_RUN: dict[str, Callable[[FamilyProbe, Tolerance], CheckResult]] = {
    "cross_growth": lambda probe, tolerance: cross_growth(probe),
    "cross_shapes": lambda probe, tolerance: cross_shapes(probe),
    "cross_bytes": lambda probe, tolerance: cross_bytes(probe),
    "encoder_once": lambda probe, tolerance: encoder_once(probe),
    "text_only": text_only,
    "media_calls": media_calls,
    "codebook_parity": codebook_parity,
    "codebook_generate": codebook_generate,
}
if set(_RUN) != set(FAMILY_CHECKS):  # the check table and its functions must name the same checks
    raise ImportError(f"kvconform.families.checks binds {sorted(_RUN)}, the check table's family checks are {sorted(FAMILY_CHECKS)}")


def run_family_check(name: str, probe: FamilyProbe, tolerance: Tolerance) -> CheckResult:
    """One family-only check of the table on one family probe."""
    return _RUN[name](probe, tolerance)


def run_all_family(probe: FamilyProbe, family: str, tolerance: Tolerance) -> dict[str, CheckResult]:
    """Every check of the table a cell of ``family`` and the record's cache runs, in table order (as the suites run them),
    but the cache paths the cell could not take (not applicable, skipped by the suites)."""
    cache = probe.record.plan.cache
    paths = (*PATH_CHECKS, "chunked_prefill")
    return {check.name: run_family_check(check.name, probe, tolerance) if check.name in FAMILY_CHECKS
            else checks.run_check(check.name, probe.record, probe.geometry, probe.explanation, tolerance)
            for check in CHECK_TABLE if family in check.families and (check.caches is None or cache in check.caches)
            and (check.name not in paths or checks.ran(check.name, probe.record)) and check.name not in probe.not_applicable}

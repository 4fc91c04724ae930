"""Run a model once per cell and record what the checks need, as plain data.

Prefill P prompt tokens, decode N greedy steps feeding the returned cache back, and compare every
step's cached logits with ONE uncached forward pass over the final sequence (causality makes its
logits at position P-1+k the reference for step k). Passes whose logits are read at a few positions only
ask for those (``logits_to_keep``, where the model takes it). Tensors never leave this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch

from kvconform.build.geometry import CacheGeometry, cache_geometry
from kvconform.build.models import Model
from kvconform.build.support import int_cache_config
from kvconform.compat import cache_keyword
from kvconform.matrix import QUANTIZED_KINDS, Tolerance
from kvconform.probe import fp8_design, int_design
from kvconform.probe.cache_io import (
    cache_implementation,
    compute_dtype,
    fixed_length_config,
    greedy,
    input_device,
    keep_logits,
    make_prompt,
    seq_length,
    zero_pad_ids,
)
from kvconform.probe.calls import CallsRecord, run_calls
from kvconform.probe.chunked import ChunkedRecord, run_chunked, run_chunked_generate
from kvconform.probe.crop import run_crop
from kvconform.probe.forwards import Forwards, causal_forwards
from kvconform.probe.fresh_kv import fresh_kv_pairs
from kvconform.probe.generate_inputs import GenerateInputs
from kvconform.probe.kv_compare import Divergence, KVParity, kv_parity, locate_divergence
from kvconform.probe.layer_state import LayerState, snapshot_layers
from kvconform.probe.quantized import IntQuantizedRecord, QuantizedKVRecord
from kvconform.probe.reference_health import PrefillSplit, PrefixInstability, TopkTies, prefix_instability, topk_ties
from kvconform.probe.reorder import run_reorder
from kvconform.probe.selections import ReplayError, SelectionReplay, replay_selections
from kvconform.probe.variants import PathNotApplicable, PathRecord, failed_path, run_prefix_reuse, run_ragged
from kvconform.probe.window import UpdateWatch, WindowRecord, run_window


@dataclass(frozen=True)
class ProbePlan:
    """What to run: sizes, cache kind and where to run it."""

    batch_size: int
    prompt_length: int
    decode_steps: int
    seed: int
    cache: str = "dynamic"
    device: str = "cpu"
    generate: bool = True
    #: Also decode a left-padded ragged batch against each row's own unpadded reference.
    ragged: bool = False
    #: Also continue a copied prefilled prefix cache and compare with the reference.
    prefix_reuse: bool = False
    #: Also crop a prefilled cache back and decode again (assisted decoding's rollback).
    crop: bool = False
    #: Also reorder a prefilled cache's rows and decode (beam search's cache operation).
    reorder: bool = False
    #: Also decode sliding/chunked layers from prompts shorter than and equal to the window.
    window: bool = False
    #: Also prefill the prompt in chunks (as ``generate(prefill_chunk_size=...)``) and compare with one prefill.
    chunked_prefill: bool = False
    #: Also call generate() again (continued, padded, a second prompt; the same arguments twice) after the first.
    calls: bool = False
    #: Run the K/V localization pass when a step's max |Δlogit| exceeds this tolerance.
    locate_tolerance: Tolerance | None = None
    #: Positions each decode step adds to the record's cache (a streaming audio encoder's own cache: its downsample factor).
    positions_per_step: int = 1
    #: A sampler that crops its cache back to this many prefix positions after every step (a flow-matching policy's
    #: prefix cache): each step then holds the prefix plus that step's ``positions_per_step``, and steps count from 0.
    cropped_to: int | None = None
    #: What the record's steps are called in messages.
    step_name: str = "decode step"

    def seen(self, step: int) -> int:
        """Positions the cache has taken after ``step`` (0: the prefill)."""
        if self.cropped_to is not None:
            return self.cropped_to + self.positions_per_step
        return self.prompt_length + self.positions_per_step * step

    def when(self, step: int) -> str:
        """``step`` in messages: the prefill, or the step by its name."""
        return "prefill" if step == 0 and self.cropped_to is None else f"{self.step_name} {step}"


def keeps_generate_logits(plan: ProbePlan) -> bool:
    """Whether the plain cached generate()'s logits are read after it: by the calls (between_calls) or by the chunked
    generate(), which runs on dynamic cells only."""
    return plan.calls or (plan.chunked_prefill and plan.cache == "dynamic")


def without_paths(plan: ProbePlan) -> ProbePlan:
    """``plan`` with every extra cache path off (a second record of the same cell: the text-only prompt)."""
    return replace(plan, ragged=False, prefix_reuse=False, crop=False, reorder=False, window=False, chunked_prefill=False,
                   calls=False)


@dataclass
class OwnCache:
    """A cache a part of the model keeps of its own beside the record's, snapshotted at the same steps: its record (its
    plan's ``prompt_length`` and ``positions_per_step`` in its own positions) and the geometry its config gives."""

    name: str
    record: ProbeRecord
    geometry: CacheGeometry
    explanation: str


@dataclass
class StepRecord:
    """Step 0 is the prefill; step k consumed the k-th generated token."""

    step: int
    seq_length: int | None
    """``get_seq_length()``; ``None`` for caches that keep only a recurrent state."""
    layers: list[LayerState]
    max_abs_delta: float
    worst_row: int
    worst_vocab_id: int
    cached_argmax: list[int]
    reference_argmax: list[int]
    reference_top2_margin: list[float]


@dataclass
class GenerateRecord:
    """Greedy ``generate()`` with and without the cache."""

    cached_tokens: list[list[int]]
    uncached_tokens: list[list[int]]
    first_divergence: int | None
    margin_at_divergence: float | None
    error: str | None = None
    """Set when ``generate()`` itself raised; the other checks still read the decode loop."""
    cached_logits: torch.Tensor | None = field(default=None, repr=False, compare=False)
    """The cached run's raw logits ``[steps, B, V]`` (``output_logits``) while the calls after it need them (not reported)."""


@dataclass
class ProbeRecord:
    """Everything the checks read about one cell."""

    plan: ProbePlan
    dtype: str
    cache_class: str
    max_cache_len: int | None
    steps: list[StepRecord]
    logit_scale: float
    nonfinite: str | None
    located: bool
    """Whether the K/V localization pass ran (``divergence`` is then its finding, or ``None``: K/V agree)."""
    divergence: Divergence | None
    prefix_instability: PrefixInstability | None
    """Set when the uncached forward itself is not causal on this input (then no cache is blamed)."""
    topk_ties: TopkTies | None
    """Set when the uncached pass's top-k selections were decided by exact ties (a degenerate build)."""
    generate: GenerateRecord | None
    prefill_split: PrefillSplit | None = None
    """Set when parity failed already at the prefill (no cache entry read yet): which side the split depends on."""
    kv_parity: KVParity | None = None
    """Full-precision cells: the decoded cache's K/V against one fresh pass (``None``: quantized, judged by design)."""
    replay: SelectionReplay | None = None
    """Set when parity failed on a model that selects (routers, indexers): the decode with the uncached selections."""
    paths: dict[str, PathRecord] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    reference: str = "the uncached reference"
    """What the cached logits are compared with (quantized cells: the fp8 design, see fp8_design.py)."""
    quantized: QuantizedKVRecord | IntQuantizedRecord | None = None
    """Quantized cells: the stored values against the design's (fp8: frozen scale; quanto/HQQ: residual design)."""
    quant_config: dict[str, Any] | None = None
    """Integer-quantized cells: the ``cache_config`` (backend, nbits, residual_length, q_group_size)."""
    full_precision_delta: float | None = None
    """Quantized cells: max |Δlogit| against the uncached full-precision pass (a finding, not a verdict)."""
    mask_compared: int = 0
    """Layer-steps of the decode whose ``get_mask_sizes`` was compared with the K/V ``update()`` returned."""
    mask_problems: list[str] = field(default_factory=list)
    """Decode steps where a layer's ``get_mask_sizes`` kv_length is not the K/V length its ``update()`` returned."""
    window: WindowRecord | None = None
    """Set when the cell crossed its windows from shorter prompts (``not_applicable``: no windowed layer)."""
    chunked: ChunkedRecord | None = None
    """Set when the cell prefilled its prompt in chunks against one prefill."""
    calls: CallsRecord | None = None
    """Set when the cell called generate() again after the generate check (state left between calls)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Records the runner adds beside the probe's: ``beam``, ``padded_generate``, ``attn_agreement``."""
    own_caches: list[OwnCache] = field(default_factory=list)
    """Caches a part of the model keeps beside this one, advanced at every step (a streaming audio encoder's): the growth,
    shapes and bytes checks hold each to its own config."""

    @property
    def max_abs_delta(self) -> float:
        return max(step.max_abs_delta for step in self.steps)


def _compare(cached: torch.Tensor, reference: torch.Tensor) -> tuple[float, int, int]:
    delta = (cached.float() - reference.float()).abs()
    delta = torch.nan_to_num(delta, nan=float("inf"))
    flat = int(delta.argmax())
    row, vocab_id = divmod(flat, delta.shape[-1])
    return float(delta.max()), row, vocab_id


def _top2_margin(logits: torch.Tensor) -> list[float]:
    top = logits.float().topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def step_record(step: int, seen: tuple[int | None, list[LayerState]], logits: torch.Tensor, ref: torch.Tensor) -> StepRecord:
    """Step ``step``'s cached next-token logits [rows, V] against the reference's: ``seen`` is the cache's
    ``get_seq_length()`` and layer snapshots after it."""
    delta, row, vocab_id = _compare(logits, ref)
    return StepRecord(step=step, seq_length=seen[0], layers=seen[1], max_abs_delta=delta, worst_row=row, worst_vocab_id=vocab_id,
                      cached_argmax=logits.argmax(-1).tolist(), reference_argmax=ref.argmax(-1).tolist(),
                      reference_top2_margin=_top2_margin(ref))


def describe_nonfinite(cached: list[torch.Tensor], reference: torch.Tensor) -> str | None:
    """Where the cached logits (first) or the reference's are not finite, in words; ``None``: both are."""
    for step, logits in enumerate(cached):
        if not torch.isfinite(logits).all():
            return f"cached logits at step {step} are not finite"
    if not torch.isfinite(reference).all():
        return "uncached reference logits are not finite"
    return None


@dataclass
class Decoded:
    """A cell's cached greedy decode: the cache it ends with, each step's next-token logits (0: the prefill's), the whole
    sequence, and the decode steps' mask sizes against the K/V ``update()`` returned (``UpdateWatch``)."""

    cache: Any
    logits: list[torch.Tensor]
    sequence: torch.Tensor
    mask_compared: int
    mask_problems: list[str]


def decode_greedy(forwards: Forwards, plan: ProbePlan, pick: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  snapshot: Callable[[Any], None], timings: dict[str, float], prefill_keep: int | None = None) -> Decoded:
    """The one decode loop of every family: prefill ``forwards.prompt`` into the cell's cache (``prefill_keep`` logits),
    then ``plan.decode_steps`` steps each feeding ``pick(ids so far, last logits)`` [rows, 1] with the cache returned;
    ``snapshot(cache)`` after the prefill and after every step. Every step's attention layers are watched: the mask
    size each advertises for the step against the K/V its ``update()`` hands attention."""
    prompt = forwards.prompt
    start = time.perf_counter()
    cache, output = forwards.cached(prompt, forwards.new_cache(plan.cache, prompt.shape[1] + plan.decode_steps), prefill_keep)
    timings["prefill_s"] = time.perf_counter() - start
    logits, sequence = [output.logits[:, -1, :]], prompt
    snapshot(cache)
    start = time.perf_counter()
    watch, problems = UpdateWatch(cache), []
    for step in range(1, plan.decode_steps + 1):
        token = pick(sequence, logits[-1])
        sequence = torch.cat([sequence, token], dim=1)
        (cache, output), found = watch.step(partial(forwards.extend, token, cache), 1, step)
        problems += found
        logits.append(output.logits[:, -1, :])
        snapshot(cache)
    watch.close()
    timings["decode_s"] = time.perf_counter() - start
    return Decoded(cache, logits, sequence, watch.compared, problems)


@torch.inference_mode()
def run_probe(model: Model, plan: ProbePlan) -> ProbeRecord:
    """Prefill, decode ``plan.decode_steps`` greedy steps, and compare with one uncached pass."""
    device = input_device(model)
    dtype = str(compute_dtype(model)).removeprefix("torch.")
    keyword = cache_keyword(model)
    total = plan.prompt_length + plan.decode_steps
    timings: dict[str, float] = {}

    prompt = make_prompt(plan.batch_size, plan.prompt_length, plan.seed, model.config.get_text_config(decoder=True).vocab_size, device)
    forwards = causal_forwards(model, prompt)
    lengths: list[int | None] = []
    layer_states: list[list[LayerState]] = []

    def snapshot(cache: Any) -> None:
        lengths.append(seq_length(cache))
        layer_states.append(snapshot_layers(cache))

    unfed = zero_pad_ids(model)
    decoded = decode_greedy(forwards, plan, lambda ids, logits: greedy(logits, unfed), snapshot, timings, prefill_keep=1)
    cache, cached_logits, full = decoded.cache, decoded.logits, decoded.sequence

    start = time.perf_counter()
    # The logits at positions P-1 … P+N-1 only: the reference of the prefill and of every decode step; the window
    # crossings, whose prompts are shorter, read every position.
    kept = full.shape[1] if plan.window else plan.decode_steps + 1
    uncached = model(input_ids=full, use_cache=False, **keep_logits(model, kept)).logits
    uncached_steps = reference_steps = uncached[:, -(plan.decode_steps + 1) :, :]
    timings["reference_s"] = time.perf_counter() - start
    quantized, full_precision_delta = None, None
    quant_config = int_cache_config(model.config, plan.cache) if plan.cache in QUANTIZED_KINDS[1:] else None
    if plan.cache in QUANTIZED_KINDS:  # judged against the backend's design (fp8_design.py, int_design.py); full precision is a finding
        start = time.perf_counter()
        full_precision_delta = max(_compare(logits, reference_steps[:, k, :])[0] for k, logits in enumerate(cached_logits))
        reference_steps, quantized = design_reference(model, forwards, full, plan.prompt_length, cache, quant_config, prefill_keep=1)
        timings["design_reference_s"] = time.perf_counter() - start

    steps = [step_record(step, (lengths[step], layer_states[step]), logits, reference_steps[:, step, :])
             for step, logits in enumerate(cached_logits)]

    finite_ref = torch.nan_to_num(reference_steps.float(), nan=0.0, posinf=0.0, neginf=0.0)
    logit_scale = float(finite_ref.abs().max())
    divergence, unstable, ties, replay, kv, pairs, split = None, None, None, None, None, None, None
    if plan.cache not in QUANTIZED_KINDS:  # one fresh pass's K/V, for the kv_parity check and the localization
        start = time.perf_counter()
        try:
            pairs = fresh_kv_pairs(model, keyword, plan.cache, cache, full)
            kv = kv_parity(pairs, total, preallocated=plan.cache != "dynamic")
        except Exception as exc:  # noqa: BLE001 - a crash of the fresh pass fails kv_parity only
            kv = KVParity(0, 0.0, None, problem=f"the fresh pass raised {type(exc).__name__}: {exc}"[:500])
        timings["kv_parity_s"] = time.perf_counter() - start
    limit = plan.locate_tolerance.limit(logit_scale) if plan.locate_tolerance is not None else float("inf")
    located = max(s.max_abs_delta for s in steps) > limit
    if located:
        start = time.perf_counter()
        reference = model(input_ids=full, use_cache=False).logits  # every position: the prefix-stability guard reads them
        unstable = prefix_instability(model, full, reference, [plan.prompt_length, total - 1], limit)
        ties = topk_ties(lambda: model(input_ids=full, use_cache=False))
        pairs = pairs if pairs is not None else fresh_kv_pairs(model, keyword, plan.cache, cache, full)
        divergence = locate_divergence(pairs, valid_length=total, preallocated=plan.cache != "dynamic")
        if steps[0].max_abs_delta > limit:
            split = prefill_split(causal_forwards(model, prompt), reference_steps[:, 0, :], steps[0].max_abs_delta, limit,
                                  type(cache).__name__)
        if plan.cache not in QUANTIZED_KINDS:  # the design reference is itself a cached decode
            replay = replay_selections(model, getattr(torch, dtype), lambda: decode_deltas(forwards, plan, full, reference_steps, 1),
                                       lambda: model(input_ids=full, use_cache=False))
        timings["locate_s"] = time.perf_counter() - start

    paths = run_paths(forwards, plan, uncached_steps, full, cache, partial(run_ragged, model, plan, keyword), timings)

    window = None
    if plan.window:
        start = time.perf_counter()
        window = window_path(forwards, plan, cache_geometry(model.config), uncached, full)
        timings["window_s"] = time.perf_counter() - start

    chunked = None
    if plan.chunked_prefill:
        start = time.perf_counter()
        chunked = run_chunked_path(forwards, plan, full)
        timings["chunked_prefill_s"] = time.perf_counter() - start

    generate = None
    if plan.generate:
        start = time.perf_counter()
        generate = run_generate(model, GenerateInputs.of_ids(prompt), plan.decode_steps, plan.cache,
                                keep_logits=keeps_generate_logits(plan))
        timings["generate_s"] = time.perf_counter() - start
    # The path users run, with generate()'s own cache; one of generate()'s token paths, so only where those run.
    if chunked is not None and chunked.steps and plan.cache == "dynamic" and plan.generate:
        start = time.perf_counter()
        plain = plain_run(generate)
        chunked.generate = run_chunked_generate(model, GenerateInputs.of_ids(prompt), plan.decode_steps, chunked.chunk_size, plain)
        timings["chunked_generate_s"] = time.perf_counter() - start
    calls = None
    if plan.calls:
        start = time.perf_counter()
        calls = run_calls(model, plan, generate if generate is not None and generate.error is None else None)
        timings["calls_s"] = time.perf_counter() - start

    if generate is not None:
        generate.cached_logits = None  # used: the record outlives the cell
    return ProbeRecord(
        plan=plan,
        dtype=dtype,
        cache_class=type(cache).__name__,
        max_cache_len=total if plan.cache == "static" else None,
        steps=steps,
        logit_scale=logit_scale,
        located=located,
        nonfinite=describe_nonfinite(cached_logits, reference_steps),
        divergence=divergence,
        kv_parity=kv,
        prefix_instability=unstable,
        topk_ties=ties,
        prefill_split=split,
        replay=replay,
        generate=generate,
        window=window,
        chunked=chunked,
        calls=calls,
        mask_compared=decoded.mask_compared,
        mask_problems=decoded.mask_problems,
        paths=paths,
        timings=timings,
        reference=reference_name(plan.cache, quant_config),
        quantized=quantized,
        quant_config=quant_config,
        full_precision_delta=full_precision_delta,
    )


def window_path(forwards: Forwards, plan: ProbePlan, geometry: CacheGeometry, reference: torch.Tensor,
                full: torch.Tensor) -> WindowRecord:
    """The window crossings of any family's ``forwards``; a crash fails the window check only."""
    try:
        return run_window(forwards, plan, geometry, reference, full)
    except PathNotApplicable as exc:
        return WindowRecord([], [], 0.0, not_applicable=str(exc))
    except Exception as exc:  # noqa: BLE001 - a crash of the crossings fails the window check only
        return WindowRecord([], [], 0.0, error=f"{type(exc).__name__}: {exc}"[:500])


def run_chunked_path(forwards: Forwards, plan: ProbePlan, full: torch.Tensor) -> ChunkedRecord:
    """The chunked prefill; where it fails, were its selections decided by ties, or by rounding (replayed)?"""
    run = partial(run_chunked, forwards, plan, full)
    try:
        record = run()
    except PathNotApplicable as exc:
        return ChunkedRecord(not_applicable=str(exc))
    except Exception as exc:  # noqa: BLE001 - a crash of the chunked prefill fails its check only
        return ChunkedRecord(error=f"{type(exc).__name__}: {exc}"[:500])
    limit = plan.locate_tolerance.limit(record.logit_scale) if plan.locate_tolerance is not None else float("inf")
    if max(record.step_max_abs_delta) > limit or (record.states is not None and record.states.differing):
        record.topk_ties = topk_ties(run)
        replayed: list[ChunkedRecord] = []

        def rerun() -> list[float]:
            replayed.append(run())
            return replayed[-1].step_max_abs_delta

        try:
            record.replay = replay_selections(forwards.model, forwards.dtype, rerun, lambda: forwards.uncached(full))
        except ReplayError:  # forwards whose ids it cannot trace: nothing concluded
            record.replay = None
        record.replayed_states = replayed[-1].states if replayed else None
    return record


def run_paths(forwards: Forwards, plan: ProbePlan, reference: torch.Tensor, full: torch.Tensor, decoded: Any,
              ragged: Callable[..., PathRecord] | None, timings: dict[str, float]) -> dict[str, PathRecord]:
    """The extra cache paths ``plan`` turns on, on any family's ``forwards``: ``reference`` is the uncached logits at
    positions P-1 … P+N-1, ``full`` the decoded sequence, ``decoded`` the main decode's cache; ``ragged(feed)`` the
    ragged path (causal LMs). A failing path is checked for top-k ties and replayed with the uncached selections."""
    paths = {}
    runs = {"prefix_reuse": lambda: run_prefix_reuse(forwards, plan, reference, full),
            "ragged": ragged,
            "crop": lambda: run_crop(forwards, plan, reference, full, decoded),
            "reorder": lambda: run_reorder(forwards, plan, full)}
    for name, run in runs.items():
        if getattr(plan, name) and run is not None:
            start = time.perf_counter()
            try:
                paths[name] = path = run()
                if plan.locate_tolerance is not None and _path_fails(path, plan.locate_tolerance.limit(path.logit_scale)):
                    path.topk_ties = topk_ties(run)  # a failing path: were its selections decided by ties?
                    if name != "reorder":  # reorder compares two cached runs: no uncached selections to replay
                        rerun = partial(ragged, path.fed) if name == "ragged" and ragged is not None else run
                        try:
                            path.replay = _replay_path(forwards, name, rerun, full, path)
                        except ReplayError:  # forwards whose ids it cannot trace (a prompt fed as embeddings): nothing concluded
                            path.replay = None
            except Exception as exc:  # noqa: BLE001 - a crash in one path fails that path's check only
                paths[name] = failed_path(name, exc)
            timings[f"{name}_s"] = time.perf_counter() - start
    return paths


def prefill_split(forwards: Forwards, reference: torch.Tensor, delta: float, limit: float, cache_class: str) -> PrefillSplit:
    """The failing prefill of ``forwards.prompt`` (with its media or encoder output) again into an empty config-less
    cache of plain layers, against the uncached pass's prefill logits ``reference`` [B, V]: does the split follow the
    cell's cache class? The same for every family."""
    try:
        _, output = forwards.cached(forwards.prompt, _plain_cache(forwards))
        plain: float | None = _compare(output.logits[:, -1, :], reference)[0]
    except Exception:  # noqa: BLE001 - e.g. linear-attention layers need their configured cache
        plain = None
    return PrefillSplit(delta, plain, cache_class, limit)


def _plain_cache(forwards: Forwards) -> Any:
    """A config-less ``DynamicCache`` (plain layers keeping every token); two of them where the cell's default cache has
    two halves (an encoder-decoder's ``EncoderDecoderCache``)."""
    from transformers import DynamicCache, EncoderDecoderCache

    if isinstance(forwards.default_cache(), EncoderDecoderCache):
        return EncoderDecoderCache(DynamicCache(), DynamicCache())
    return DynamicCache()


def _path_fails(path: PathRecord, limit: float) -> bool:
    """Whether a path's logits, its cache against one prefill, or its reused original fail at ``limit``."""
    return (max(path.step_max_abs_delta) > limit or (path.states is not None and bool(path.states.differing))
            or (path.original_delta or 0.0) > limit)


def _replay_path(forwards: Forwards, name: str, run: Callable[[], PathRecord], full: torch.Tensor,
                 path: PathRecord) -> SelectionReplay | None:
    """A failing path again with the uncached selections forced in: ragged's own per-row passes (``run`` feeds the
    tokens the path decoded), else the main one. The replayed run's cache comparison goes to ``path.replayed_states``."""
    reruns: list[PathRecord] = []

    def uncached() -> object:
        return run() if name == "ragged" else forwards.uncached(full)

    def replayed() -> list[float]:
        reruns.append(run())
        return reruns[-1].step_max_abs_delta

    replay = replay_selections(forwards.model, forwards.dtype, replayed, uncached)
    path.replayed_states = reruns[-1].states if reruns else None
    return replay


def decode_deltas(forwards: Forwards, plan: ProbePlan, full: torch.Tensor, reference_steps: torch.Tensor,
                  prefill_keep: int | None = None) -> list[float]:
    """The cell's prefill and decode fed ``full`` (the tokens the probe decoded), on any family's ``forwards``: per step
    max |Δ| to ``reference_steps`` (what a selection replay reruns)."""
    _, logits = _fed(forwards, full, plan.prompt_length, forwards.new_cache(plan.cache, full.shape[1]), prefill_keep)
    return [_compare(step_logits, reference_steps[:, step, :])[0] for step, step_logits in enumerate(logits)]


def _fed(forwards: Forwards, full: torch.Tensor, prompt_length: int, cache: Any, prefill_keep: int | None) -> tuple[Any, list[torch.Tensor]]:
    """``full``'s first ``prompt_length`` ids prefilled into ``cache`` (``prefill_keep`` logits), then the rest fed one by
    one: the cache it ends with and the next-token logits [B, V] of the prefill and of every step."""
    cache, output = forwards.cached(full[:, :prompt_length], cache, prefill_keep)
    logits = [output.logits[:, -1, :]]
    for position in range(prompt_length, full.shape[1]):
        cache, output = forwards.extend(full[:, position : position + 1], cache)
        logits.append(output.logits[:, -1, :])
    return cache, logits


def reference_name(cache: str, config: dict[str, Any] | None) -> str:
    """What a cell's cached logits are compared with, in words."""
    if config is not None:
        return (f"the {config['backend']} int{config['nbits']} design reference (residual_length {config['residual_length']}, "
                f"q_group_size {config['q_group_size']})")
    return "the fp8 design reference" if cache in QUANTIZED_KINDS else "the uncached reference"


def design_reference(model: Model, forwards: Forwards, full: torch.Tensor, prompt_length: int, cache: Any,
                     config: dict[str, Any] | None, prefill_keep: int | None = None,
                     ) -> tuple[torch.Tensor, QuantizedKVRecord | IntQuantizedRecord]:
    """The cell's prefill (``prefill_keep`` logits, as its decode kept) and decode of ``full`` through the backend's design
    on full-precision storage (fp8: ``config`` None), given any family's ``forwards``: its logits [B, N+1, V], and the
    real cache's stored values compared with the design's. ``model`` sizes the design cache (its decoder's layers)."""
    design = fp8_design.design_cache(model) if config is None else int_design.design_cache(model, config)
    design, logits = _fed(forwards, full, prompt_length, design, prefill_keep)
    record = (fp8_design.compare_with_design(cache, design) if config is None
              else int_design.compare_with_design(cache, design, config))
    return torch.stack(logits, dim=1), record


def plain_run(generate: GenerateRecord | None) -> tuple[list[list[int]], torch.Tensor] | None:
    """The cell's plain cached generate(): its tokens and raw logits, where it ran and kept them."""
    if generate is None or generate.error is not None or generate.cached_logits is None:
        return None
    return generate.cached_tokens, generate.cached_logits


def run_generate(model: Model, inputs: GenerateInputs, steps: int, cache: str = "dynamic", keep_logits: bool = False) -> GenerateRecord:
    """Greedy generate with (``cache_implementation`` of ``cache``) and without the cache; where they part, the uncached top-2
    margin. ``keep_logits``: keep the cached run's raw logits for the calls after it (their user clears them)."""
    try:
        runs = _generate_both(model, inputs, steps, cache, keep_logits)
    except Exception as exc:  # noqa: BLE001 - a generate() crash fails the generate check only
        return GenerateRecord([], [], None, None, error=f"{type(exc).__name__}: {exc}"[:500])
    new = inputs.prompt_length
    cached, uncached = runs[True].sequences[:, new:], runs[False].sequences[:, new:]
    differs = (cached != uncached).any(dim=0).nonzero()
    first = int(differs[0]) if len(differs) else None
    margin = None
    if first is not None:
        rows = (cached[:, first] != uncached[:, first]).nonzero().flatten().tolist()
        margins = _top2_margin(runs[False].scores[first])
        margin = min(margins[row] for row in rows)
    return GenerateRecord(
        cached_tokens=cached.tolist(), uncached_tokens=uncached.tolist(),
        first_divergence=first, margin_at_divergence=margin,
        cached_logits=torch.stack(runs[True].logits) if keep_logits else None,
    )


def _generate_both(model: Model, inputs: GenerateInputs, steps: int, cache: str, keep_logits: bool) -> dict[bool, Any]:
    runs = {}
    for use_cache in (True, False):
        config = fixed_length_config(model, steps, use_cache, output_scores=True, output_logits=use_cache and keep_logits,
                                     return_dict_in_generate=True,
                                     **inputs.config,
                                     **(cache_implementation(cache, model.config) if use_cache else {}))
        runs[use_cache] = model.generate(**inputs.kwargs, generation_config=config)
    return runs

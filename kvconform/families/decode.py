"""A family cell's probe: the causal probe's one decode loop, reference, diagnoses and cache paths, given a family's ``Driver``.

The ``Driver`` is what a family adds: its ``Forwards`` (how to prefill with an image or an encoder input, continue the
cache, run the uncached reference: the adapter every path takes), what greedy decoding may pick (forbidden ids,
``generate()``'s processors, a codebook delay pattern), the extra cache halves it snapshots (cross-attention, a streaming
encoder's own cache) and the geometry its window crossings read. Everything else is ``kvconform.probe.decode``'s:
``decode_greedy``, ``step_record``, ``design_reference`` (fp8, quanto, HQQ), ``decode_deltas`` (the selection replay),
``prefill_split``, ``run_paths``, ``run_chunked_path`` and ``window_path``; the checks read an ordinary ``ProbeRecord``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from kvconform.build.geometry import CacheGeometry
from kvconform.build.models import Model
from kvconform.build.support import int_cache_config
from kvconform.matrix import INT_QUANTIZED, QUANTIZED_KINDS
from kvconform.probe.cache_io import cache_layers, compute_dtype, greedy, seq_length
from kvconform.probe.chunked import ChunkedRecord
from kvconform.probe.decode import (
    ProbePlan,
    ProbeRecord,
    decode_deltas,
    decode_greedy,
    describe_nonfinite,
    design_reference,
    prefill_split,
    reference_name,
    run_chunked_path,
    run_paths,
    step_record,
    window_path,
)
from kvconform.probe.forwards import Forwards
from kvconform.probe.kv_compare import Divergence, KVParity, kv_parity, locate_divergence
from kvconform.probe.layer_state import LayerState, snapshot_layers
from kvconform.probe.reference_health import prefix_instability, topk_ties
from kvconform.probe.selections import ReplayError, replay_selections
from kvconform.probe.variants import PathNotApplicable, failed_path
from kvconform.probe.window import WindowRecord

#: Why the cache paths do not run where the model prepends a conditioning prefix to the ids (MusicGen Melody).
PREFIX_PATHS = ("not built for a model that prepends a conditioning prefix to the ids its cache then holds (the paths' "
                "positions and reference logits count the ids only)")


@dataclass
class Driver:
    """How to run one cell of a family: its forwards, and what greedy decoding may pick."""

    forwards: Forwards
    """The cell's forwards (``forwards.prompt``: the ids the cached run starts from, the decoder prompt or text around
    the image tokens); the paths take them too."""
    forbidden: set[int] = field(default_factory=set)
    """Ids greedy decoding must not pick (image placeholders and other special ids)."""
    extra_halves: dict[str, Callable[[Any], list[Any]]] = field(default_factory=dict)
    """Other per-layer halves of the cache to snapshot every step, by name (the cross-attention half)."""
    constrain: Callable[[torch.Tensor, int], torch.Tensor] | None = None
    """``(tokens [rows, 1], their position) -> tokens``: ids ``generate()`` forces (a codebook delay pattern)."""
    processor: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    """``(ids so far [rows, S], next-token logits [rows, V]) -> scores``: the logits processors ``generate()`` picks the
    greedy token through (Bark's suppressed ids, its alternating codebooks)."""
    head_rows: Callable[[torch.Tensor], torch.Tensor] | None = None
    """``logits [rows, V] -> [rows * K, V_k]``: each row's logits split into its K codebook heads (Bark's interleaved
    codebooks are id ranges of one head); ``None``: every row is one head."""
    offset: int = 0
    """Positions the model prepends to the ids (a conditioning prefix): its logits and cache hold them first."""
    after_decode: Callable[[], None] | None = None
    """Called once the cached decode and its reference are done, before the paths (the encoder's call counter stops)."""
    geometry: CacheGeometry | None = None
    """The geometry of the cache the decode grows (an encoder-decoder's self-attention half), where the cell's window
    crossings can read its windows; ``None``: no crossings."""

    def reference(self, ids: torch.Tensor) -> Any:
        return self.forwards.uncached(ids)

    def pick(self, ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """The greedy token [rows, 1] after ``ids`` [rows, S], through the processors and constraints ``generate()`` applies."""
        scores = logits if self.processor is None else self.processor(ids, logits.float())
        token = greedy(scores, self.forbidden)
        return token if self.constrain is None else self.constrain(token, ids.shape[1])


@dataclass
class FamilyRun:
    """The core record plus what only a family's own checks read."""

    record: ProbeRecord
    halves: dict[str, list[list[Any]]]
    """Per extra half, per step, the raw layer objects' snapshots (``LayerState`` lists)."""
    half_storage: dict[str, list[list[tuple[int, int] | None]]]
    """Per extra half, per step, each layer's (keys, values) storage pointers: a rewrite changes them."""
    final_cache: Any
    full: torch.Tensor
    row_deltas: list[list[float]]
    """Per step, each row's max |Δlogit| (a codebook decoder's rows are its codebook heads)."""


class _Uncached:
    """The reference as a model-like callable, for the reference-health guard."""

    def __init__(self, reference: Callable[[torch.Tensor], Any], offset: int) -> None:
        self.reference, self.offset = reference, offset

    def __call__(self, input_ids: torch.Tensor, use_cache: bool = False) -> Any:
        output = self.reference(input_ids)
        return SimpleNamespace(logits=output.logits[:, self.offset:]) if self.offset else output


def _storage(layers: list[Any]) -> list[tuple[int, int] | None]:
    out = []
    for layer in layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        out.append((keys.data_ptr(), values.data_ptr()) if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) else None)
    return out


class _Layers:
    """A cache stand-in whose ``layers`` are one half's layer objects (for ``snapshot_layers``)."""

    def __init__(self, layers: list[Any]) -> None:
        self.layers = layers


@torch.inference_mode()
def drive(model: Model, plan: ProbePlan, driver: Driver) -> FamilyRun:
    """Run the cached decode and the uncached reference for one family cell."""
    timings: dict[str, float] = {}
    forwards = driver.forwards
    prompt = forwards.prompt
    caches_seen: list[tuple[int | None, list[LayerState]]] = []
    halves: dict[str, list[list[LayerState]]] = {name: [] for name in driver.extra_halves}
    storage: dict[str, list[list[tuple[int, int] | None]]] = {name: [] for name in driver.extra_halves}
    # Every recorded tensor stays referenced until the decode ends: a freed one's memory could otherwise be handed to
    # its replacement, whose pointer would then read as the same tensor (a rewrite seen steps late, or not at all).
    held: list[Any] = []

    def snapshot(cache: Any) -> None:
        caches_seen.append((seq_length(cache), snapshot_layers(cache)))
        for name, layers_of in driver.extra_halves.items():
            layers = layers_of(cache)
            halves[name].append(snapshot_layers(_Layers(layers)))
            storage[name].append(_storage(layers))
            held.append([(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers])

    decoded = decode_greedy(forwards, plan, driver.pick, snapshot, timings)
    cache, logits, full = decoded.cache, decoded.logits, decoded.sequence
    start = time.perf_counter()
    reference = driver.reference(full).logits
    timings["reference_s"] = time.perf_counter() - start
    prompt_length = prompt.shape[1]
    reference_steps = reference[:, driver.offset + prompt_length - 1:, :]
    quantized = full_precision_delta = None
    quant_config = int_cache_config(model.config, plan.cache) if plan.cache in INT_QUANTIZED else None
    if plan.cache in QUANTIZED_KINDS:  # judged against the backend's design, as causal cells are; full precision is a finding
        start = time.perf_counter()
        full_precision_delta = max(float((step_logits.float() - reference_steps[:, k, :].float()).abs().max())
                                   for k, step_logits in enumerate(logits))
        reference_steps, quantized = design_reference(model, forwards, full, prompt_length, cache, quant_config)
        timings["design_reference_s"] = time.perf_counter() - start
    steps = [step_record(k, caches_seen[k], step_logits, reference_steps[:, k, :]) for k, step_logits in enumerate(logits)]
    finite = torch.nan_to_num(reference_steps.float(), nan=0.0, posinf=0.0, neginf=0.0)
    scale = float(finite.abs().max())
    nonfinite = describe_nonfinite(logits, reference_steps)
    limit = plan.locate_tolerance.limit(scale) if plan.locate_tolerance is not None else None
    located = limit is not None and max(s.max_abs_delta for s in steps) > limit
    unstable = ties = divergence = split = kv = replay = None
    fresh: Any = None
    if quantized is None:  # one fresh pass's K/V, for the kv_parity check and the localization
        start = time.perf_counter()
        try:
            fresh, _ = forwards.cached(full, forwards.new_cache(plan.cache, full.shape[1]), 1)
            kv = kv_parity(_pairs(cache_layers(cache), cache_layers(fresh)), driver.offset + full.shape[1],
                           preallocated=plan.cache != "dynamic")
        except Exception as exc:  # noqa: BLE001 - a crash of the fresh pass fails kv_parity only
            kv = KVParity(0, 0.0, None, problem=f"the fresh pass raised {type(exc).__name__}: {exc}"[:500])
        timings["kv_parity_s"] = time.perf_counter() - start
    if located and limit is not None:
        start = time.perf_counter()
        unstable = prefix_instability(_Uncached(driver.reference, driver.offset), full, reference[:, driver.offset:],
                                      [prompt_length, full.shape[1] - 1], limit)
        ties = topk_ties(lambda: driver.reference(full))
        # A quantized cache is judged by its design: its stored values are the quantized_kv check's (a fresh fp8 pass
        # calibrates its scale on other tokens, so its K/V are no reference).
        divergence = _locate(driver, cache, fresh, full) if fresh is not None else None
        if steps[0].max_abs_delta > limit:  # no cache entry read yet: which side differs (the causal probe's own)
            split = prefill_split(forwards, reference_steps[:, 0, :], steps[0].max_abs_delta, limit, type(cache).__name__)
        if quantized is None and not driver.offset:  # a router or indexer's selections: the decode with the uncached ones
            try:
                replay = replay_selections(model, compute_dtype(model), lambda: decode_deltas(forwards, plan, full, reference_steps),
                                           lambda: driver.reference(full))
            except ReplayError:  # forwards whose ids it cannot trace (an encoder-decoder's decoder ids): nothing concluded
                replay = None
        timings["locate_s"] = time.perf_counter() - start
    if driver.after_decode is not None:
        driver.after_decode()
    paths = (run_paths(forwards, plan, reference_steps, full, cache, None, timings) if not driver.offset
             else {name: failed_path(name, PathNotApplicable(PREFIX_PATHS)) for name in ("prefix_reuse", "crop", "reorder") if getattr(plan, name)})
    window = None
    if plan.window and (driver.offset or driver.geometry is None):
        window = WindowRecord([], [], 0.0, not_applicable="the crossings are not built for this family's driver (its "
                              "positions after a conditioning prefix, or no geometry of the cache it decodes)")
    elif plan.window and driver.geometry is not None:
        start = time.perf_counter()
        window = window_path(forwards, plan, driver.geometry, reference, full)
        timings["window_s"] = time.perf_counter() - start
    chunked = ChunkedRecord(not_applicable=PREFIX_PATHS) if plan.chunked_prefill and driver.offset else None
    if plan.chunked_prefill and not driver.offset:
        start = time.perf_counter()
        chunked = run_chunked_path(forwards, plan, full)
        timings["chunked_prefill_s"] = time.perf_counter() - start
    record = ProbeRecord(
        plan=plan, dtype=str(compute_dtype(model)).removeprefix("torch."), cache_class=type(cache).__name__,
        max_cache_len=_max_cache_len(cache, plan.cache), steps=steps, logit_scale=scale, nonfinite=nonfinite, located=located,
        divergence=divergence, prefix_instability=unstable, topk_ties=ties, prefill_split=split, kv_parity=kv, replay=replay,
        generate=None, timings=timings, paths=paths, window=window, chunked=chunked, quantized=quantized,
        full_precision_delta=full_precision_delta,
        mask_compared=decoded.mask_compared, mask_problems=decoded.mask_problems,
        quant_config=quant_config, reference=reference_name(plan.cache, quant_config),
    )
    heads = driver.head_rows or (lambda rows: rows)
    row_deltas = [(heads(step_logits).float() - heads(reference_steps[:, k, :]).float()).abs().nan_to_num(nan=float("inf")).amax(-1).tolist()
                  for k, step_logits in enumerate(logits)]
    return FamilyRun(record, halves, storage, cache, full, row_deltas)


def _max_cache_len(cache: Any, kind: str) -> int | None:
    """A static cell's preallocated length: the longest of its layers' (a sliding layer holds at most its window), of the
    self-attention half of an encoder-decoder cache. A layer that keeps the prompt apart from its window counts the slots
    it keeps the prompt in (UnlimitedOcr's reference sliding window: ``prefill_max_cache_len``, what the cache's
    max_cache_len leaves beside the window)."""
    lengths = [_preallocated(layer) for layer in cache_layers(cache)]
    known = [length for length in lengths if isinstance(length, int)]
    return max(known) if kind == "static" and known else None


def _preallocated(layer: Any) -> int | None:
    length, prompt = getattr(layer, "max_cache_len", None), getattr(layer, "prefill_max_cache_len", 0)
    return length + prompt if isinstance(length, int) and isinstance(prompt, int) else length


def _pairs(decoded: list[Any], fresh: list[Any]) -> list[Any]:
    pairs = []
    for got, want in zip(decoded, fresh, strict=False):
        keys, ref_keys = getattr(got, "keys", None), getattr(want, "keys", None)
        ok = isinstance(keys, torch.Tensor) and isinstance(ref_keys, torch.Tensor)
        pairs.append((keys, got.values, ref_keys, want.values) if ok else None)
    return pairs


def _locate(driver: Driver, cache: Any, fresh: Any, full: torch.Tensor) -> Divergence | None:
    """The first layer and position where the decoded cache departs from ``fresh``, one cached pass over ``full``.

    Layer by layer, each layer's self-attention half before its other halves (cross-attention), so a wrong
    cross-attention cache in layer 0 is named before the self-attention K/V of layer 1 it corrupts.
    """
    halves = [("", cache_layers, driver.offset + full.shape[1]), *((name, layers_of, None) for name, layers_of in driver.extra_halves.items())]
    paired = {name: _pairs(layers_of(cache), layers_of(fresh)) for name, layers_of, _ in halves}
    for index in range(max(len(pairs) for pairs in paired.values())):
        for name, _, length in halves:
            pair = paired[name][index] if index < len(paired[name]) else None
            if pair is None:
                continue
            found = locate_divergence([pair], valid_length=length or pair[2].shape[-2])
            if found is not None:
                tensor = f"{name} {found.tensor}" if name else found.tensor
                return Divergence(index, found.position, tensor, found.kind, found.detail)
    return None

"""Chunked prefill: the prompt fed in two or three cached forwards must equal one prefill.

This is what ``generate(prefill_chunk_size=...)`` does (GenerationMixin's chunked prefill): every chunk after
the first is a multi-token forward that reads the cache the earlier chunks wrote, the K/V of attention layers
and the conv and recurrent states of SSM and linear-attention layers. The probe prefills the prompt once into a
fresh cache of the cell's kind (all positions' logits: the reference), then again chunk by chunk into another
one, and compares every chunk's logits at its positions and, after the last chunk, every tensor of the two
caches. Where they differ, each chunk boundary's cache is compared with one prefill of as many tokens, so the
record names the first boundary whose cache already differs, the layer, and whether K/V or a state.

On dynamic cells it also runs ``generate(prefill_chunk_size=...)``, the path users run, against the plain
cached ``generate()`` of the cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.probe.cache_io import fixed_length_config, seq_length
from kvconform.probe.cache_state import StateComparison, compare_states, snapshot
from kvconform.probe.forwards import Forwards
from kvconform.probe.generate_inputs import GenerateInputs
from kvconform.probe.layer_state import LayerState, snapshot_layers
from kvconform.probe.reference_health import TopkTies
from kvconform.probe.selections import SelectionReplay
from kvconform.probe.variants import PathNotApplicable, row_delta, within_one_prefill

#: generate()'s own refusals of a chunked prefill (generation/utils.py ``_prefill``): no cache, or raw media that a
#: chunk boundary would split (a model that does not take pre-encoded ``mm_encoder_outputs``).
REFUSALS = ("Cannot use prefill chunking without a cache", "Chunked prefill cannot split the raw multimodal inputs")
#: Forwards the prompt is split into (the last chunk may be shorter), as ``prefill_chunk_size = ceil(P / 3)``.
CHUNKS = 3


def chunk_size(prompt_length: int) -> int:
    """The ``prefill_chunk_size`` that splits the prompt into :data:`CHUNKS` forwards of at least 2 tokens."""
    if prompt_length < 4:
        raise PathNotApplicable(f"a {prompt_length}-token prompt has no two chunks of 2 or more tokens")
    return max(2, -(-prompt_length // CHUNKS))


def chunk_starts(prompt_length: int, size: int, unsplit: int = 0) -> list[int]:
    """Where the chunks of ``size`` start; the first holds at least the ``unsplit`` leading positions (a media prompt's
    placeholders: ``Forwards.unsplit``), and at least 2 tokens are left for the chunks after it."""
    first = max(size, unsplit)
    if unsplit > size and prompt_length - first < 2:
        raise PathNotApplicable(f"the first chunk holds the media whole (positions 0-{unsplit - 1}), which leaves "
                                f"{prompt_length - first} of the {prompt_length}-token prompt: no second multi-token chunk")
    return [0, *range(first, prompt_length, size)]


@dataclass
class ChunkStep:
    """One chunk's forward: its logits at its positions against one prefill's."""

    start: int
    length: int
    max_abs_delta: float
    worst_position: int
    worst_row: int
    seq_length: int | None


@dataclass
class ChunkedGenerate:
    """``generate(prefill_chunk_size=...)`` against the cell's plain cached ``generate()``."""

    chunked_tokens: list[list[int]]
    plain_tokens: list[list[int]]
    first_divergence: int | None
    error: str | None = None
    not_applicable: str | None = None
    """transformers refuses chunked prefill for the model (its words)."""
    step_max_abs_delta: list[float] = field(default_factory=list)
    """Per generated token up to the first that parts (or all), max |Δlogit| of the chunked call against the plain one
    (``output_logits``): a chunked prefill that moves the logits without flipping a token shows here."""


@dataclass
class ChunkedRecord:
    """A chunked prefill of the prompt against one prefill of it."""

    chunk_size: int = 0
    steps: list[ChunkStep] = field(default_factory=list)
    logit_scale: float = 0.0
    states: StateComparison | None = None
    """The cache after the last chunk against one prefill's (K/V and conv/recurrent states)."""
    boundary: tuple[int, StateComparison] | None = None
    """Where the caches differ: the first chunk boundary (tokens) whose cache differs from one prefill of as many."""
    final_layers: list[LayerState] = field(default_factory=list)
    generate: ChunkedGenerate | None = None
    error: str | None = None
    not_applicable: str | None = None
    topk_ties: TopkTies | None = None
    replay: SelectionReplay | None = None
    replayed_states: StateComparison | None = None
    """The caches compared again in the replayed run (the uncached selections forced in)."""

    @property
    def step_max_abs_delta(self) -> list[float]:
        return [step.max_abs_delta for step in self.steps]


def _prefill(forwards: Forwards, kind: str, max_len: int, ids: torch.Tensor) -> tuple[Any, Any]:
    return forwards.cached(ids, forwards.new_cache(kind, max_len))


@torch.inference_mode()
def run_chunked(forwards: Forwards, plan: Any, sequence: torch.Tensor) -> ChunkedRecord:
    """Prefill the first ``plan.prompt_length`` tokens of ``sequence`` once and in chunks; compare logits and caches.
    Chunks after the first continue the cache (``forwards.extend``); a media prompt's first chunk holds its placeholders
    whole (``chunk_starts``), and ``run_chunked_generate`` is where generate() splits them (pre-encoded features sliced
    per chunk)."""
    size = chunk_size(plan.prompt_length)
    starts = chunk_starts(plan.prompt_length, size, forwards.unsplit)
    within_one_prefill(forwards, starts[1], "a first chunk of")
    prompt, total = sequence[:, : plan.prompt_length], sequence.shape[1]
    dtype = forwards.dtype
    one_cache, one = _prefill(forwards, plan.cache, total, prompt)
    reference = one.logits[:, -plan.prompt_length :, :]
    one_states = snapshot(one_cache)
    cache = forwards.new_cache(plan.cache, total)
    steps, snapshots = [], []
    for start, end in zip(starts, [*starts[1:], plan.prompt_length], strict=True):
        ids = prompt[:, start:end]
        cache, output = forwards.cached(ids, cache) if start == 0 else forwards.extend(ids, cache)
        logits = output.logits[:, -ids.shape[1] :, :]
        deltas = torch.stack([row_delta(logits[:, k], reference[:, start + k]) for k in range(ids.shape[1])], dim=1)  # [B, n]
        flat = int(deltas.argmax())
        row, offset = divmod(flat, deltas.shape[1])
        steps.append(ChunkStep(start, ids.shape[1], float(deltas.max()), start + offset, row, seq_length(cache)))
        snapshots.append(snapshot(cache))
    record = ChunkedRecord(size, steps, float(torch.nan_to_num(reference.float()).abs().max()),
                           compare_states(snapshots[-1], one_states, dtype), final_layers=snapshot_layers(cache))
    if record.states is not None and record.states.differing:
        record.boundary = _first_boundary(forwards, plan.cache, total, prompt, steps, snapshots, dtype)
    return record


def _first_boundary(forwards: Forwards, kind: str, total: int, prompt: torch.Tensor, steps: list[ChunkStep],
                    snapshots: list[dict[Any, Any]], dtype: torch.dtype) -> tuple[int, StateComparison] | None:
    """The first chunk boundary whose cache differs from one prefill of as many tokens (the first chunk is one)."""
    for step, states in zip(steps[1:], snapshots[1:], strict=True):
        end = step.start + step.length
        one_cache, _ = _prefill(forwards, kind, total, prompt[:, :end])
        compared = compare_states(states, snapshot(one_cache), dtype)
        if compared.differing:
            return end, compared
    return None


@torch.inference_mode()
def run_chunked_generate(model: Model, inputs: GenerateInputs, steps: int, size: int,
                         plain: tuple[list[list[int]], torch.Tensor] | None) -> ChunkedGenerate:
    """Greedy ``generate(prefill_chunk_size=size)`` on the cell's prompt (``inputs``: the family's, with its media or
    encoder input) against ``plain``: the plain cached generate's tokens and raw logits ``[steps, B, V]`` (run here when
    the cell's own generate() did not return them)."""

    def greedy(chunk: int | None) -> tuple[list[list[int]], torch.Tensor]:
        # The sequences of a GenerateOutput, as the generate check reads them: without return_dict_in_generate,
        # Whisper's generate() returns its segments' tokens, the decoder start token dropped (generation_whisper.py),
        # so slicing off the prompt lost the first generated token.
        config = fixed_length_config(model, steps, prefill_chunk_size=chunk, return_dict_in_generate=True, output_logits=True,
                                     **inputs.config)
        out = model.generate(**inputs.kwargs, generation_config=config)
        return out.sequences[:, inputs.prompt_length :].tolist(), torch.stack(out.logits)

    try:
        chunked, chunked_logits = greedy(size)
    except Exception as exc:  # noqa: BLE001 - a crash of generate() fails this path's check only
        text = _described(exc)
        if any(refusal in text for refusal in REFUSALS):
            return ChunkedGenerate([], [], None, not_applicable=f"generate() refuses it: {text}")
        return ChunkedGenerate([], [], None, error=text)
    try:
        plain_tokens, plain_logits = plain if plain is not None else greedy(None)
    except Exception as exc:  # noqa: BLE001 - the plain generate() of the comparison crashed (the cell's generate check says so too)
        return ChunkedGenerate(chunked, [], None, error=f"the plain generate() to compare with raised {_described(exc)}")
    differs = [k for k in range(len(chunked[0])) if any(a[k] != b[k] for a, b in zip(chunked, plain_tokens, strict=True))]
    compared = min(differs[0] + 1 if differs else len(chunked[0]), len(chunked_logits), len(plain_logits))
    deltas = [float((chunked_logits[k].float() - plain_logits[k].float()).nan_to_num(0.0).abs().max()) for k in range(compared)]
    return ChunkedGenerate(chunked, plain_tokens, differs[0] if differs else None, step_max_abs_delta=deltas)


def _described(exc: BaseException) -> str:
    """An exception in one line: a module's repr in its message is cut to its first and last line."""
    lines = str(exc).splitlines() or [""]
    return f"{type(exc).__name__}: {lines[0]}{' … ' + lines[-1] if len(lines) > 1 else ''}"[:500]

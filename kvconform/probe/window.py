"""Windows crossed from either side: sliding-window and chunked layers decoded from prompts shorter than,
equal to and longer than the window.

The main decode's prompt (6 tokens on the sweep) is already longer than the shrunk window (4), so the rolling
path that starts from a short prompt, and the prefill that fills the window exactly, never run there. Here the
cell's cache is prefilled with the first ``P`` tokens of the main decode's sequence, for ``P`` in
``window - 2`` and ``window``, and fed the rest of that sequence token by token. Causality makes
the main uncached pass the reference at every step (no extra uncached pass); each crossing stops
``PAST_WINDOW`` tokens past the largest window, where the main decode's steady state takes over. At every step the record keeps
``get_seq_length()``, every layer's stored shapes, and, per layer, the mask size ``get_mask_sizes`` advertises
beside the K/V length ``update()`` actually returned to attention: a layer whose mask and keys disagree is
a fault even where the logits survive it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from kvconform.build.geometry import CacheGeometry
from kvconform.compat import layer_mask_sizes
from kvconform.probe.cache_io import cache_layers, seq_length
from kvconform.probe.forwards import Forwards
from kvconform.probe.layer_state import LayerState, snapshot_layers

if TYPE_CHECKING:
    from kvconform.probe.decode import ProbeRecord
from kvconform.probe.variants import PathNotApplicable, row_delta, within_one_prefill

#: Prompt lengths relative to each window: shorter (the layer fills and rolls during the decode) and equal to it (the
#: prefill fills a static layer exactly and makes a dynamic one crop at once); longer is the main decode's prompt.
#: ``window - 1`` is left out: its prefill takes the branches of the shorter prompt's (a dynamic layer keeps every
#: token, a static one index-copies into free slots), and the shorter prompt's decode passes through its state.
WINDOW_OFFSETS = (-2, 0)
#: Each crossing decodes until this many tokens past the largest window: by then every sliding layer has rolled
#: (a static one at least twice) and what follows is the steady state the main decode already checks.
PAST_WINDOW = 3


@dataclass
class Crossing:
    """One prefill of ``prompt_length`` tokens decoded to the end of the main sequence."""

    prompt_length: int
    step_max_abs_delta: list[float]
    seq_lengths: list[int | None]
    layers: list[list[LayerState]]
    """Every cache layer after the prefill and after each decode step."""
    mask_problems: list[str] = field(default_factory=list)
    """Steps where a layer's ``get_mask_sizes`` kv_length differs from the K/V length its ``update()`` returned."""
    worst_row: int = 0


@dataclass
class WindowRecord:
    """The crossings of one cell, against the main decode's uncached reference."""

    windows: list[int]
    crossings: list[Crossing]
    logit_scale: float
    error: str | None = None
    not_applicable: str | None = None
    refused: list[str] = field(default_factory=list)
    """Crossing prompts the cell's forwards cannot prefill alone, each with the reason (a media prompt's placeholders)."""
    through: str | None = None
    """The prompt the crossings decoded where it is not the cell's own (a vision-language cell's text-only prompt)."""
    decode: ProbeRecord | None = None
    """That prompt's decode, where ``through`` is set: its cache length and prompt set the shapes the crossings expect."""


def window_prompt_lengths(windows: list[int], main_prompt: int, total: int) -> list[int]:
    """Prompt lengths shorter than and equal to each window, other than the main prompt, leaving at
    least one decode step of the main sequence (``total`` tokens)."""
    lengths = {max(1, window + offset) for window in windows for offset in WINDOW_OFFSETS}
    return sorted(length for length in lengths if length != main_prompt and length < total)


def windows_of(geometry: CacheGeometry) -> list[int]:
    """The windows of the sliding-window and chunked layers (``[]``: none)."""
    return sorted({layer.window for layer in geometry.layers if layer.window})


class UpdateWatch:
    """Wraps each attention layer's ``update`` on one cache instance: before a forward the mask size every layer
    advertises for a one-token query, during it the K/V length every ``update()`` hands back."""

    def __init__(self, cache: Any) -> None:
        self.returned: dict[int, list[int]] = {}
        self.compared = 0
        """Layer-steps whose advertised mask size was compared with a returned K/V length."""
        self.layers = [(index, layer) for index, layer in enumerate(cache_layers(cache))
                       if callable(getattr(layer, "get_mask_sizes", None)) and isinstance(getattr(layer, "keys", None), torch.Tensor)]
        for index, layer in self.layers:
            layer.update = self._watched(index, layer.update)

    def _watched(self, index: int, update: Any) -> Any:
        def watched(key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            keys, values = update(key_states, value_states, *args, **kwargs)
            self.returned.setdefault(index, []).append(int(keys.shape[-2]))
            return keys, values
        return watched

    def close(self) -> None:
        """Unwrap every layer's ``update`` (a copy of the cache must not write through to this instance's layers)."""
        for _, layer in self.layers:
            vars(layer).pop("update", None)

    def step(self, run: Any, query_length: int, step: int) -> tuple[Any, list[str]]:
        """``run()`` one forward; the layers whose advertised kv_length is not the K/V length update() returned."""
        advertised = {index: int(layer_mask_sizes(layer, query_length)[0]) for index, layer in self.layers}
        self.returned = {}
        output = run()
        self.compared += sum(1 for index, _ in self.layers if self.returned.get(index))
        problems = [
            f"decode step {step}, layer {index} ({type(layer).__name__}): get_mask_sizes({query_length}) advertises "
            f"kv_length {advertised[index]}, update() returned {got} K/V positions"
            for index, layer in self.layers for got in self.returned.get(index, [])[:1] if got != advertised[index]
        ]
        return output, problems


@torch.inference_mode()
def run_window(forwards: Forwards, plan: Any, geometry: CacheGeometry, reference: torch.Tensor,
               sequence: torch.Tensor) -> WindowRecord:
    """Each crossing prefix of ``sequence`` (the main decode's P + N tokens) prefilled and decoded to its end, on any
    family's ``forwards``; ``reference`` is the main uncached pass [B, P+N, V]. A prefix the forwards cannot prefill alone
    (one that splits a media prompt's placeholders or a prefix-LM's bidirectional prompt) is left out, and said."""
    windows = windows_of(geometry)
    if not windows:
        raise PathNotApplicable("the model has no sliding-window or chunked-attention layers")
    total = sequence.shape[1]
    lengths = window_prompt_lengths(windows, plan.prompt_length, total)
    if not lengths:
        raise PathNotApplicable(f"windows {windows}: the {total}-token decode never reaches them from a shorter prompt")
    end = min(total, max(windows) + PAST_WINDOW)
    crossings, refused = [], []
    for length in lengths:
        try:
            within_one_prefill(forwards, length, "a crossing that prefills")
            crossings.append(_crossing(forwards, plan.cache, reference, sequence[:, : max(end, length + 1)], length, total))
        except PathNotApplicable as exc:
            refused.append(f"prompt {length}: {exc}")
    if not crossings:
        raise PathNotApplicable(f"windows {windows}: no shorter prompt prefills alone ({'; '.join(refused)})")
    scale = float(torch.nan_to_num(reference[:, min(c.prompt_length for c in crossings) - 1 :, :].float()).abs().max())
    return WindowRecord(windows, crossings, scale, refused=refused)


def _crossing(forwards: Forwards, kind: str, reference: torch.Tensor, sequence: torch.Tensor, prompt_length: int,
              max_cache_len: int) -> Crossing:
    """Prefill ``prompt_length`` tokens of ``sequence`` into a fresh cache of ``kind`` (the main decode's
    ``max_cache_len``), then feed the rest of ``sequence`` token by token."""
    total = sequence.shape[1]
    cache, output = forwards.cached(sequence[:, :prompt_length], forwards.new_cache(kind, max_cache_len), 1)
    deltas = [row_delta(output.logits[:, -1, :], reference[:, prompt_length - 1, :])]
    lengths, layers, problems = [seq_length(cache)], [snapshot_layers(cache)], []
    watch = UpdateWatch(cache)
    for step, position in enumerate(range(prompt_length, total), start=1):
        (cache, output), found = watch.step(partial(forwards.extend, sequence[:, position : position + 1], cache), 1, step)
        problems += found
        deltas.append(row_delta(output.logits[:, -1, :], reference[:, position, :]))
        lengths.append(seq_length(cache))
        layers.append(snapshot_layers(cache))
    watch.close()
    per_step = [float(d.max()) for d in deltas]
    worst = max(range(len(per_step)), key=per_step.__getitem__)
    return Crossing(prompt_length, per_step, lengths, layers, problems, int(deltas[worst].argmax()))

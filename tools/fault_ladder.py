#!/usr/bin/env python
"""The fault ladder: planted K/V write faults of decreasing size on a real checkpoint, per dtype.

    python tools/fault_ladder.py                          # SmolLM2 (matrix id smollm2-135m), all three dtypes
    python tools/fault_ladder.py --model smollm2-135m --dtype bfloat16
    python tools/fault_ladder.py --model gemma3-270m      # Gemma 3 270M: a sliding and a full-attention layer

Prints a Markdown table (docs/tolerances.md): for each fault and dtype, Δ ÷ limit of ``parity`` (logits) and of
``kv_parity`` (stored K/V against one fresh pass), and which check catches it first (the larger ratio over 1).
Every fault is planted in ``Cache.update`` on decode writes (one token, a filled ``DynamicLayer`` or its subclass
``DynamicSlidingWindowLayer``: Gemma 3's sliding layers get them too) of the dynamic cache, with the matrix entry's
settings (batch 2, prompt 6, 8 decode steps); prefills and the references are untouched. The one-layer rungs go in
the middle layer, and on a model with several layer kinds (Gemma 3: sliding and full attention) also in the middle
layer of each other kind, each with its own rotary frequencies.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers.cache_utils import Cache, DynamicLayer  # noqa: E402

from kvconform.build.architecture_table import load_architecture_table  # noqa: E402
from kvconform.build.geometry import cache_geometry, explain  # noqa: E402
from kvconform.build.model_types import causal_lm_model_types  # noqa: E402
from kvconform.build.models import load_master, model_in_dtype  # noqa: E402
from kvconform.checks import record_checks as checks  # noqa: E402
from kvconform.matrix import Settings, Tolerance, load_matrix  # noqa: E402
from kvconform.probe.decode import ProbePlan, run_probe  # noqa: E402
from kvconform.results import CheckResult  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")
#: Rewrites a decode update's (keys, values), given ``(layer_idx, the stored layer, keys, values)``.
Rewrite = Callable[[int, Any, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def planted(rewrite: Rewrite | None) -> Any:
    """``Cache.update`` with every one-token update of a filled ``DynamicLayer`` passed through ``rewrite`` first."""
    if rewrite is None:
        return mock.patch.object(Cache, "update", Cache.update)
    original = Cache.update

    def update(self: Cache, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        stored = self.layers[layer_idx] if layer_idx < len(self.layers) else None
        if (isinstance(stored, DynamicLayer) and stored.is_initialized and stored.keys is not None
                and stored.keys.numel() > 0 and key_states.shape[-2] == 1):
            key_states, value_states = rewrite(layer_idx, stored, key_states, value_states)
        return original(self, key_states, value_states, layer_idx, *args, **kwargs)

    return mock.patch.object(Cache, "update", update)


def stale(layer: int | None = None, head: int | None = None, position: int | None = None) -> Rewrite:
    """Store the previous column again, in one ``layer``, one KV ``head`` of it, the token at ``position`` (``None``: all)."""

    def rewrite(index: int, stored: Any, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer not in (None, index) or position not in (None, stored.get_seq_length()):
            return keys, values
        heads = slice(None) if head is None else slice(head, head + 1)
        keys, values = keys.clone(), values.clone()
        keys[:, heads] = stored.keys[:, heads, -1:, :]
        values[:, heads] = stored.values[:, heads, -1:, :]
        return keys, values

    return rewrite


def rotary_offset(layer: int, inv_freq: torch.Tensor) -> Rewrite:
    """Rotate one ``layer``'s decoded keys one position further than their token's (rotate_half convention)."""
    angle = torch.cat([inv_freq, inv_freq]).float()

    def rewrite(index: int, stored: Any, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if index != layer:
            return keys, values
        half = keys.shape[-1] // 2
        rotated = torch.cat([-keys[..., half:], keys[..., :half]], dim=-1)
        return (keys.float() * angle.cos() + rotated.float() * angle.sin()).to(keys.dtype), values

    return rewrite


def _layers(config: Any) -> dict[int, str | None]:
    """The middle layer, and on a model with several layer kinds the middle layer of each other kind, with its kind."""
    count, kinds = config.num_hidden_layers, getattr(config, "layer_types", None)
    middle = count // 2
    if not kinds or len(set(kinds)) == 1:
        return {middle: None}
    chosen = {middle: kinds[middle]}
    for kind in sorted(set(kinds) - {kinds[middle]}):
        of_kind = [index for index, other in enumerate(kinds) if other == kind]
        chosen[of_kind[len(of_kind) // 2]] = kind
    return chosen


def _inv_freq(model: Any, kind: str | None) -> torch.Tensor:
    """The rotary frequencies a layer of ``kind`` uses (Gemma 3 keeps one set per layer kind)."""
    rotary = model.model.rotary_emb
    return getattr(rotary, f"{kind}_inv_freq") if kind is not None and hasattr(rotary, f"{kind}_inv_freq") else rotary.inv_freq


def ladder(model: Any, prompt_length: int, decode_steps: int) -> dict[str, Rewrite | None]:
    """The rungs, largest first, placed in the middle layer(s) and late in the sequence of ``model``."""
    late = prompt_length + decode_steps - 3  # the token fed at the third-to-last decode step
    rungs: dict[str, Rewrite | None] = {"healthy": None, "stale column, every layer": stale()}
    layers = _layers(model.config)
    for layer, kind in layers.items():
        rungs[f"stale column, layer {layer}{f' ({kind})' if kind else ''} only"] = stale(layer=layer)
    layer = next(iter(layers))
    rungs[f"stale column, layer {layer}, KV head 0 only"] = stale(layer=layer, head=0)
    rungs[f"stale column, layer {layer}, position {late} only"] = stale(layer=layer, position=late)
    for layer, kind in layers.items():
        rungs[f"rotary offset +1 on decoded keys, layer {layer}{f' ({kind})' if kind else ''}"] = rotary_offset(layer, _inv_freq(model, kind))
    return rungs


def measure(model: Any, settings: Settings, tolerance: Tolerance, dtype: str,
            faults: dict[str, Rewrite | None]) -> dict[str, dict[str, float]]:
    """Per fault: Δ ÷ limit of parity and kv_parity (each check as the suite runs it on a dynamic sdpa cell)."""
    # No localization pass after a failure (locate_tolerance None): it changes no ratio and would cost four passes a rung.
    plan = ProbePlan(batch_size=settings.batch_size, prompt_length=settings.prompt_length, decode_steps=settings.decode_steps,
                     seed=settings.seed, generate=False)
    cast = model_in_dtype(model, dtype, "cpu")
    rows = {}
    for name, fault in faults.items():
        with planted(fault):
            record = run_probe(cast, plan)
        results = checks.run_all(record, cache_geometry(model.config), explain(model.config), tolerance)
        rows[name] = {check: _ratio(results[check]) for check in ("parity", "kv_parity")}
    return rows


def _ratio(result: CheckResult) -> float:
    ratio = result.figure.ratio if result.figure is not None else None
    return float("inf") if ratio is None else ratio


def first_catch(ratios: dict[str, float]) -> str:
    """The check with the largest Δ ÷ limit over 1 (``-``: none fails)."""
    check, ratio = max(ratios.items(), key=lambda item: item[1])
    return check if ratio > 1 else "-"


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: one row per fault, per dtype parity ÷ limit, kv_parity ÷ limit and the first catch."""
    dtypes = list(results)
    header = "| planted fault | " + " | ".join(f"{d} parity | {d} kv_parity | {d} first" for d in dtypes) + " |"
    lines = [header, "|---|" + "---|---|---|" * len(dtypes)]
    for fault in next(iter(results.values())):
        cells = [f"{results[d][fault]['parity']:.3g} | {results[d][fault]['kv_parity']:.3g} | {first_catch(results[d][fault])}"
                 for d in dtypes]
        lines.append(f"| {fault} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="Matrix id of a real checkpoint in model_matrix.yaml")
    parser.add_argument("--dtype", action="append", choices=DTYPES, help="Only these dtypes; repeatable")
    args = parser.parse_args()
    matrix = load_matrix(ROOT / "model_matrix.yaml", known_model_types=causal_lm_model_types,
                         excluded_types=load_architecture_table()[1]).select([args.model])
    spec = matrix.models[0]
    model = load_master(spec)
    faults = ladder(model, spec.settings.prompt_length, spec.settings.decode_steps)
    results = {dtype: measure(model, spec.settings, spec.settings.tolerances[dtype], dtype, faults) for dtype in args.dtype or DTYPES}
    print(f"Fault ladder, {args.model} ({model.config.num_hidden_layers} layers), Δ ÷ limit (> 1 fails):\n")
    print(table(results))


if __name__ == "__main__":
    main()

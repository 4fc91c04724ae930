#!/usr/bin/env python
"""Measured logit noise of a real checkpoint per dtype, beside its healthy parity Δ and the parity limit.

    python tools/logit_noise.py                          # SmolLM2 (matrix id smollm2-135m), all three dtypes
    python tools/logit_noise.py --model gemma3-270m --dtype bfloat16

Prints a Markdown table (docs/detection-power.md): per dtype, with the matrix entry's batch, prompt and decode
length, the healthy dynamic sdpa cell's parity Δ and kv_parity Δ ÷ limit, and the max |Δlogit| between uncached
passes of the same seeded tokens that differ only in kernels (eager vs sdpa; row 0 alone vs in the batch; the
dtype's model vs its float32 original), each also ÷ the parity limit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from kvconform.build.architecture_table import load_architecture_table  # noqa: E402
from kvconform.build.geometry import cache_geometry, explain  # noqa: E402
from kvconform.build.model_types import causal_lm_model_types  # noqa: E402
from kvconform.build.models import load_master, model_in_dtype  # noqa: E402
from kvconform.build.support import attention_model  # noqa: E402
from kvconform.checks import record_checks as checks  # noqa: E402
from kvconform.matrix import Settings, load_matrix  # noqa: E402
from kvconform.probe.cache_io import keep_logits, make_prompt  # noqa: E402
from kvconform.probe.decode import ProbePlan, run_probe  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16")


@torch.inference_mode()
def _logits(model: Any, ids: torch.Tensor, keep: int) -> torch.Tensor:
    """Uncached logits at the last ``keep`` positions, in float32."""
    return model(input_ids=ids, use_cache=False, **keep_logits(model, keep)).logits[:, -keep:].float()


def _delta(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nan_to_num((a - b).abs(), nan=float("inf")).max())


def measure(master: Any, settings: Settings, dtype: str) -> dict[str, float]:
    """Healthy parity Δ, its limit, kv_parity ÷ limit and the three kernel spreads of one dtype."""
    tolerance = settings.tolerances[dtype]
    model = model_in_dtype(master, dtype, "cpu")
    plan = ProbePlan(batch_size=settings.batch_size, prompt_length=settings.prompt_length,
                     decode_steps=settings.decode_steps, seed=settings.seed, generate=False, locate_tolerance=tolerance)
    record = run_probe(model, plan)
    results = checks.run_all(record, cache_geometry(master.config), explain(master.config), tolerance)
    keep = settings.decode_steps + 1  # the positions parity reads
    vocab = master.config.get_text_config(decoder=True).vocab_size
    ids = make_prompt(settings.batch_size, settings.prompt_length + settings.decode_steps, settings.seed, vocab, torch.device("cpu"))
    sdpa = _logits(model, ids, keep)
    eager, _ = attention_model(model, "eager")
    figure = results["kv_parity"].figure
    row = {
        "scale": record.logit_scale,
        "limit": tolerance.limit(record.logit_scale),
        "parity": record.max_abs_delta,
        "kv_parity": figure.ratio if figure is not None and figure.ratio is not None else float("nan"),
        "eager vs sdpa": _delta(_logits(eager, ids, keep), sdpa),
        "batch 1 vs batch 2 (row 0)": _delta(_logits(model, ids[:1], keep), sdpa[:1]),
    }
    if dtype != "float32":
        row["against float32"] = _delta(sdpa, _logits(master, ids, keep))
    return row


def table(rows: dict[str, dict[str, float]]) -> str:
    spreads = ("eager vs sdpa", "batch 1 vs batch 2 (row 0)", "against float32")
    lines = ["| dtype | max\\|logit\\| | parity limit | healthy parity Δ (÷ limit) | healthy kv_parity ÷ limit | "
             + " | ".join(spreads) + " |", "|---|---|---|---|---|" + "---|" * len(spreads)]
    for dtype, row in rows.items():
        limit = row["limit"]
        cells = [f"{row[s]:.2g} ({row[s] / limit:.2g})" if s in row else "-" for s in spreads]
        lines.append(f"| {dtype} | {row['scale']:.3g} | {limit:.2g} | {row['parity']:.2g} ({row['parity'] / limit:.2g}) | "
                     f"{row['kv_parity']:.2g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="Matrix id of a real checkpoint in model_matrix.yaml")
    parser.add_argument("--dtype", action="append", choices=DTYPES, help="Only these dtypes; repeatable")
    args = parser.parse_args()
    matrix = load_matrix(ROOT / "model_matrix.yaml", known_model_types=causal_lm_model_types,
                         excluded_types=load_architecture_table()[1]).select([args.model])
    spec = matrix.models[0]
    master = load_master(spec)
    dtypes = [d for d in args.dtype or DTYPES if d in spec.settings.dtypes]
    rows = {dtype: measure(master, spec.settings, dtype) for dtype in dtypes}
    print(f"Logit noise, {args.model} (batch {spec.settings.batch_size}, {spec.settings.prompt_length}+"
          f"{spec.settings.decode_steps} tokens, torch CPU capability {torch.backends.cpu.get_cpu_capability()}):\n")
    print(table(rows))


if __name__ == "__main__":
    main()

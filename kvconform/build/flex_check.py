"""Whether compiled flex_attention computes attention correctly on the running CPU, checked once per dtype.

transformers always runs flex_attention through ``torch.compile``; on CPU inductor turns it into a C++ kernel
for the vector ISA it picks (``torch._inductor.cpu_vec_isa.pick_vec_isa()``, which follows
``ATEN_CPU_CAPABILITY``). With torch 2.13 that kernel is wrong for the avx2 ISA at some key lengths (8 and 24
measured: Δ 1–2 or NaN against the math result), and without a vector ISA (``default``) inductor refuses to
lower flex_attention on CPU at all. A flex cell there would report the compiler as a model verdict, so
flex cells run only where this check passes; elsewhere they are not applicable, with the measured Δ.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

#: Key lengths checked: every length a tiny cell reaches (prompt + decode + crop/ragged extras) and more.
KV_LENGTHS = range(1, 41)

#: Largest |compiled - math| accepted per dtype (outputs are averages of N(0, 1) values, |out| < 4).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def vector_isa() -> str:
    """The vector ISA inductor compiles CPU kernels for on this machine (``INVALID_VEC_ISA``: none)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return str(pick_vec_isa())


def _math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention of the float32 copies with grouped K/V heads repeated, ``softmax(q kᵀ / √d) v``."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(groups, 1), v.float().repeat_interleave(groups, 1)
    scores = q.float() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def compiled_flex() -> Any:
    """flex_attention compiled as transformers compiles it, through a wrapper of its own (dynamo keeps its compiled
    graphs per code object: flex_attention's own entries, which transformers' compiled flex uses, stay untouched)."""
    from torch.nn.attention.flex_attention import flex_attention

    def checked_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return flex_attention(q, k, v, **kwargs)

    return torch.compile(checked_flex, dynamic=True)


@functools.cache
def flex_disagreement(dtype: torch.dtype) -> str | None:
    """Why compiled flex_attention cannot be trusted here in ``dtype`` (the worst Δ against the math
    reference, decode and prefill shapes as transformers calls it), or ``None`` when it agrees everywhere."""
    from torch.nn.attention.flex_attention import create_block_mask

    where = f"compiled flex_attention on this CPU (inductor vector ISA {vector_isa()}, torch {torch.__version__})"
    compiled = compiled_flex()
    generator = torch.Generator().manual_seed(0)
    worst, wrong = (0.0, ""), set[int]()
    for kv_len in KV_LENGTHS:
        for q_len in (1, kv_len):
            q = torch.randn(2, 4, q_len, 16, generator=generator).to(dtype)
            k, v = (torch.randn(2, 2, kv_len, 16, generator=generator).to(dtype) for _ in range(2))
            causal = q_len > 1
            mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, 2, None, q_len, kv_len, device="cpu",
                                     _compile=False) if causal else None
            try:
                # About 4 graphs per dtype (lengths 1 are specialized); past the limit dynamo would run it eagerly.
                with torch._dynamo.config.patch(recompile_limit=64, fail_on_recompile_limit_hit=True):
                    out = compiled(q, k, v, block_mask=mask, enable_gqa=True)
            except Exception as exc:  # noqa: BLE001 - inductor refusing the kernel is this check's finding
                return f"{where} does not compile: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
            delta = float(torch.nan_to_num((out.float() - _math(q, k, v, causal)).abs(), nan=float("inf")).max())
            if not delta <= TOLERANCE[dtype]:
                wrong.add(kv_len)
            if delta > worst[0]:
                worst = (delta, f"query length {q_len}, key length {kv_len}")
    if wrong:
        return (f"{where} disagrees with the math reference by Δ {worst[0]:.3g} in {str(dtype).removeprefix('torch.')} "
                f"(worst at {worst[1]}; limit {TOLERANCE[dtype]:g}; wrong at key lengths {', '.join(map(str, sorted(wrong)))}): "
                "a compiler fault, not the model's")
    return None

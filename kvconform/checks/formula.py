"""The seeds' KV-cache formula as exact arithmetic: ``2 × L × H_kv × d_head × N × B × bytes``.

Per-layer shapes come from :mod:`kvconform.build.geometry`; this module only multiplies and formats.
Bytes per value are fractions (int4 is half a byte), so every total that should be an integer is one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from itertools import groupby
from typing import Any

from tabulate import tabulate

from kvconform.build.geometry import FULL, NO_KV, SLIDING, CacheGeometry, LayerGeometry

FORMULA = "2 × L × H_kv × d_head × N × B × bytes"
BYTES_PER_VALUE: dict[str, Fraction] = {
    "float32": Fraction(4),
    "float16": Fraction(2),
    "bfloat16": Fraction(2),
    "fp8": Fraction(1),
    "int8": Fraction(1),
    "int4": Fraction(1, 2),
}
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention widths (DeepSeek V2/V3 style configs)."""

    heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def latent_values(self) -> int:
        """Values cached per token per layer: the latent plus the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def expanded_values(self) -> int:
        """Values per token per layer if K and V were stored per head: H × (d_nope + d_rope) + H × d_v."""
        return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)


def mla_dims(config: Any) -> MlaDims | None:
    """The MLA widths of ``config``, or None when it has no ``kv_lora_rank``."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    if not getattr(text, "kv_lora_rank", None):
        return None
    width = {name: int(getattr(text, name, 0) or 0) for name in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
    return MlaDims(heads=int(text.num_attention_heads), kv_lora_rank=int(text.kv_lora_rank), **width)


def flags_geometry(layers: int, kv_heads: int, head_dim: int, query_heads: int = 0) -> CacheGeometry:
    """``layers`` identical full-attention layers: the formula exactly as the seeds write it."""
    reason = "--layers/--kv-heads/--head-dim"
    return CacheGeometry(
        layers=tuple(LayerGeometry(i, FULL, reason, kv_heads, head_dim, head_dim) for i in range(layers)),
        query_heads=query_heads,
    )


@dataclass(frozen=True)
class KvBytes:
    """KV-cache bytes of one geometry at ``tokens`` tokens, ``batch`` sequences and ``dtype`` values."""

    geometry: CacheGeometry
    tokens: int
    batch: int
    dtype: str
    source: str = ""
    mla: MlaDims | None = None

    @property
    def bytes_per_value(self) -> Fraction:
        return BYTES_PER_VALUE[self.dtype]

    def layer_per_token(self, layer: LayerGeometry, kv_heads: int | None = None) -> Fraction:
        """Bytes one token costs in ``layer``: (d_k + d_v) × H_kv × bytes (2 × H_kv × d_head × bytes)."""
        heads = layer.kv_heads if kv_heads is None else kv_heads
        return (layer.k_head_dim + layer.v_head_dim) * heads * self.bytes_per_value

    def kept(self, layer: LayerGeometry) -> int:
        """Tokens ``layer`` keeps after ``tokens`` tokens (a sliding window keeps at most window - 1)."""
        return layer.stored_length(self.tokens, None)

    def layer_bytes(self, layer: LayerGeometry, kv_heads: int | None = None) -> Fraction:
        """Bytes ``layer`` holds for the whole batch (optionally as if it had ``kv_heads`` KV heads)."""
        return self.layer_per_token(layer, kv_heads) * self.kept(layer) * self.batch

    @property
    def per_token_layer(self) -> Fraction | None:
        """Bytes per token per K/V layer, or None when the layers differ."""
        values = {self.layer_per_token(layer) for layer in self.geometry.kv_layers}
        return values.pop() if len(values) == 1 else None

    @property
    def per_token(self) -> Fraction:
        """Bytes one token costs across all layers that keep K/V."""
        return sum((self.layer_per_token(layer) for layer in self.geometry.kv_layers), Fraction(0))

    @property
    def per_batch(self) -> Fraction:
        return sum((self.layer_bytes(layer) for layer in self.geometry.layers), Fraction(0))

    @property
    def per_sequence(self) -> Fraction:
        return self.per_batch / self.batch

    @property
    def mha_bytes(self) -> Fraction | None:
        """The batch's bytes with one KV head per query head (no GQA/MQA).

        None without a query-head count, and for MLA (see :func:`mla_summary`).
        """
        if self.mla is not None or not self.geometry.query_heads:
            return None
        heads = self.geometry.query_heads
        return sum((self.layer_bytes(layer, heads) for layer in self.geometry.kv_layers), Fraction(0))

    @property
    def full_length_bytes(self) -> Fraction:
        """The batch's bytes if every sliding layer kept all ``tokens`` tokens."""
        return sum((self.layer_bytes(replace(layer, window=None)) for layer in self.geometry.layers), Fraction(0))

    def mla_bytes(self, values_per_token: int) -> Fraction:
        """The batch's bytes when every K/V layer caches ``values_per_token`` values per token."""
        tokens = sum(self.kept(layer) for layer in self.geometry.kv_layers)
        return values_per_token * tokens * self.batch * self.bytes_per_value


def _number(value: Fraction) -> int | float:
    return value.numerator if value.denominator == 1 else float(value)


def format_bytes(value: Fraction | int) -> str:
    """``134,217,728 B (128.00 MiB)``: exact bytes with thousands separators, then a binary unit."""
    value = Fraction(value)
    exact = f"{value.numerator:,}" if value.denominator == 1 else f"{float(value):,.1f}"
    scaled, unit = float(value) / 1024, _UNITS[0]
    for unit in _UNITS:
        if scaled < 1024 or unit == _UNITS[-1]:
            break
        scaled /= 1024
    return f"{exact} B ({scaled:.2f} {unit})"


def _factor(ratio: Fraction) -> str:
    return f"{ratio.numerator}×" if ratio.denominator == 1 else f"{float(ratio):.2f}×"


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``; an evenly spaced ``[1, 3, 5, 7]`` -> ``1-7 step 2``."""
    steps = {b - a for a, b in zip(indices, indices[1:], strict=False)}
    if len(indices) > 2 and len(steps) == 1 and steps != {1}:
        return f"{indices[0]}-{indices[-1]} step {steps.pop()}"
    runs = [[i for _, i in run] for _, run in groupby(enumerate(indices), lambda pair: pair[1] - pair[0])]
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def layer_groups(kv: KvBytes) -> list[dict[str, Any]]:
    """Layers with the same cache layout, one row each (no-K/V layers as 0 bytes)."""
    groups: dict[tuple[Any, ...], list[LayerGeometry]] = {}
    for layer in kv.geometry.layers:
        groups.setdefault((layer.kind, layer.kv_heads, layer.k_head_dim, layer.v_head_dim, layer.window), []).append(layer)
    rows = []
    for (kind, heads, k_dim, v_dim, window), layers in groups.items():
        first = layers[0]
        rows.append({
            "layers": _ranges([layer.index for layer in layers]), "count": len(layers), "kind": kind, "kv_heads": heads,
            "k_head_dim": k_dim, "v_head_dim": v_dim, "window": window, "tokens_kept": kv.kept(first),
            "bytes_per_token_per_layer": kv.layer_per_token(first),
            "bytes_per_batch": sum((kv.layer_bytes(layer) for layer in layers), Fraction(0)),
        })
    return rows


def sliding_summary(kv: KvBytes) -> dict[str, Any] | None:
    """What sliding-window layers save against keeping all N tokens; None without such layers."""
    sliding = [layer for layer in kv.geometry.layers if layer.kind == SLIDING]
    if not sliding:
        return None
    full = kv.full_length_bytes
    return {
        "layers": len(sliding),
        "windows": sorted({layer.window for layer in sliding}),
        "tokens_kept": sorted({kv.kept(layer) for layer in sliding}),
        "bytes_if_full": full,
        "bytes_saved": full - kv.per_batch,
    }


def mla_summary(kv: KvBytes) -> dict[str, Any] | None:
    """Latent cache against per-head K/V for an MLA config; None otherwise."""
    if kv.mla is None:
        return None
    latent, expanded = kv.mla.latent_values, kv.mla.expanded_values
    return {
        **asdict(kv.mla),
        "latent_values_per_token_per_layer": latent,
        "expanded_values_per_token_per_layer": expanded,
        "latent_bytes_per_token_per_layer": latent * kv.bytes_per_value,
        "expanded_bytes_per_token_per_layer": expanded * kv.bytes_per_value,
        "latent_bytes_per_batch": kv.mla_bytes(latent),
        "expanded_bytes_per_batch": kv.mla_bytes(expanded),
        "factor": Fraction(expanded, latent),
    }


def mha_summary(kv: KvBytes) -> dict[str, Any] | None:
    """The same model with one KV head per query head; None when that cannot be said."""
    mha = kv.mha_bytes
    if mha is None or not kv.per_batch:
        return None
    return {"query_heads": kv.geometry.query_heads, "bytes_per_batch": mha, "factor": mha / kv.per_batch,
            "bytes_saved": mha - kv.per_batch}


def to_json(kv: KvBytes) -> dict[str, Any]:
    """Every figure as plain JSON types (exact integers where the bytes are whole)."""
    kinds = [layer.kind for layer in kv.geometry.layers]
    doc = {
        "formula": FORMULA, "source": kv.source, "tokens": kv.tokens, "batch": kv.batch, "dtype": kv.dtype,
        "bytes_per_value": kv.bytes_per_value,
        "layers": {"total": len(kinds), **{kind: kinds.count(kind) for kind in (FULL, SLIDING, NO_KV)}},
        "layer_groups": layer_groups(kv),
        "bytes_per_token_per_layer": kv.per_token_layer, "bytes_per_token": kv.per_token,
        "bytes_per_sequence": kv.per_sequence, "bytes_per_batch": kv.per_batch,
        "mha": mha_summary(kv), "sliding_window": sliding_summary(kv), "mla": mla_summary(kv),
    }
    return _plain(doc)


def _plain(value: Any) -> Any:
    if isinstance(value, Fraction):
        return _number(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _shorten(text: str, width: int = 24) -> str:
    """Cut a long layer list at a comma so the table stays narrow (the count column keeps the total)."""
    return text if len(text) <= width else text[: text.rfind(",", 0, width)] + ",…"


def _layer_table(kv: KvBytes) -> str:
    rows = []
    for g in layer_groups(kv):
        shape = [g["kv_heads"], f"{g['k_head_dim']}/{g['v_head_dim']}"] if g["kind"] != NO_KV else ["-", "-"]
        window = "-" if g["window"] is None else f"{g['window']:,}"
        rows.append([_shorten(g["layers"]), g["count"], g["kind"], *shape, window, f"{g['tokens_kept']:,}",
                     format_bytes(g["bytes_per_token_per_layer"]), format_bytes(g["bytes_per_batch"])])
    headers = ["layers", "count", "kind", "H_kv", "d_k/d_v", "window", "tokens kept", "per token per layer",
               "per batch"]
    return tabulate(rows, headers, tablefmt="simple", disable_numparse=True,
                    colalign=("left", "right", "left", *["right"] * 6))


def _summary_table(kv: KvBytes) -> str:
    per_layer = kv.per_token_layer
    rows = [
        ["per token per layer", "varies (see layers)" if per_layer is None else format_bytes(per_layer)],
        ["per token (all layers)", format_bytes(kv.per_token)],
        [f"per sequence (N={kv.tokens:,})", format_bytes(kv.per_sequence)],
        [f"per batch (B={kv.batch:,})", format_bytes(kv.per_batch)],
    ]
    return tabulate(rows, tablefmt="plain", disable_numparse=True, colalign=("left", "right"))


def _notes(kv: KvBytes) -> list[str]:
    notes = []
    mha, sliding, mla = mha_summary(kv), sliding_summary(kv), mla_summary(kv)
    if mha:
        notes.append(
            f"GQA vs MHA: with {mha['query_heads']} KV heads (one per query head) the batch would need "
            f"{format_bytes(mha['bytes_per_batch'])}, {_factor(mha['factor'])} this cache "
            f"(GQA saves {format_bytes(mha['bytes_saved'])})."
        )
    if sliding:
        windows = ", ".join(f"{w:,}" for w in sliding["windows"])
        kept = ", ".join(f"{n:,}" for n in sliding["tokens_kept"])
        notes.append(
            f"Sliding window: {sliding['layers']} layers (window {windows}) keep min(N, window - 1) = {kept} tokens "
            f"instead of {kv.tokens:,}; all N would need {format_bytes(sliding['bytes_if_full'])}, "
            f"the window saves {format_bytes(sliding['bytes_saved'])}."
        )
    if mla:
        notes.append(
            f"MLA latent: kv_lora_rank + qk_rope_head_dim = {mla['latent_values_per_token_per_layer']:,} values per "
            f"token per layer = {format_bytes(mla['latent_bytes_per_token_per_layer'])}; "
            f"per batch {format_bytes(mla['latent_bytes_per_batch'])}."
        )
        notes.append(
            f"MLA expanded: {mla['heads']} heads × ({mla['qk_nope_head_dim']} + {mla['qk_rope_head_dim']} K + "
            f"{mla['v_head_dim']} V) = {mla['expanded_values_per_token_per_layer']:,} values per token per layer = "
            f"{format_bytes(mla['expanded_bytes_per_token_per_layer'])}; per batch "
            f"{format_bytes(mla['expanded_bytes_per_batch'])}, {_factor(mla['factor'])} the latent."
        )
    no_kv = sum(1 for layer in kv.geometry.layers if not layer.keeps_kv)
    if no_kv:
        notes.append(f"{no_kv} layers keep no K/V (linear attention, SSM or shared K/V): 0 bytes each.")
    return notes


def render_text(kv: KvBytes) -> str:
    """The human report: inputs, per-layer table, the four totals, then GQA/sliding/MLA notes."""
    header = [
        f"KV cache = {FORMULA}",
        f"source: {kv.source}",
        f"N = {kv.tokens:,} tokens, B = {kv.batch:,}, {kv.dtype} = {_number(kv.bytes_per_value)} bytes per value",
    ]
    parts = ["\n".join(header), _layer_table(kv), _summary_table(kv), "\n".join(_notes(kv))]
    return "\n\n".join(part for part in parts if part) + "\n"


def residual_split(prompt: int, steps: int, residual_length: int) -> tuple[int, int]:
    """``(quantized, residual)`` tokens of an integer-quantized layer after the prefill of ``prompt`` tokens and
    ``steps`` one-token updates, by its documented design (KIVI's residual): the prefill is quantized whole; each
    token joins the full-precision residual, and when the residual and the new token reach ``residual_length``
    all of them are quantized and the residual emptied."""
    quantized, residual = prompt, 0
    for _ in range(steps):
        if residual + 1 >= residual_length:
            quantized, residual = quantized + residual + 1, 0
        else:
            residual += 1
    return quantized, residual


def int_quantized_bytes(layer: LayerGeometry, batch: int, quantized: int, residual: int, config: dict[str, Any],
                        value_bytes: int) -> int:
    """Bytes of one quanto/HQQ layer by the backends' documented layout: per tensor, ``numel × nbits / 8`` packed bytes
    (quanto packs ``8 // nbits`` rows of groups into one, rounding the rows up; HQQ ``8 // nbits`` rows of its
    ``[q_group_size, groups]`` view), one scale and one zero point per group of ``q_group_size`` values in the K/V
    dtype, and the residual's tokens in the K/V dtype (``value_bytes`` each)."""
    group, per_byte = config["q_group_size"], 8 // config["nbits"]
    total = 0
    for head_dim in (layer.k_head_dim, layer.v_head_dim):
        groups = batch * layer.kv_heads * quantized * head_dim // group
        packed = -(-groups // per_byte) * group if config["backend"] == "quanto" else group // per_byte * groups
        total += packed + 2 * groups * value_bytes + batch * layer.kv_heads * residual * head_dim * value_bytes
    return total

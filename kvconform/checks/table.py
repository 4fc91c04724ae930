"""The one table of checks: name, what it asserts, when it applies to a cell, report column order.

Plain data (no torch, no pytest): the cells, the reports and the suites read it. ``checks.run_check``
binds the checks causal-LM cells run, ``families.checks.run_family_check`` the ones only other
families run; each refuses to import if its bindings and the table ever differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvconform.families import CAUSAL_LM, ENCODER_DECODER, FAMILIES, INT_CACHES, MULTIMODAL, TEXT_TO_AUDIO

if TYPE_CHECKING:  # matrix.py reads the table to validate known-failure keys
    from kvconform.matrix import Settings

#: Cache kinds whose reference is a full-precision run: the fp8 cache leaves it by design (its frozen scale
#: saturates), so quantized cells are judged against the fp8 design instead (docs/cache-paths.md).
FULL_PRECISION = ("dynamic", "static")
#: The integer-quantized cache kinds (``matrix.INT_QUANTIZED``'s keys): quanto and HQQ, judged against their residual design.
INT_KINDS = INT_CACHES
#: The quantized cache kinds (``matrix.QUANTIZED_KINDS``; kept here, as the matrix reads this table).
QUANTIZED_KINDS = ("quantized", *INT_KINDS)
CAUSAL = (CAUSAL_LM,)
#: The families whose generate() paths (greedy with and without the cache, beam search) run through the one probe code,
#: given each family's prompt (``probe.generate_inputs``); codebook decoders' generate() is their own check.
GENERATE_PATHS = (CAUSAL_LM, *MULTIMODAL, *ENCODER_DECODER)
#: The families whose prompts run as a padded batch: the generate() paths' and codebook decoders' (a text conditioning
#: their processors pad: ``families/codebook_ragged.py``).
RAGGED_PATHS = (*GENERATE_PATHS, TEXT_TO_AUDIO)
#: The families whose cache paths (crop, reorder, prefix reuse, window crossings) run through the one probe code, given
#: each family's forwards (``probe.forwards``): an image or encoder output at the prefill, both halves of an
#: encoder-decoder cache, a codebook decoder's code rows (positions fed again as its decode fed them: the frames it chose).
CACHE_PATHS = (*GENERATE_PATHS, TEXT_TO_AUDIO)
#: The chunked prefill: causal LMs, encoder-decoders (the decoder prompt in chunks over the encoder output once),
#: vision- and audio-language prompts (the hand-driven first chunk holds the media whole; generate() splits it, handing
#: each chunk the pre-encoded features of its placeholders) and codebook decoders (hand-driven only: their generate(),
#: their own loops, is the codebook_generate check's).
CHUNKED_PATHS = CACHE_PATHS
#: The cross-attention checks: encoder-decoders, and text-to-audio cells whose driver records a cross-attention half
#: (SeamlessM4T's text-to-unit decoder; the family's other cells skip them as not applicable, ``FamilyProbe.not_applicable``).
CROSS_CHECKS = (*ENCODER_DECODER, TEXT_TO_AUDIO)


@dataclass(frozen=True)
class CheckInfo:
    """One conformance check."""

    name: str
    summary: str
    enabled_by: str | None = None
    """A matrix setting (``generate``, ``ragged``, ``beam`` …) that turns the check on per model."""
    float32_only: bool = False
    caches: tuple[str, ...] | None = None
    """The cache kinds it runs on (``None``: all)."""
    attention: str | None = None
    """``default``: only with the model's own attention; ``other``: only with another one; ``None``: any."""
    families: tuple[str, ...] = FAMILIES
    """The model families whose cells run the check (``kvconform.families``)."""
    reuse_path: bool = False
    """A path that drives the cache beyond the decode (generate, ragged, prefix reuse, crop, padded generate, chunked
    prefill): it also follows the matrix's ``path_dtypes`` and ``static_paths``."""

    def applies(self, settings: Settings, dtype: str, family: str, cache: str = "dynamic",
                default_attention: bool = True) -> bool:
        enabled = self.enabled_by is None or bool(getattr(settings, self.enabled_by))
        attention = self.attention is None or (self.attention == "default") == default_attention
        return (family in self.families and enabled and attention and (not self.float32_only or dtype == "float32")
                and (self.caches is None or cache in self.caches)
                and (not self.reuse_path or _reuse_path_runs(settings, dtype, cache)))

    def scope(self) -> str:
        """Which cells the check runs on, in words (e.g. why a cell of one release has no such result in another)."""
        parts = [f"{'/'.join(self.families)} models"] if self.families != FAMILIES else []
        parts += ["float32 cells"] if self.float32_only else []
        parts += [f"the {'/'.join(self.caches)} cache"] if self.caches else []
        if self.attention:
            parts.append("with the model's default attention" if self.attention == "default"
                         else "with an attention other than the model's default")
        setting = f" where the matrix turns on {self.enabled_by!r}" if self.enabled_by else ""
        reuse = " (in the matrix's path_dtypes, on static caches where static_paths is on)" if self.reuse_path else ""
        return f"{self.name} runs on {', '.join(parts) or 'every cell'}{setting}{reuse}"


def _reuse_path_runs(settings: Settings, dtype: str, cache: str) -> bool:
    """Whether a cell of ``dtype`` and ``cache`` runs the reuse paths (the matrix's ``path_dtypes`` and ``static_paths``)."""
    return (settings.path_dtypes is None or dtype in settings.path_dtypes) and (settings.static_paths or cache == "dynamic")


#: In report column order.
CHECK_TABLE: tuple[CheckInfo, ...] = (
    CheckInfo("parity", "cached next-token logits match one uncached pass at every decode step"),
    CheckInfo("kv_parity", "every layer's stored K/V at every position match one fresh pass over the final sequence",
              caches=FULL_PRECISION),
    CheckInfo("growth", "the cache grows by one position per step; each layer stores what its type keeps"),
    CheckInfo("shapes", "every layer's K/V is [B, H_kv, S_layer, head_dim] with H_kv and head_dim from the config"),
    CheckInfo("bytes", "the K/V bytes equal 2 x L x H_kv x d_head x N x B x bytes (per layer)"),
    # The reuse paths run with the model's own attention: on 5.24 each of the 53 known failures of generate, ragged,
    # prefix_reuse or crop on an attention-variant cell repeated the same check's on the model's default cell (49) or
    # the cell's own parity failure (4) (docs/performance.md, "What the matrix prunes").
    CheckInfo("generate", "generate() with and without the cache picks the same greedy tokens",
              enabled_by="generate", float32_only=True, caches=FULL_PRECISION, attention="default", families=GENERATE_PATHS,
              reuse_path=True),
    # Family cells through generate(): a vision- or audio-language prompt batched with shorter texts after the media
    # (left-padded), an encoder-decoder's text input batched with a shorter row (right-padded, as its tokenizer pads).
    CheckInfo("ragged", "a padded batch: each row matches its own unpadded uncached pass", enabled_by="ragged",
              caches=FULL_PRECISION, attention="default", families=RAGGED_PATHS, reuse_path=True),
    CheckInfo("prefix_reuse", "a copied prefix cache, extended and decoded, matches a fresh run", enabled_by="prefix_reuse",
              caches=FULL_PRECISION, attention="default", families=CACHE_PATHS, reuse_path=True),
    CheckInfo("crop", "a prefilled cache cropped back 3 tokens and decoded again matches a fresh run", enabled_by="crop",
              caches=FULL_PRECISION, attention="default", families=CACHE_PATHS, reuse_path=True),
    # With the model's own attention: on 5.24 each of the 60 eager window cells gave its sdpa cell's verdict (docs/cache-paths.md).
    CheckInfo("window", "sliding-window and chunked layers decoded from prompts shorter than and equal to the "
              "window: parity, growth, shapes and mask sizes at every step", enabled_by="window_crossings", float32_only=True,
              caches=FULL_PRECISION, attention="default", families=CACHE_PATHS),
    CheckInfo("chunked_prefill", "the prompt prefilled in chunks (generate(prefill_chunk_size=...)) equals one prefill: "
              "every chunk's logits, every K/V and conv/recurrent state, generate()'s tokens", enabled_by="chunked_prefill",
              float32_only=True, caches=FULL_PRECISION, attention="default", families=CHUNKED_PATHS, reuse_path=True),
    # With the model's own attention: on 5.24 every beam failure of an eager cell repeated its sdpa cell's (docs/performance.md).
    # quanto/HQQ cells: against beam search through their residual design (int_design.py), not the uncached run.
    CheckInfo("beam", "beam search with and without the cache returns the same beams and scores (quanto/HQQ: the "
              "beams of the same search through the cache's residual design)", enabled_by="beam",
              float32_only=True, caches=("dynamic", *INT_KINDS), attention="default", families=GENERATE_PATHS),
    CheckInfo("reorder", "reorder_cache on a prefilled cache equals prefilling the rows in that order", enabled_by="beam",
              float32_only=True, caches=("static", *QUANTIZED_KINDS), families=CACHE_PATHS),
    CheckInfo("padded_generate", "generate() on a left-padded batch picks the same tokens with and without the cache",
              enabled_by="padded_generate", float32_only=True, caches=FULL_PRECISION, attention="default", families=CAUSAL,
              reuse_path=True),
    # The dynamic cache only (static: refused past a window, 104 of 104 other cells agreed with their dynamic cell on 5.24);
    # another attention on windowed models only, one drafter (docs/cache-paths.md).
    CheckInfo("assisted", "assisted generate() (the model as its own assistant, a random assistant, prompt lookup) returns "
              "greedy's tokens, its logits within the parity limit of one uncached pass", enabled_by="assisted",
              float32_only=True, caches=("dynamic",), families=(CAUSAL_LM, *ENCODER_DECODER, *MULTIMODAL)),
    # Dynamic cells: continued (causal LMs: and a second, padded prompt); static and quantized (fp8, quanto, HQQ): the same
    # arguments twice; codebook decoders (their own generate() loops): the cached call twice (docs/cache-paths.md).
    CheckInfo("between_calls", "generate() again through the same model: continued from its returned cache, with extra "
              "left padding, a second prompt, the same cache_config twice: the same tokens, the user's dict unchanged",
              enabled_by="generate", float32_only=True, caches=(*FULL_PRECISION, *QUANTIZED_KINDS), attention="default",
              families=(*GENERATE_PATHS, TEXT_TO_AUDIO), reuse_path=True),
    CheckInfo("attn_agreement", "this attention and the model's default agree on uncached logits", float32_only=True,
              caches=("dynamic",), attention="other", families=CAUSAL),
    CheckInfo("quantized_kv", "a quantized cache stores what its backend's design stores (fp8: the frozen-scale float8 "
              "round trip; quanto/HQQ: the residual, and packed values that dequantize to the design's)",
              caches=QUANTIZED_KINDS, families=(CAUSAL_LM, *MULTIMODAL)),
    CheckInfo("cross_growth", "every cross-attention layer holds the encoder length from the prefill on, never growing",
              families=CROSS_CHECKS),
    CheckInfo("cross_shapes", "cross-attention K/V are [B, H_kv, encoder length, head_dim] with the decoder's heads",
              families=CROSS_CHECKS),
    CheckInfo("cross_bytes", "cross-attention K/V bytes equal the formula with S = encoder length", families=CROSS_CHECKS),
    CheckInfo("encoder_once", "the encoder runs once; the cross K/V written at the prefill are read at every step",
              families=CROSS_CHECKS),
    # The dynamic cache only: on 5.24 each of the 4 non-passing static text_only results (of 83 static multimodal cells)
    # repeated its cell's own parity@static failure (docs/performance.md, "What the matrix prunes").
    CheckInfo("text_only", "a text-only prompt on a vision- or audio-language model: parity and growth", caches=("dynamic",),
              families=MULTIMODAL),
    # The dynamic cache only: its generate() calls build generate()'s own cache, so a static cell would repeat them.
    CheckInfo("media_calls", "generate() through one instance of a vision- or audio-language model: text, an image, "
              "another image, text again; each within the parity limit of its uncached pass, the text's tokens the same twice",
              caches=("dynamic",), families=MULTIMODAL),
    CheckInfo("codebook_parity", "every codebook head's cached logits match the uncached pass at every decode step",
              families=(TEXT_TO_AUDIO,)),
    CheckInfo("codebook_generate", "generate() with and without the cache returns the same codes (or waveform)",
              families=(TEXT_TO_AUDIO,)),
)
CHECKS: dict[str, CheckInfo] = {check.name: check for check in CHECK_TABLE}
CHECK_ORDER: tuple[str, ...] = tuple(CHECKS)
#: Checks that read a ``ProbeRecord`` (``suites/test_conformance.py``): every check causal-LM cells can run.
RECORD_CHECKS: tuple[str, ...] = tuple(check.name for check in CHECK_TABLE if CAUSAL_LM in check.families)
#: Checks that read a family probe (``suites/test_families.py``): the ones only other families run.
FAMILY_CHECKS: tuple[str, ...] = tuple(check.name for check in CHECK_TABLE if CAUSAL_LM not in check.families)
#: Checks that read an extra cache path of the probe (a record of that name).
PATH_CHECKS: tuple[str, ...] = ("ragged", "prefix_reuse", "crop", "reorder")

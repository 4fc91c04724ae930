"""Codebook decoders (text-to-audio): K codebook streams decoded together, one distribution per codebook head.

Every model of the family takes its codes as rows of ``[B * K, S]`` (row ``b * K + k`` is codebook ``k`` of batch
row ``b``; Dia's ``[B, S, K]`` is the same ids transposed) and returns logits ``[B * K, S, vocab]`` in that order,
so the family decode loop runs unchanged over ``B * K`` rows and each row's logits are one codebook head's.

- the prompt: frame 0 holds the start token in every codebook, then random codes; codebook ``k`` holds the start
  token at its first ``delays[k] + 1`` positions, and every decode step forces it there too, as ``generate()``'s
  delay pattern does (MusicGen: ``build_delay_pattern_mask``, a delay of ``k``; Dia: ``config.delay_pattern``);
- the text conditioning: an encoder-decoder (MusicGen, Dia) runs its text encoder once and every decoder call reads
  its output (a cross-attention cache, ``EncoderDecoderCache``), driven by the encoder-decoder sweep's own
  ``drive_encoder_decoder`` (the encoder's calls counted, the cross half snapshotted every step for the cross checks);
  MusicGen Melody prepends the projected text and chroma states to the decoder sequence (its decoder layers have
  self-attention only, modeling_musicgen_melody.py:300-362), so the cache holds that prefix before the codes;
- the reference: ONE uncached pass over the whole code sequence with the same conditioning.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.encoder_decoder import drive_encoder_decoder
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.matrix import Tolerance
from kvconform.probe.cache_io import new_cache, seq_length
from kvconform.probe.calls import CallsRecord
from kvconform.probe.decode import ProbePlan
from kvconform.probe.forwards import Forwards, fed_back

#: Text tokens of the conditioning prompt.
TEXT_TOKENS = 5


@dataclass(frozen=True)
class Layout:
    """How a model's codes are laid out: codebooks, each codebook's delay, the start token, the code vocabulary."""

    codebooks: int
    delays: tuple[int, ...]
    start: int
    vocab: int
    channels_last: bool
    """Whether the forward takes ``[B, S, K]`` (Dia) rather than ``[B * K, S]`` (MusicGen)."""
    source: str

    def to_model(self, rows: torch.Tensor) -> torch.Tensor:
        """``[B * K, S]`` rows in the layout the model's forward takes."""
        if not self.channels_last:
            return rows
        return rows.reshape(-1, self.codebooks, rows.shape[-1]).transpose(1, 2).contiguous()

    def delayed(self, rows: torch.Tensor, first: int) -> torch.Tensor:
        """``rows`` (positions ``first``, ``first + 1``, …) with the start token where a codebook is still delayed."""
        out = rows.clone()
        codebook = torch.arange(rows.shape[0], device=rows.device) % self.codebooks
        delays = torch.tensor(self.delays, device=rows.device)[codebook]
        positions = torch.arange(first, first + rows.shape[1], device=rows.device)
        out[positions[None, :] <= delays[:, None]] = self.start
        return out


def layout(model: Model) -> Layout:
    """The code layout of a codebook decoder, from its config."""
    config = model.config
    decoder = getattr(config, "decoder", None) or getattr(config, "decoder_config", None)
    if decoder is None:
        raise ValueError(f"{type(config).__name__} has no decoder sub-config: not a codebook decoder this family drives")
    if hasattr(decoder, "num_codebooks"):  # MusicGen, MusicGen Melody
        codebooks = int(decoder.num_codebooks)
        if getattr(decoder, "audio_channels", 1) != 1:
            raise ValueError("stereo MusicGen (audio_channels 2) interleaves its codebooks; only mono is driven")
        start = _first_int(model.generation_config, config, decoder, name="decoder_start_token_id")
        return Layout(codebooks, tuple(range(codebooks)), start, int(decoder.vocab_size), False,
                      "build_delay_pattern_mask: codebook k delayed by k (modeling_musicgen.py:851-855)")
    delays = tuple(int(d) for d in getattr(config, "delay_pattern", None) or ())
    codebooks = int(decoder.num_channels)
    if len(delays) != codebooks:
        raise ValueError(f"delay_pattern {list(delays)} does not name one delay per channel ({codebooks})")
    return Layout(codebooks, delays, int(decoder.bos_token_id), int(decoder.vocab_size), True,
                  "config.delay_pattern, as DiaProcessor delays the channels (processing_dia.py apply_audio_delay)")


def _first_int(*sources: Any, name: str) -> int:
    for source in sources:
        value = getattr(source, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise ValueError(f"no {name} in the generation config or the config")


#: Published MusicGen checkpoints generate with classifier-free guidance 3.0 (convert_musicgen_transformers.py and
#: convert_musicgen_melody_transformers.py in transformers' repository set ``generation_config.guidance_scale = 3.0``
#: beside ``do_sample=True``): the cell keeps the guidance, which doubles the batch through the cache, and decodes
#: greedily so the two runs must agree. Dia keeps its own generation config (no published value checked here).
GUIDANCE_SCALE = {"musicgen": 3.0, "musicgen_melody": 3.0}

#: What greedy decoding needs besides ``do_sample=False``: CSM's depth decoder decodes by its own generation config,
#: which ``generate()`` updates from ``depth_decoder_*`` arguments (generation_csm.py:99-108); a checkpoint whose depth
#: decoder samples would otherwise make the two runs differ by chance.
GREEDY_SETTINGS: dict[str, dict[str, Any]] = {"csm": {"depth_decoder_do_sample": False}}


@dataclass(frozen=True)
class GenerateRun:
    """``generate()`` with and without the cache: what each returned (codes, or MusicGen's decoded waveform) and
    how far apart their per-step scores are."""

    config: str
    output: str
    equal: bool
    detail: str
    score_delta: float | None = None
    """Max |Δ| between the two runs' processed scores over every generated step (``None``: not comparable)."""
    score_scale: float = 0.0
    error: str | None = None
    again: GenerateRun | None = None
    """The cached call made again with the same arguments through the same instance, against the first (``None``: not
    made, the first calls raised)."""
    continued: GenerateRun | None = None
    """A shorter cached call continued from the cache it returned, against the first (``None``: not made; where it
    is made: a model whose ``generate()`` continues, on a dynamic cell)."""


def generated_twice(described: str, call: Callable[[bool], Any], compare: Callable[[Any, Any], GenerateRun],
                    again: bool = True, continued: Callable[[Any], GenerateRun] | None = None) -> GenerateRun:
    """``call(use_cache)`` cached, uncached, then (where ``again``: the cell runs between_calls) cached again through the
    same instance: the first two compared (``compare(cached, uncached)``), the third against the first (state a call
    leaves for the next one); ``continued(cached)`` makes a shorter call, continues it, and compares with ``cached`` (a
    call that raises is its ``error``)."""
    outputs: dict[str, Any] = {}
    for name, use_cache in (("cached", True), ("uncached", False), ("again", True))[: 3 if again else 2]:
        try:
            outputs[name] = call(use_cache)
        except Exception as exc:  # noqa: BLE001 - a model that cannot generate fails the check with its error
            failed = GenerateRun(described, "", False, "", error=f"use_cache={use_cache}: {type(exc).__name__}: {exc}")
            if name != "again":
                return failed
            outputs[name] = failed
    run = compare(outputs["cached"], outputs["uncached"])
    if continued is not None:
        run = replace(run, continued=continued(outputs["cached"]))
    if "again" not in outputs:
        return run
    second = outputs["again"]
    return replace(run, again=second if isinstance(second, GenerateRun) else compare(second, outputs["cached"]))


#: The codebook decoders whose own ``generate(cache_implementation="static")`` builds a static cache for the stage the
#: cell decodes, by model type: their static cells decode through it and call generate() with it. Dia: an
#: EncoderDecoderCache of two StaticCaches (_prepare_static_cache); CSM: the backbone's StaticCache, the depth decoder's
#: per-frame cache the dynamic one its own generation config builds (generation_csm.py:274), as that call leaves it;
#: MusicGen Melody: a StaticCache of the decoder config (its generate() calls _prepare_cache_for_generation,
#: modeling_musicgen_melody.py:1966-1972); SeamlessM4T: the text-to-unit model's two-half one (``speech_``
#: arguments reach its generate(), modeling_seamless_m4t.py:212-217); Bark: a StaticCache per causal stage (its generate()
#: hands an unprefixed argument to every stage, modeling_bark.py:1414-1440, whose GenerationMixin.generate builds it).
STATIC_CODEBOOK_TYPES = frozenset({"bark", "dia", "csm", "musicgen_melody", "seamless_m4t", "higgs_audio_v2", "qwen2_5_omni",
                                   "qwen3_omni_moe"})
#: Why the other codebook decoders run no static cell, measured on 5.24.
NO_STATIC_CELL = {
    "musicgen": "MusicgenForConditionalGeneration.generate() never builds its cache from cache_implementation (it does "
                "not call _prepare_cache_for_generation: modeling_musicgen.py:1882-2100 in 5.24), so "
                "generate(cache_implementation='static') decodes with a DynamicCache: no static path of the model's",
}


def static_support(model: Model) -> str | None:
    """Why a codebook decoder's static cell does not run, or ``None`` where its generate() builds a static cache."""
    model_type = model.config.model_type
    if model_type in STATIC_CODEBOOK_TYPES:
        return None
    return NO_STATIC_CELL.get(model_type, f"{type(model).__name__}: its stages' static caches are not built here (the "
                              f"static codebook cells: {', '.join(sorted(STATIC_CODEBOOK_TYPES))})")


def generate_settings(model: Model, new_tokens: int, settings: dict[str, Any] | None = None, cache: str = "dynamic") -> dict[str, Any]:
    """The cell's greedy ``generate()`` arguments: the model's own greedy settings and published guidance, ``settings``
    (the model's own), and a static cell's ``cache_implementation``."""
    guidance = GUIDANCE_SCALE.get(model.config.model_type)
    return {"do_sample": False, "max_new_tokens": new_tokens, **GREEDY_SETTINGS.get(model.config.model_type, {}),
            **({"guidance_scale": guidance} if guidance else {}), **(settings or {}),
            **({"cache_implementation": "static"} if cache == "static" else {})}


def run_generate(model: Model, text: torch.Tensor, new_tokens: int, inputs: dict[str, torch.Tensor] | None = None,
                 settings: dict[str, Any] | None = None, cache: str = "dynamic", again: bool = True,
                 continued: Callable[[Any], GenerateRun] | None = None) -> GenerateRun:
    """Greedy ``generate()`` on the text prompt (and ``inputs``, the audio a prompt holds) with ``use_cache`` True and
    False, as a user calls it; ``settings`` are the model's own greedy ones; a static cell's cached call asks for
    ``cache_implementation="static"``. A model that returns its codes beside the text ids (Higgs Audio:
    ``audio_sequences``) is compared on its codes; ``continued`` (see ``generated_twice``) where the model continues."""
    settings = generate_settings(model, new_tokens, settings, cache)
    described = ", ".join(f"{k}={v}" for k, v in settings.items())

    def call(use_cache: bool) -> Any:
        given = settings if use_cache else {k: v for k, v in settings.items() if k != "cache_implementation"}
        with torch.inference_mode():
            return model.generate(input_ids=text, use_cache=use_cache, return_dict_in_generate=True, output_scores=True,
                                  **(inputs or {}), **given)

    return generated_twice(described, call, lambda cached, uncached: compare_generated(described, cached, uncached), again,
                           continued)


#: The comparison ``between_calls`` makes on every codebook decoder (its generate() runs its own loop).
AGAIN = "generate() again through the same instance with the same arguments (the cached call)"
#: Why a codebook decoder's generate() is not continued from the cache it returned, measured on 5.24 (Higgs Audio's is,
#: on dynamic cells: ``inline_codebooks.continue_generate``).
NOT_CONTINUED = {
    "musicgen": "MusicGen's generate() takes no past_key_values and returns the waveform",
    "musicgen_melody": "MusicGen Melody's generate() takes no past_key_values and returns the waveform",
    "csm": "CSM's generate() returns the new frames only ([B, new, K], not a sequence to continue)",
    "dia": "Dia's generate() rebuilds its delayed prompt at the first step (generation_dia.py:231-237; transformers' Dia "
           "tests skip their continuation test)",
    "bark": "BarkModel.generate() returns the waveform (its stages' generate() calls, each with its own cache, run inside it)",
    "seamless_m4t": "SeamlessM4T's generate() returns the waveform (its text-to-unit model's generate() runs inside it)",
    "qwen2_5_omni": "the model's generate() drives the talker inside it and returns text and waveform; a talker "
                    "continuation is not built here",
    "qwen3_omni_moe": "the model's generate() drives the talker inside it and returns text and waveform; a talker "
                      "continuation is not built here",
}


def calls_record(run: GenerateRun, tolerance: Tolerance | None, model_type: str, cache: str) -> CallsRecord:
    """The ``between_calls`` record of a codebook decoder: its cached ``generate()`` made again, and where built
    continued from a shorter call's returned cache, each against the first: the same output with scores within the
    parity limit of their scale."""
    record = CallsRecord(calling=AGAIN)
    limit = (lambda scale: tolerance.limit(scale)) if tolerance is not None else (lambda scale: float("inf"))
    _judged(record, AGAIN, run.again, limit)
    if run.continued is not None:
        _judged(record, run.continued.config, run.continued, limit)
    elif cache != "dynamic":
        record.not_made.append(f"not continued: a {cache} cell makes its call again (the continuation runs on dynamic cells)")
    else:
        record.not_made.append(f"not continued: {NOT_CONTINUED.get(model_type, f'no continuation built for {model_type}')}")
    return record


def _judged(record: CallsRecord, what: str, second: GenerateRun | None, limit: Callable[[float], float]) -> None:
    """``second`` (a call against the first cached one) as ``record``'s comparison ``what``."""
    if second is None:
        record.not_made.append(f"{what}: not made, the first calls raised (codebook_generate)")
    elif second.error is not None:
        record.error = f"{record.error + '; ' if record.error else ''}{what}: {second.error}"[:500]
    elif not second.equal:
        record.problems.append(f"{what}: {second.output}: {second.detail}")
    else:
        delta = second.score_delta if second.score_delta is not None else float("inf")
        words = f"{what}: {second.output}, max |Δscore| {delta:.3g}"
        if delta > limit(second.score_scale):
            record.problems.append(f"{words} > limit {limit(second.score_scale):.3g}: its scores leave the first call's")
        else:
            record.checked.append(f"{words} ≤ {limit(second.score_scale):.3g}")


def compare_generated(described: str, cached_run: Any, uncached_run: Any) -> GenerateRun:
    """The two runs' codes (``sequences``, or ``audio_sequences`` where ``generate()`` returns the codes beside the
    text ids: Higgs Audio), or a waveform, and their per-step ``scores``, compared."""
    cached, uncached = _codes(cached_run), _codes(uncached_run)
    kind = "codes" if not cached.is_floating_point() else "waveform (the codes decoded by the audio codec)"
    return compared(described, f"{kind} {list(cached.shape)}", cached, uncached,
                    list(zip(cached_run.scores or (), uncached_run.scores or (), strict=False)))


def compared(described: str, shape: str, cached: torch.Tensor, uncached: torch.Tensor,
             scores: list[tuple[torch.Tensor, torch.Tensor]]) -> GenerateRun:
    """The two runs' outputs and per-step scores (cached, uncached) compared: equal outputs, the max |Δscore|."""
    pairs = [(a.float(), b.float()) for a, b in scores]
    comparable = bool(pairs) and all(a.shape == b.shape for a, b in pairs)
    finite = [torch.nan_to_num(b, nan=0.0, posinf=0.0, neginf=0.0) for _, b in pairs]
    delta = max(float(score_rows_delta(a, b).max()) for a, b in pairs) if comparable else None
    scale = max(float(b.abs().max()) for b in finite) if comparable else 0.0
    if cached.shape != uncached.shape:
        return GenerateRun(described, shape, False, f"with the cache {list(cached.shape)}, without {list(uncached.shape)}", delta, scale)
    differ = (cached != uncached).reshape(cached.shape[0], -1)
    if not differ.any():
        return GenerateRun(described, shape, True, "identical", delta, scale)
    row = int(differ.any(-1).nonzero()[0])
    index = int(differ[row].nonzero()[0])
    return GenerateRun(described, shape, False, f"row {row} first differs at flat index {index} of {differ.shape[1]}", delta, scale)


def score_rows_delta(scores: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per row, max |Δ| between two steps' processed scores ``[rows, vocab]``: scores a logits processor masked to -inf
    in both agree; a NaN or a one-sided inf counts as infinitely apart."""
    scores, reference = scores.float(), reference.float()
    return torch.where(scores == reference, 0.0, torch.nan_to_num((scores - reference).abs(), nan=float("inf"))).amax(-1)


def _codes(output: Any) -> torch.Tensor:
    """What ``generate()`` returned: the codes beside the text ids where it returns both, else its sequences."""
    codes = getattr(output, "audio_sequences", None)
    return codes if isinstance(codes, torch.Tensor) else output.sequences


@dataclass
class CodebookRun:
    """The decode run, its code layout, how the inputs were made and what ``generate()`` did."""

    run: FamilyRun
    layout: Layout
    recipe: str
    generate: GenerateRun
    encoder: tuple[int, int] | None = None
    """(length, calls during the decode and its reference) of the text encoder whose output every decoder call reads
    through cross-attention (MusicGen, Dia); ``None`` where the conditioning is prepended to the codes (MusicGen Melody)."""
    text: torch.Tensor | None = None
    """The text conditioning ``[B, T]`` the decode and ``generate()`` were given."""


def conditioning_config(config: Any) -> Any:
    """The config of the text that conditions the codes: MusicGen's text encoder, Dia's encoder, else the model's own."""
    return getattr(config, "text_encoder", None) or getattr(config, "encoder_config", None) or config


def _prompt(codes: Layout, plan: ProbePlan, device: torch.device) -> torch.Tensor:
    """Random codes in every codebook row, the start token where each codebook is still delayed (frame 0 for all)."""
    rows = text_ids(plan.batch_size * codes.codebooks, plan.prompt_length, plan.seed, codes.vocab, {codes.start})
    return codes.delayed(rows, 0).to(device)


def probe_codebook(model: Model, plan: ProbePlan) -> CodebookRun:
    """Prefill (conditioning + code prompt), decode ``plan.decode_steps`` frames, compare with one uncached pass."""
    codes = layout(model)
    device = next(p.device for p in model.parameters())
    config = model.config
    text_config = conditioning_config(config)
    text = text_ids(plan.batch_size, TEXT_TOKENS, plan.seed + 2, int(text_config.vocab_size), special_token_ids(text_config)).to(device)
    prompt = _prompt(codes, plan, device)
    encoder = None
    if hasattr(model, "audio_enc_to_dec_proj"):  # MusicGen Melody
        driver, prefix = _prefix_driver(model, codes, text, prompt)
        run = drive(model, replace(plan, prompt_length=prefix + plan.prompt_length), driver)
        where = f"prepended conditioning of {prefix} positions"
    else:
        # MusicGen and Dia, as the encoder-decoder sweep drives a model: the text encoder once (counted), every decoder
        # call reads its output through the cross-attention half of the cache.
        run, length, calls = drive_encoder_decoder(model, plan, {"input_ids": text}, prompt, set(), codes.delayed, codes.to_model,
                                                  codes.codebooks)
        encoder = (length, calls)
        where = f"cross-attention over {length} encoder positions"
    recipe = (f"text input_ids [B, {TEXT_TOKENS}] ({where}); codes [B x {codes.codebooks}, {plan.prompt_length}]"
              f"{' as [B, S, K]' if codes.channels_last else ''}, start token {codes.start} in frame 0, delays "
              f"{list(codes.delays)} ({codes.source})")
    start = time.perf_counter()
    generated = run_generate(model, text, plan.decode_steps, cache=plan.cache, again=plan.calls)
    run.record.timings["generate_s"] = time.perf_counter() - start
    return CodebookRun(run, codes, recipe, generated, encoder, text)


def _prefix_driver(model: Model, codes: Layout, text: torch.Tensor, prompt: torch.Tensor) -> tuple[Driver, int]:
    """MusicGen Melody: the forward prepends the text and chroma conditioning to the codes; decode steps run the
    decoder alone on the cache (``prepare_inputs_for_generation`` drops the conditioning once it is cached).
    Returns (driver, conditioning positions prepended to the codes)."""
    keyword, outer_keyword = cache_keyword(model.decoder), cache_keyword(model)

    def outer(ids: torch.Tensor, use_cache: bool, cache: Any = None) -> Any:
        return model(input_ids=text, decoder_input_ids=ids, use_cache=use_cache,
                     **({outer_keyword: cache, **_positions(model, cache, 0, prefix + ids.shape[1])} if cache is not None else {}))

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        return fed_back(outer(ids, True, cache), cache)

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        seen = seq_length(cache) or 0
        return fed_back(model.decoder(input_ids=ids, use_cache=True, **{keyword: cache},
                                      **_positions(model.decoder, cache, seen, seen + ids.shape[1])), cache)

    prefix = int(outer(prompt[:, :1], False).logits.shape[1]) - 1
    # a static cell's cache holds the prepended conditioning too (generate() sizes it by max_length alone: the cell's
    # own cache is sized to what it decodes)
    forwards = Forwards(model=model, prompt=prompt, start=start, more=more, reference=lambda ids, keep: outer(ids, False),
                        make_cache=lambda kind, length: new_cache(model.decoder, kind, length + prefix), default_cache=lambda: None)
    return Driver(forwards, constrain=codes.delayed, offset=prefix), prefix


def _positions(module: Model, cache: Any, start: int, end: int) -> dict[str, torch.Tensor]:
    """``cache_position`` for a static cache, where the forward takes one (5.0-5.x releases whose MusicGen Melody hands
    it to the cache's ``update`` unchanged, as generate() fed it): the slots ``start..end`` of the whole sequence, the
    prepended conditioning included; nothing for a dynamic cache (the model numbers those itself)."""
    from transformers import StaticCache

    if not isinstance(cache, StaticCache) or "cache_position" not in inspect.signature(module.forward).parameters:
        return {}
    return {"cache_position": torch.arange(start, end, device=next(module.parameters()).device)}

"""Bark (text-to-audio): two causal stages with a cache each, driven as ``BarkModel.generate`` runs them.

``BarkModel`` has no forward; ``generate()`` (modeling_bark.py:1359-1496 in 5.24) runs three stages on generation
configs built from ``model.generation_config``'s dicts (:1410-1412):

- the semantic model (``BarkSemanticModel.generate``, :524-633): the text ids plus ``text_encoding_offset``, the positions
  the processor padded (attention mask 0) as ``text_pad_token`` (:561-564), embedded and summed with the voice preset's
  semantic history padded to ``max_input_semantic_length`` (:566-582), then the infer token (:584-595): the first forward
  takes these ``inputs_embeds`` (placeholder ``input_ids`` of ones, :613-620), every later step one semantic id; its
  logits processors suppress every id but the semantic ones and eos (:597-608);
- the coarse model (``BarkCoarseModel.generate``, :714-857): one stream interleaving 2 codebooks (code c of codebook k is
  id ``semantic_vocab_size + k * codebook_size + c``). Each sliding window is a fresh ``generate()``, so a fresh cache
  (:801-846), on ``[semantic tokens of the window, padded to max_coarse_input_length | coarse_infer_token | the last
  max_coarse_history coarse ids]`` (:802-820), the histories from the voice preset (``preprocess_histories``, :640-712);
  ``AlternatingCodebooksLogitsProcessor`` keeps each step to its codebook's ids (:822-834);
- the fine model: non-causal, no cache (only ``generate()`` runs it), then the Encodec codec.

The cell: its main record is the semantic stage (the prompt's embeddings, then 8 semantic ids through the cache, against
ONE uncached pass over the prompt's embeddings and every id's); its codebook heads are the coarse stage's first window,
on the semantic ids that decode chose (8 coarse ids through a fresh cache, against ONE uncached pass over the window),
rows ``b * 2 + k`` each step's logits over codebook k's ids, its own record checked in the coarse config's geometry;
``codebook_generate`` runs ``BarkModel.generate`` with and without the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from kvconform.build.geometry import CacheGeometry
from kvconform.build.models import Model
from kvconform.compat import cache_keyword, embeds_keyword, generation_positions
from kvconform.families.codebook import GenerateRun, compared, generated_twice
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.geometry import self_attention_geometry
from kvconform.families.inputs import text_ids
from kvconform.probe.cache_io import new_cache, seq_length
from kvconform.probe.decode import ProbePlan
from kvconform.probe.forwards import Forwards, fed_back
from kvconform.probe.variants import mask_as_generate_feeds

#: Text tokens of the longest prompt row; row b has ``TEXT_TOKENS - b``, padded as BarkProcessor pads (padding="max_length").
TEXT_TOKENS = 5
#: The synthetic voice preset's lengths (a published preset, e.g. v2/en_speaker_6, holds a few hundred of each):
#: semantic ids, and coarse frames (2 codebooks each, the fine prompt 8) that ``preprocess_histories`` trims to its ratio.
HISTORY_SEMANTIC, HISTORY_FRAMES = 10, 15


def is_bark(model: Model) -> bool:
    """Whether ``model`` is Bark's three-stage model (semantic, coarse and fine sub-models)."""
    return all(hasattr(model, name) for name in ("semantic", "coarse_acoustics", "fine_acoustics"))


def stage_configs(model: Model) -> list[Any]:
    """The configs of Bark's causal stages, each with a cache of its own (the semantic and coarse models')."""
    return [model.semantic.config, model.coarse_acoustics.config]


@dataclass(frozen=True)
class StageConfigs:
    """The generation configs ``BarkModel.generate`` builds from ``model.generation_config`` (modeling_bark.py:1410-1412)."""

    semantic: Any
    coarse: Any
    codebook_size: int

    @classmethod
    def of(cls, model: Model) -> StageConfigs:
        from transformers.models.bark.generation_configuration_bark import (
            BarkCoarseGenerationConfig,
            BarkSemanticGenerationConfig,
        )

        config = model.generation_config
        return cls(BarkSemanticGenerationConfig(**_as_dict(config.semantic_config)),
                   BarkCoarseGenerationConfig(**_as_dict(config.coarse_acoustics_config)), int(config.codebook_size))

    @property
    def ratio(self) -> float:
        """Coarse ids per semantic id (modeling_bark.py:766-770)."""
        return float(self.coarse.coarse_rate_hz / self.semantic.semantic_rate_hz * self.coarse.n_coarse_codebooks)


def _as_dict(config: Any) -> dict[str, Any]:
    return config if isinstance(config, dict) else config.to_dict()


@dataclass(frozen=True)
class BarkInputs:
    """The text prompt as BarkProcessor gives it, and a voice preset (``history_prompt``)."""

    text: torch.Tensor
    attention_mask: torch.Tensor
    history: dict[str, torch.Tensor]


def bark_inputs(stages: StageConfigs, batch: int, seed: int, device: torch.device) -> BarkInputs:
    """Text ids right-padded to ``max_input_semantic_length`` with their mask (BarkProcessor: padding="max_length",
    processing_bark.py:337-346), and a seeded voice preset of the shapes BarkProcessor validates."""
    semantic = stages.semantic
    length = int(semantic.max_input_semantic_length)
    text_vocab = int(semantic.text_pad_token - semantic.text_encoding_offset)
    text = text_ids(batch, length, seed, text_vocab, set())
    mask = (torch.arange(length)[None, :] < torch.tensor([max(1, TEXT_TOKENS - b) for b in range(batch)])[:, None]).long()
    generator = torch.Generator().manual_seed(seed + 1)
    codes = stages.codebook_size
    history = {"semantic_prompt": torch.randint(int(semantic.semantic_vocab_size), (HISTORY_SEMANTIC,), generator=generator),
               "coarse_prompt": torch.randint(codes, (int(stages.coarse.n_coarse_codebooks), HISTORY_FRAMES), generator=generator),
               "fine_prompt": torch.randint(codes, (8, HISTORY_FRAMES), generator=generator)}
    return BarkInputs(text.masked_fill(mask == 0, 0).to(device), mask.to(device), {k: v.to(device) for k, v in history.items()})


def semantic_prompt(model: Model, stages: StageConfigs, inputs: BarkInputs) -> torch.Tensor:
    """The semantic stage's first ``inputs_embeds`` [B, L + 1, H], as ``BarkSemanticModel.generate`` builds them
    (modeling_bark.py:561-595)."""
    config, embed = stages.semantic, model.semantic.input_embeds_layer
    length, batch = int(config.max_input_semantic_length), inputs.text.shape[0]
    ids = (inputs.text + config.text_encoding_offset).masked_fill(inputs.attention_mask == 0, config.text_pad_token)
    history = inputs.history["semantic_prompt"][-length:]
    history = torch.nn.functional.pad(history, (0, length - len(history)), value=config.semantic_pad_token)
    history = history[None].expand(batch, -1)
    infer = torch.full((batch, 1), config.semantic_infer_token, device=ids.device)
    return torch.cat([embed(ids[:, :length]) + embed(history), embed(infer)], dim=1)


def coarse_prompt(model: Model, stages: StageConfigs, inputs: BarkInputs, semantic: torch.Tensor) -> torch.Tensor:
    """The coarse stage's first window [B, P] on the semantic ids ``semantic`` [B, N], as ``BarkCoarseModel.generate``
    builds it (modeling_bark.py:761-820): the voice preset's histories, the window's semantic ids padded to
    ``max_coarse_input_length``, the infer token, the coarse history."""
    sem, coarse = stages.semantic, stages.coarse
    batch = semantic.shape[0]
    semantic = semantic.masked_fill(semantic == sem.semantic_pad_token, coarse.coarse_semantic_pad_token)
    max_semantic_history = int(np.floor(coarse.max_coarse_history / stages.ratio))
    x_semantic, x_coarse = model.coarse_acoustics.preprocess_histories(
        max_coarse_history=coarse.max_coarse_history, semantic_to_coarse_ratio=stages.ratio, batch_size=batch,
        semantic_generation_config=sem, codebook_size=stages.codebook_size, history_prompt=inputs.history)
    semantic = torch.hstack([x_semantic.long(), semantic.long()])
    window = semantic[:, max(0, x_semantic.shape[1] - max_semantic_history):][:, :coarse.max_coarse_input_length]
    window = torch.nn.functional.pad(window, (0, coarse.max_coarse_input_length - window.shape[1]), value=coarse.coarse_semantic_pad_token)
    infer = torch.full((batch, 1), coarse.coarse_infer_token, device=window.device)
    return torch.hstack([window, infer, x_coarse[:, -coarse.max_coarse_history:].long()])


def _stage_forwards(stage: Any, prompt: torch.Tensor, embeds: Callable[[torch.Tensor, int], torch.Tensor] | None) -> Forwards:
    """A Bark causal stage's forwards; ``embeds(ids, start)`` (the semantic stage) turns ids from position ``start`` on
    into the ``inputs_embeds`` generate()'s first forward takes, the prompt's own embeddings at its positions (per row:
    a prefill of the rows in another order needs them reordered too). A decode step after the prompt feeds its id, as
    generate() does."""
    keyword, embeds_name = cache_keyword(stage), embeds_keyword(stage.forward)

    def inputs(ids: torch.Tensor, start: int = 0) -> dict[str, torch.Tensor]:
        return {embeds_name: embeds(ids, start)} if embeds is not None else {"input_ids": ids}

    def fed(ids: torch.Tensor, cache: Any, seen: int) -> dict[str, Any]:
        """What generate() feeds besides the ids: the positions (``position_ids``, and ``cache_position`` where the
        forward takes it: 5.0-5.3, whose StaticCache writes at it), and for a static cache the 4-D causal mask
        (Bark's eager attention masks by its key length, modeling_bark.py:127-134, which a preallocated cache makes
        every slot's)."""
        positions = {"position_ids": torch.arange(seen, seen + ids.shape[1], device=ids.device).expand(ids.shape[0], -1),
                     **{name: value.to(ids.device) for name, value in generation_positions(stage, seen, ids.shape[1]).items()}}
        attention = torch.ones(ids.shape[0], seen + ids.shape[1], dtype=torch.long, device=ids.device)
        built = mask_as_generate_feeds(stage, cache, ids, attention, positions)
        return {**positions, **({"attention_mask": built} if built is not attention else {})}

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        given = {**inputs(ids), **fed(ids, cache, 0)}
        return fed_back(stage(**given, use_cache=True, **({keyword: cache} if cache is not None else {})), cache)

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        seen = seq_length(cache) or 0
        given = {**(inputs(ids, seen) if seen < prompt.shape[1] else {"input_ids": ids}), **fed(ids, cache, seen)}
        return fed_back(stage(**given, use_cache=True, **{keyword: cache}), cache)

    return Forwards(model=stage, prompt=prompt, start=start, more=more, reference=lambda ids, keep: stage(**inputs(ids), use_cache=False),
                    make_cache=lambda kind, length: new_cache(stage, kind, length), default_cache=lambda: None,
                    row_inputs=embeds is not None)


def _semantic_driver(model: Model, stages: StageConfigs, prompt_embeds: torch.Tensor) -> Driver:
    from transformers.generation.logits_process import SuppressTokensLogitsProcessor

    config, length = stages.semantic, prompt_embeds.shape[1]
    embed = model.semantic.input_embeds_layer

    def embeds(ids: torch.Tensor, start: int) -> torch.Tensor:
        end = start + ids.shape[1]
        return torch.cat([prompt_embeds[:, start:end], embed(ids[:, max(0, length - start):])], dim=1)

    vocab = int(model.semantic.config.output_vocab_size)
    suppressed = [*range(config.semantic_vocab_size, config.semantic_pad_token), *range(config.semantic_pad_token + 1, vocab)]
    suppress = SuppressTokensLogitsProcessor(suppressed, device=prompt_embeds.device)
    # generate() passes ones as the ids of the embedded prompt (modeling_bark.py:613-620).
    placeholder = torch.ones(prompt_embeds.shape[:2], dtype=torch.long, device=prompt_embeds.device)
    return Driver(_stage_forwards(model.semantic, placeholder, embeds), processor=suppress)


def _coarse_driver(model: Model, stages: StageConfigs, prompt: torch.Tensor) -> Driver:
    from transformers.generation.logits_process import AlternatingCodebooksLogitsProcessor

    first, size, books = int(stages.semantic.semantic_vocab_size), stages.codebook_size, int(stages.coarse.n_coarse_codebooks)
    alternate = AlternatingCodebooksLogitsProcessor(prompt.shape[1], first, size)

    def heads(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, first:first + books * size].reshape(-1, size)  # row b * K + k: codebook k's ids

    return Driver(_stage_forwards(model.coarse_acoustics, prompt, None), processor=alternate, head_rows=heads)


@dataclass
class BarkRun:
    """The semantic stage's run (the main record), the coarse stage's, and ``BarkModel.generate`` with and without the cache."""

    semantic: FamilyRun
    coarse: FamilyRun
    coarse_geometry: CacheGeometry
    coarse_explanation: str
    codebooks: int
    recipe: str
    generate: GenerateRun


def probe_bark(model: Model, plan: ProbePlan) -> BarkRun:
    """Decode ``plan.decode_steps`` semantic ids, then the first coarse window on them, each against one uncached pass."""
    device = next(p.device for p in model.parameters())
    stages = StageConfigs.of(model)
    inputs = bark_inputs(stages, plan.batch_size, plan.seed + 2, device)
    with torch.inference_mode():
        embeds = semantic_prompt(model, stages, inputs)
    semantic = drive(model, replace(plan, prompt_length=embeds.shape[1]), _semantic_driver(model, stages, embeds))
    with torch.inference_mode():
        prompt = coarse_prompt(model, stages, inputs, semantic.full[:, embeds.shape[1]:])
    coarse = drive(model, replace(plan, prompt_length=prompt.shape[1]), _coarse_driver(model, stages, prompt))
    geometry, explanation = self_attention_geometry(model.coarse_acoustics.config)
    books = int(stages.coarse.n_coarse_codebooks)
    recipe = (f"semantic stage: text input_ids [B, {inputs.text.shape[1]}] (row b {TEXT_TOKENS} - b tokens, right-padded as "
              f"BarkProcessor pads) offset by text_encoding_offset, summed with a voice preset's semantic history, then the infer "
              f"token: inputs_embeds [B, {embeds.shape[1]}] (modeling_bark.py:561-620); coarse stage: its first window "
              f"[B, {prompt.shape[1]}] on those semantic ids (window, infer token, coarse history; :761-820), {books} codebooks "
              f"interleaved in one stream, each step's logits over codebook k's {stages.codebook_size} ids as head k")
    start = time.perf_counter()
    generated = run_bark_generate(model, inputs, plan.decode_steps, plan.calls, plan.cache)
    semantic.record.timings["generate_s"] = time.perf_counter() - start
    return BarkRun(semantic, coarse, geometry, explanation, books, recipe, generated)


class _Scores:
    """A stopping criterion that never stops and keeps each step's processed scores and the sequences (the user API's
    only view of a Bark stage's scores: its generate() returns the sequences alone, modeling_bark.py:627-631, :838-841)."""

    def __init__(self) -> None:
        self.scores: list[torch.Tensor] = []
        self.sequences: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        self.scores.append(scores[-1].clone())
        self.sequences.append(input_ids.clone())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def run_bark_generate(model: Model, inputs: BarkInputs, new_tokens: int, again: bool = True, cache: str = "dynamic") -> GenerateRun:
    """Greedy ``BarkModel.generate`` with ``use_cache`` True and False on the same text and voice preset: the waveform,
    each stage's scores (every coarse window's) compared; a static cell's cached call asks every stage for
    ``cache_implementation="static"``."""
    from transformers import StoppingCriteriaList

    static = {"cache_implementation": "static"} if cache == "static" else {}
    settings = {"do_sample": False, "semantic_max_new_tokens": new_tokens, **static}
    # generate() keeps a cache for the semantic stage either way: it starts from inputs_embeds, and a decoder-only model
    # generating from embeddings must cache (generation/utils.py:2873-2876 in 5.24); the coarse stage runs without.
    described = (", ".join(f"{k}={v}" for k, v in settings.items()) + ", history_prompt=<voice preset>; "
                 "use_cache=False reaches the coarse stage, generate() keeps the semantic stage's cache (inputs_embeds)")
    def call(use_cache: bool) -> tuple[torch.Tensor, _Scores, _Scores]:
        semantic, coarse = _Scores(), _Scores()
        given = settings if use_cache else {k: v for k, v in settings.items() if k not in static}
        with torch.inference_mode():
            audio = model.generate(input_ids=inputs.text, attention_mask=inputs.attention_mask, history_prompt=inputs.history,
                                   use_cache=use_cache, return_dict_in_generate=True, output_scores=True,
                                   semantic_stopping_criteria=StoppingCriteriaList([semantic]),
                                   coarse_stopping_criteria=StoppingCriteriaList([coarse]), **given)
        return audio, semantic, coarse

    def compare(first: tuple[torch.Tensor, _Scores, _Scores], second: tuple[torch.Tensor, _Scores, _Scores]) -> GenerateRun:
        (audio, semantic, coarse), (plain, semantic_plain, coarse_plain) = first, second
        codes, windows = _codes(semantic, coarse)
        scores = list(zip(semantic.scores + coarse.scores, semantic_plain.scores + coarse_plain.scores, strict=False))
        shape = f"codes {list(codes.shape)} ({len(semantic.scores)} semantic ids, {len(coarse.scores)} coarse ids in {windows} windows)"
        run = compared(described, shape, codes, _codes(semantic_plain, coarse_plain)[0], scores)
        if run.equal and not torch.equal(audio, plain):
            return replace(run, equal=False, detail=f"the same codes, but the waveforms differ (max |Δ| {float((audio - plain).abs().max()):.3g})")
        return replace(run, output=f"{shape} and waveform {list(audio.shape)}")

    return generated_twice(described, call, compare, again)


def _codes(semantic: _Scores, coarse: _Scores) -> tuple[torch.Tensor, int]:
    """Each row's generated ids, semantic then every coarse window's, and the number of coarse windows (each a fresh
    generate(): its sequences restart from the window's prompt)."""
    parts = [semantic.sequences[-1][:, semantic.sequences[0].shape[1] - 1:]] if semantic.sequences else []
    ends = [i for i, seq in enumerate(coarse.sequences) if i + 1 == len(coarse.sequences) or coarse.sequences[i + 1].shape[1] != seq.shape[1] + 1]
    first = 0
    for end in ends:
        parts.append(coarse.sequences[end][:, coarse.sequences[first].shape[1] - 1:])
        first = end + 1
    return torch.cat(parts, dim=1) if parts else torch.zeros(0), len(ends)

"""Codebook frames inside a text stream (Higgs Audio v2): one Llama-style sequence of text ids and audio frames.

Each audio position of the sequence is one frame of K codes, embedded as the sum of its codebooks' embeddings
(``HiggsAudioV2Embeddings``: codebook ``k``'s code looked up at offset ``k * codebook_size``, modeling_higgs_audio_v2.py:294-306)
and scattered where ``input_ids`` hold ``audio_token_id`` or ``audio_delay_token_id`` (modeling_higgs_audio_v2.py:493-511);
every position's ``audio_lm_head`` logits are ``[K * codebook_size]``, one ``codebook_size`` slice per codebook head. The
cell drives it as its processor and ``generate()`` do:

- the prompt, as ``HiggsAudioV2Processor`` writes a voice-cloning conversation: text, ``<|audio_out_bos|>``, a reference
  audio of ``prompt_length`` codes framed by the stream bos/eos and delayed by ``build_delay_pattern`` (codebook ``k``
  shifted ``k`` frames: ``prompt_length + K + 1`` frames, placeholders ``audio_token_id`` then ``K - 1``
  ``audio_delay_token_id``, processing_higgs_audio_v2.py:117-125, 176-183, 291-307), text again, and the
  ``<|audio_out_bos|>`` that opens the generated audio (the chat template's generation prompt). Each text run is K ids,
  so the delay-pattern processor's window of the last K ids (generation_higgs_audio_v2.py:115) holds the last bos and
  none of the reference's delay ids, as a conversation's header tokens keep them apart;
- the prefill, ``input_ids`` with ``audio_input_ids`` ``[B, F, K]`` and its mask; every decode step one frame
  ``audio_input_ids [B, 1, K]`` alone, ``input_ids`` dropped (``prepare_inputs_for_generation``'s decoding mode,
  modeling_higgs_audio_v2.py:619-623), so every layer takes its audio norms and MLP;
- the codes ``HiggsAudioV2DelayPatternLogitsProcessor`` forces: generated frame ``j`` holds the stream bos in every
  codebook ``k >= j`` (its delays ``1..K`` counted from the ``<|audio_out_bos|>``, the prompt's last id:
  generation_higgs_audio_v2.py:113-153, 225);
  the stream eos, which starts its eos tail and ends the stream, is never picked;
- the reference: ONE uncached pass over ``input_ids`` (generated frames as ``audio_token_id``, as ``generate()`` writes
  them, generation_higgs_audio_v2.py:409) and every frame.

Rows are ``b * K + k`` as for the other codebook decoders: the ids of row ``b * K + k`` hold batch row ``b``'s text ids
at text positions and codebook ``k``'s codes at audio positions; its logits are codebook head ``k``'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families.codebook import GenerateRun, Layout, compared, generate_settings, run_generate
from kvconform.families.codebook_ragged import TextBatch, run_codebook_ragged
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.probe.cache_io import new_cache, returned_cache, seq_length
from kvconform.probe.decode import ProbePlan
from kvconform.probe.forwards import Forwards, fed_back


def is_inline_codebook_model(model: Model) -> bool:
    """Whether ``model`` interleaves codebook frames with text ids in one sequence (Higgs Audio v2)."""
    config = model.config
    return all(hasattr(config, name) for name in ("audio_delay_token_id", "audio_stream_bos_id", "num_codebooks"))


def inline_layout(model: Model) -> Layout:
    """The generated frames' layout: codebook ``k`` holds the stream bos in the first ``k + 1`` frames."""
    config = model.config
    codebooks = int(config.num_codebooks)
    return Layout(codebooks, tuple(range(codebooks)), int(config.audio_stream_bos_id), int(config.codebook_size), True,
                  "HiggsAudioV2DelayPatternLogitsProcessor: after <|audio_out_bos|>, frame j holds the stream bos in "
                  "codebooks k >= j (generation_higgs_audio_v2.py:113-153)")


@dataclass
class InlineRun:
    """The decode run, its code layout, how the inputs were made and what ``generate()`` did."""

    run: FamilyRun
    layout: Layout
    recipe: str
    generate: GenerateRun


class _Stream:
    """The prompt as the processor writes it, and the model inputs of any rows ``[B * K, S]`` from the sequence's start."""

    def __init__(self, model: Model, codes: Layout, plan: ProbePlan, device: torch.device) -> None:
        config = model.config
        self.codebooks, batch = codes.codebooks, plan.batch_size
        forbidden = special_token_ids(config)
        before = text_ids(batch, codes.codebooks, plan.seed + 2, int(config.vocab_size), forbidden)
        after = text_ids(batch, codes.codebooks, plan.seed + 3, int(config.vocab_size), forbidden)
        reference = _delayed_reference(codes, text_ids(batch * codes.codebooks, plan.prompt_length, plan.seed,
                                                       int(config.audio_stream_bos_id), set()), int(config.audio_stream_eos_id))
        frames = reference.shape[1]
        bos = torch.full((batch, 1), int(config.audio_bos_token_id))
        placeholders = torch.cat([torch.full((batch, frames - codes.codebooks + 1), int(config.audio_token_id)),
                                  torch.full((batch, codes.codebooks - 1), int(config.audio_delay_token_id))], dim=1)
        self.placeholders = torch.cat([before, bos, placeholders, after, bos], dim=1).to(device)
        """``input_ids [B, P]`` as the processor writes them."""
        self.audio = torch.zeros(self.placeholders.shape[1], dtype=torch.bool, device=device)
        start = before.shape[1] + 1
        self.audio[start:start + frames] = True
        text = self.placeholders.repeat_interleave(codes.codebooks, dim=0)
        text[:, start:start + frames] = reference.to(device)
        self.prompt = text
        """Rows ``[B * K, P]``: the text ids, codebook ``k``'s codes at the reference frames."""
        self.audio_token = int(config.audio_token_id)
        self.frames = frames

    def inputs(self, ids: torch.Tensor, start: int = 0) -> dict[str, torch.Tensor]:
        """``input_ids``, ``audio_input_ids [B, F, K]`` and their mask for rows ``ids`` from position ``start`` on."""
        length, prompt, end = ids.shape[1], self.placeholders.shape[1], start + ids.shape[1]
        audio = torch.cat([self.audio, self.audio.new_ones(max(0, end - prompt))])[start:end]
        placeholders = torch.cat([self.placeholders, self.placeholders.new_full((ids.shape[0] // self.codebooks, max(0, end - prompt)),
                                                                                self.audio_token)], dim=1)[:, start:end]
        rows = ids.reshape(-1, self.codebooks, length)
        frames = rows[:, :, audio].transpose(1, 2).contiguous()
        mask = torch.ones(frames.shape[:2], dtype=torch.bool, device=ids.device)
        return {"input_ids": torch.where(audio, placeholders, rows[:, 0]), "audio_input_ids": frames, "audio_input_ids_mask": mask}


def _delayed_reference(codes: Layout, rows: torch.Tensor, eos: int) -> torch.Tensor:
    """Rows ``[B * K, n]`` of codes framed by the stream bos and eos and delayed as ``HiggsAudioV2Processor.build_delay_pattern``
    does: codebook ``k`` holds ``k + 1`` bos, its codes, then ``K - k`` eos (``n + K + 1`` frames)."""
    framed = []
    for row, code in enumerate(rows):
        k = row % codes.codebooks
        framed.append(torch.cat([code.new_full((k + 1,), codes.start), code, code.new_full((codes.codebooks - k,), eos)]))
    return torch.stack(framed)


def _as_rows(output: Any, codebooks: int) -> Any:
    """The output with its logits ``[B, S, K * C]`` as codebook rows ``[B * K, S, C]``."""
    batch, length, width = output.logits.shape
    rows = output.logits.reshape(batch, length, codebooks, width // codebooks).transpose(1, 2)
    output["logits"] = rows.reshape(batch * codebooks, length, width // codebooks)
    return output


def _driver(model: Model, codes: Layout, stream: _Stream) -> Driver:
    keyword = cache_keyword(model)
    prompt_length = stream.prompt.shape[1]

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        output = model(**stream.inputs(ids), use_cache=True, **({keyword: cache} if cache is not None else {}))
        return fed_back(_as_rows(output, codes.codebooks), cache)

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        seen = seq_length(cache) or 0
        if ids.shape[1] == 1 and seen >= prompt_length:  # a decode step as generate() feeds it: one frame, audio only
            output = model(audio_input_ids=ids.reshape(-1, codes.codebooks, 1).transpose(1, 2), use_cache=True, **{keyword: cache})
        else:  # several positions at once (or one of the prompt's): the processor's inputs at those positions
            output = model(**stream.inputs(ids, seen), use_cache=True, **{keyword: cache})
        return fed_back(_as_rows(output, codes.codebooks), cache)

    def reference(ids: torch.Tensor, keep: int | None) -> Any:
        return _as_rows(model(**stream.inputs(ids), use_cache=False), codes.codebooks)

    forwards = Forwards(model=model, prompt=stream.prompt, start=start, more=more, reference=reference,
                        make_cache=lambda kind, length: new_cache(model, kind, length), default_cache=lambda: None,
                        code_rows=codes.codebooks)
    return Driver(forwards, forbidden={int(model.config.audio_stream_eos_id)},
                  constrain=lambda tokens, position: codes.delayed(tokens, position - prompt_length))


#: Published generation configs resample a code repeated within a window (``ras_win_len`` 7, ``ras_win_max_num_repeat``
#: 2, convert_higgs_audio_v2_to_hf.py) by multinomial sampling even when greedy (generation_higgs_audio_v2.py:356-384):
#: two greedy runs would differ by chance, so the check turns it off (``None`` also where the config has no such field).
GREEDY = {"ras_win_len": None}


def probe_inline_codebooks(model: Model, plan: ProbePlan) -> InlineRun:
    """Prefill the voice-cloning prompt, decode ``plan.decode_steps`` frames, compare with one uncached pass."""
    codes = inline_layout(model)
    device = next(p.device for p in model.parameters())
    stream = _Stream(model, codes, plan, device)
    run = drive(model, replace(plan, prompt_length=stream.prompt.shape[1]), _driver(model, codes, stream))
    k = codes.codebooks
    recipe = (f"input_ids [B, {stream.prompt.shape[1]}]: {k} text ids, <|audio_out_bos|>, a reference audio of "
              f"{plan.prompt_length} codes as {stream.frames} frames [B, {stream.frames}, {k}] (stream bos/eos, codebook k "
              f"delayed k frames: HiggsAudioV2Processor.build_delay_pattern), {k} text ids, <|audio_out_bos|>; then one "
              f"frame [B, 1, {k}] a step, audio only, stream bos {codes.start} in codebooks k >= j of frame j ({codes.source})")
    inputs = stream.inputs(stream.prompt)
    ids = inputs.pop("input_ids")
    continued = (lambda long: continue_generate(model, ids, inputs, plan.decode_steps, long)) if plan.calls and plan.cache == "dynamic" else None
    start = time.perf_counter()
    generated = run_generate(model, ids, plan.decode_steps, inputs=inputs, settings=GREEDY, cache=plan.cache,
                             again=plan.calls, continued=continued)
    run.record.timings["generate_s"] = time.perf_counter() - start
    if plan.ragged:  # the processor left-pads a batch: rows lack text before their reference audio
        start = time.perf_counter()
        text = TextBatch(ids, codes.codebooks - 1, inputs)
        run.record.paths["ragged"] = run_codebook_ragged(model, text, generate_settings(model, plan.decode_steps, GREEDY, plan.cache))
        run.record.timings["ragged_s"] = time.perf_counter() - start
    return InlineRun(run, codes, recipe, generated)


def continue_generate(model: Model, ids: torch.Tensor, inputs: dict[str, torch.Tensor], steps: int, long: Any) -> GenerateRun:
    """``generate()`` of half the frames, continued from the cache it returned for the rest, against ``long`` (the one
    cached call of ``steps`` frames): its codes and scores. The continued call is given what transformers' own
    continuation test gives it: the returned ``sequences`` and ``audio_sequences``, the audio mask extended by the
    generated frames, and the returned cache (``prepare_inputs_for_generation`` masks the frames the cache holds,
    modeling_higgs_audio_v2.py:607-617)."""
    head = max(1, steps // 2)
    what = f"generate() of {head} frames continued for {steps - head} from the cache it returned"
    settings = {**generate_settings(model, head, GREEDY), "return_dict_in_generate": True, "output_scores": True}
    calling = f"generate() of {head} frames (to be continued)"
    try:
        with torch.inference_mode():
            short = model.generate(input_ids=ids, **inputs, **settings)
            calling = f"generate() continued for {steps - head} frames from the returned cache"
            mask = inputs["audio_input_ids_mask"]
            generated = short.audio_sequences.shape[1] - mask.shape[1]
            rest = model.generate(input_ids=short.sequences, audio_input_ids=short.audio_sequences,
                                  audio_input_ids_mask=torch.cat([mask, mask.new_ones(mask.shape[0], generated)], dim=1),
                                  **{cache_keyword(model): returned_cache(short)}, **{**settings, "max_new_tokens": steps - head})
    except Exception as exc:  # noqa: BLE001 - a call that raises fails between_calls with its error
        return GenerateRun(what, "", False, "", error=f"{calling} raised {type(exc).__name__}: {' '.join(str(exc).split())}")
    return compared(what, f"codes {list(rest.audio_sequences.shape)}", rest.audio_sequences, long.audio_sequences,
                    list(zip(rest.scores, long.scores[head:], strict=False)))

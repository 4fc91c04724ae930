"""SeamlessM4T text-to-speech: the text-to-unit (t2u) model's unit decode, fed what the model's own generate() hands it.

``SeamlessM4TForTextToSpeech.generate`` (modeling_seamless_m4t.py:2888-3052 in 5.24) runs two generating stages:

- the text model's ``generate()`` on the text prompt, its decoder started from the target language's text id
  (:2976-2982); the seq2seq sweep's cell (seamless_m4t-s2s) runs that decoder and is not repeated here;
- one uncached text-decoder pass over the chosen text sequences, over the text encoder's last hidden states with the
  prompt's attention mask (:3004-3008): its last hidden states are the t2u model's ``inputs_embeds``, with an attention
  mask of each row's non-pad count (``_compute_new_attention_mask``, :3012-3015); the t2u decoder starts from
  ``[t2u_eos_token_id, t2u language id]`` (:3018-3023) and ``t2u_model.generate()`` decodes one stream of unit ids
  (:3025) with the t2u model's own generation config, built from the ``t2u_*`` fields the t2u model copies into its
  config (:1853-1856); generate() then maps eos to pad, shifts the units by ``vocoder_offset`` (:3027-3035) and
  vocodes them (:3042).

The cell runs that ``generate()`` once and takes the t2u call as it is made (``stage_calls.stage_call``), then drives
the t2u encoder-decoder as the seq2seq sweep drives one (``encoder_decoder.drive_encoder_decoder``): its encoder once
over those ``inputs_embeds``, the attention mask with every decoder call, one greedy unit id a step through its
``EncoderDecoderCache`` (both halves snapshotted), against ONE uncached decoder pass over the final unit sequence.
``codebook_generate`` runs the outer ``generate()`` with and without the cache and compares the t2u stage's units and
scores, the text and the waveform.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.families.codebook import GenerateRun, compare_generated, generated_twice
from kvconform.families.decode import FamilyRun
from kvconform.families.encoder_decoder import drive_encoder_decoder
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.families.stage_calls import stage_call, through_stage
from kvconform.probe.decode import ProbePlan

#: The target language; its ids in the three maps of the generation config (families.yaml's ``generation_config``).
TARGET_LANGUAGE = "eng"
#: Text tokens the text stage generates after its language id: the t2u encoder reads 2 + TEXT_TOKENS positions, more
#: than the t2u decoder holds at any step of a cell (2 + 8), so the two cache halves never have the same length.
TEXT_TOKENS = 10
#: Tokens of the longest text prompt row between its source language id and eos; row b has ``PROMPT_TOKENS - b``.
PROMPT_TOKENS = 5


def is_text_to_unit_model(model: Model) -> bool:
    """Whether ``model`` speaks through SeamlessM4T's text-to-unit model fed by its text decoder."""
    return hasattr(model, "t2u_model") and hasattr(model, "text_decoder")


def text_prompt(model: Model, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt as SeamlessM4TTokenizer writes a batch of source text (processing mode ``[src_lang_code] text [eos]``,
    tokenization_seamless_m4t.py:309-321, right-padded with pad id and mask 0): row b ``PROMPT_TOKENS - b`` text ids, the
    target language's text id as the source language's."""
    config, lang = model.config, int(model.generation_config.text_decoder_lang_to_code_id[TARGET_LANGUAGE])
    lengths = [max(1, PROMPT_TOKENS - b) for b in range(batch)]
    body = text_ids(batch, PROMPT_TOKENS, seed, int(config.vocab_size), special_token_ids(config) | {lang})
    ids = torch.full((batch, PROMPT_TOKENS + 2), int(config.pad_token_id))
    for row, length in enumerate(lengths):
        ids[row, :length + 2] = torch.cat([torch.tensor([lang]), body[row, :length], torch.tensor([int(config.eos_token_id)])])
    return ids, (ids != int(config.pad_token_id)).long()


def non_units(model: Model) -> list[int]:
    """The t2u ids that are no vocoder unit: the control ids below ``vocoder_offset`` and the ids past the vocoder's
    ``unit_hifi_gan_vocab_size`` units (msk, the language ids). generate() turns eos into pad and hands every other id to
    the vocoder as ``id - vocoder_offset`` (modeling_seamless_m4t.py:3027-3035), and the vocoder's unit table has no row for
    the others (IndexError): a trained t2u model does not pick them, a random one does."""
    config = model.config
    first = int(config.vocoder_offset)
    units = range(first, first + int(config.unit_hifi_gan_vocab_size))
    return [i for i in range(int(config.t2u_vocab_size)) if i not in units]


def generate_settings(model: Model, text: torch.Tensor, mask: torch.Tensor, steps: int) -> dict[str, Any]:
    """``generate()``'s arguments: the prompt, the target language, greedy text and unit stages, their lengths, and the
    t2u stage kept to vocoder units (``speech_suppress_tokens``: a ``speech_`` keyword reaches only the t2u
    ``generate()``, modeling_seamless_m4t.py:191-227)."""
    return {"input_ids": text, "attention_mask": mask, "tgt_lang": TARGET_LANGUAGE, "do_sample": False,
            "text_max_new_tokens": TEXT_TOKENS, "speech_max_new_tokens": steps, "speech_suppress_tokens": non_units(model)}


@dataclass
class TextToUnitRun:
    """The t2u decode run, its encoder's length and calls, how its inputs were made and what ``generate()`` did."""

    run: FamilyRun
    encoder_length: int
    encoder_calls: int
    recipe: str
    generate: GenerateRun


def probe_text_to_unit(model: Model, plan: ProbePlan) -> TextToUnitRun:
    """Take the t2u call from one ``generate()``, decode ``plan.decode_steps`` unit ids through its cache against one
    uncached decoder pass; then ``generate()`` with and without the cache."""
    device = next(p.device for p in model.parameters())
    text, mask = (tensor.to(device) for tensor in text_prompt(model, plan.batch_size, plan.seed + 2))
    settings = generate_settings(model, text, mask, plan.decode_steps)
    call = stage_call(model, "t2u_model", settings)
    t2u = model.t2u_model
    prompt = call["decoder_input_ids"]
    tensors = {"inputs_embeds": call["inputs_embeds"], "attention_mask": call["attention_mask"]}
    run, encoder_length, calls = drive_encoder_decoder(t2u, replace(plan, prompt_length=prompt.shape[1]), tensors, prompt,
                                                       set(settings["speech_suppress_tokens"]))
    kept = call["attention_mask"].sum(-1).long().tolist()
    recipe = (f"text input_ids [B, {text.shape[1]}] ([src lang] text [eos], right-padded: {mask.sum(-1).tolist()} tokens) "
              f"through the text model's generate() ({TEXT_TOKENS} greedy tokens after the '{TARGET_LANGUAGE}' id), then "
              f"the t2u model as generate() calls it: inputs_embeds [B, {encoder_length}, {call['inputs_embeds'].shape[-1]}] "
              f"(the text decoder's last hidden states), attention mask of the non-pad count {kept}, decoder prompt "
              f"{prompt[0].tolist()} ([t2u eos, t2u '{TARGET_LANGUAGE}' id]), one unit id a step (modeling_seamless_m4t.py:3004-3025)")
    start = time.perf_counter()
    generated = run_text_to_unit_generate(model, settings, plan.cache, plan.calls)
    run.record.timings["generate_s"] = time.perf_counter() - start
    return TextToUnitRun(run, encoder_length, calls, recipe, generated)


def run_text_to_unit_generate(model: Model, settings: dict[str, Any], cache: str = "dynamic", again: bool = True) -> GenerateRun:
    """``generate()`` with ``use_cache`` True and False, as a user calls it (``use_cache`` reaches both stages,
    modeling_seamless_m4t.py:191-227): the t2u stage's units and scores (kept from its own ``generate()``, whose
    sequences alone the outer one reads), the text and the waveform. A static cell's cached call gives the t2u stage
    ``speech_cache_implementation="static"`` (the ``speech_`` arguments reach its generate(), :212-217)."""
    static = {"speech_cache_implementation": "static"} if cache == "static" else {}
    described = ", ".join(f"{k}={v}" for k, v in {**settings, **static}.items() if not isinstance(v, torch.Tensor | list))
    described += f", speech_suppress_tokens=<{len(settings['speech_suppress_tokens'])} non-unit ids>"
    original = model.t2u_model.generate

    def call(use_cache: bool) -> tuple[Any, Any]:
        units = {}

        def t2u_generate(**call: Any) -> Any:
            result = original(**{**call, "return_dict_in_generate": True, "output_scores": True})
            units["run"] = result
            return result.sequences

        given = {**settings, **(static if use_cache else {}), "use_cache": use_cache, "return_intermediate_token_ids": True}
        result = through_stage(model, "t2u_model", given, t2u_generate)
        return units["run"], result

    def compare(first: tuple[Any, Any], second: tuple[Any, Any]) -> GenerateRun:
        run = compare_generated(described, first[0], second[0])
        cached, uncached = first[1], second[1]
        if not torch.equal(cached.sequences, uncached.sequences):
            return replace(run, equal=False, detail=f"the text stage's ids differ; t2u units: {run.detail}")
        if run.equal and not torch.equal(cached.waveform, uncached.waveform):
            return replace(run, equal=False, detail="the same units, but the vocoder's waveforms differ")
        return replace(run, output=f"t2u units {run.output.removeprefix('codes ')}, text {list(cached.sequences.shape)} and "
                                   f"waveform {list(cached.waveform.shape)}")

    return generated_twice(described, call, compare, again)

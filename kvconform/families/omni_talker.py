"""Thinker-talker models (Qwen2.5-Omni, Qwen3-Omni-MoE): the talker's codec decode, fed what the model's own
generate() hands it. Qwen3-Omni-MoE's talker decodes a frame of codebooks a step with a code predictor of its own: its
driver is ``omni_code_predictor``'s; the talker's call, the cell and the generate comparison are this module's.

``Qwen2_5OmniForConditionalGeneration`` has no forward; its ``generate()`` (modeling_qwen2_5_omni.py:3805-4060) runs
the thinker on the prompt, builds the talker's inputs from the thinker's hidden states and token embeddings, and calls
``talker.generate()`` with them. The cell:

- runs that ``generate()`` once and takes the talker's call as it is made (:4022-4030): the codec prompt
  ``[mask x P, pad, bos]``, ``inputs_embeds`` (the thinker's prompt states plus embeddings, the speaker's text-bos
  embedding, the first reply token's), ``input_text_ids`` (its rope index) and ``thinker_reply_part`` (one thinker
  state plus embedding per later reply token, then the text eos and pad embeddings). The thinker's own text decode is
  the image-text-to-text sweep's cell (qwen2_5_omni_thinker) and is not repeated here;
- prefills the talker's cache with them, then feeds each greedy codec id (the codec bos suppressed, as generate()'s
  ``suppress_tokens``) with the reply part the previous call returned, as generate() carries it
  (``_update_model_kwargs_for_generation``, :2471-2485): the forward adds its first embedding to the codec id's and
  returns the rest (:2432-2436), so once the reply is spent its last (the text pad) repeats;
- compares every step with ONE uncached talker pass over the same final inputs: the prompt's embeddings with the
  codec pad and bos embeddings added at its last two positions (what the prefill adds, :2413-2418), then each decoded
  id's codec embedding plus its step's reply embedding, at positions 0..S-1 (a text-only prompt's rope index,
  rope_deltas 0, :2401-2420).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families.codebook import GenerateRun, compare_generated, generated_twice
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.depth_codebooks import DepthTrace
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.families.omni_code_predictor import has_code_predictor, residual_driver
from kvconform.families.omni_code_predictor import settings as code_predictor_settings
from kvconform.families.published_checkpoints import published_speaker
from kvconform.families.stage_calls import stage_call, through_stage
from kvconform.probe.cache_io import new_cache, seq_length
from kvconform.probe.decode import ProbePlan
from kvconform.probe.forwards import Forwards, fed_back

#: Text tokens the thinker generates: the talker's prompt ends with the 2nd one's state, its reply part holds the 3rd and
#: 4th's then the text eos and pad embeddings, so a cell's 8 decode steps read every reply embedding, then the pad repeated.
THINKER_TOKENS = 4


def is_thinker_talker_model(model: Model) -> bool:
    """Whether ``model`` speaks through a talker fed by a thinker (Qwen2.5-Omni, Qwen3-Omni-MoE)."""
    return hasattr(model, "thinker") and hasattr(model, "talker") and (hasattr(model, "speaker_map") or has_code_predictor(model))


def generate_settings(model: Model, text: torch.Tensor, steps: int) -> dict[str, Any]:
    """``generate()``'s arguments: the text prompt with the processor's attention mask, greedy thinker and talker, the
    talker's eos ids of its signature (8292, 8294: the 7B talker's codec pad and end ids) in the model's own config."""
    talker = model.config.talker_config
    return {"input_ids": text, "attention_mask": torch.ones_like(text), "speaker": published_speaker(model),
            "thinker_max_new_tokens": THINKER_TOKENS, "thinker_do_sample": False, "talker_max_new_tokens": steps,
            "talker_do_sample": False, "talker_eos_token_id": [int(talker.tts_codec_pad_token_id), int(talker.tts_codec_end_token_id)]}


def talker_call(model: Model, settings: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``generate()`` calls ``talker.generate`` with (tensors cloned before the talker runs)."""
    return stage_call(model, "talker", settings)


def _driver(model: Model, call: dict[str, Any]) -> Driver:
    talker = model.talker
    keyword = cache_keyword(talker)
    prompt, reply = call["input_ids"], call["thinker_reply_part"]
    codec = talker.get_input_embeddings()
    carried: dict[str, Any] = {"reply": reply, "fed": 0}

    def mask(length: int) -> torch.Tensor:
        return torch.ones(prompt.shape[0], length, dtype=torch.long, device=prompt.device)

    def forward(cache: Any, **inputs: Any) -> tuple[Any, Any]:
        return fed_back(talker(use_cache=True, **inputs, **({keyword: cache} if cache is not None else {})), cache)

    def embeds_at(ids: torch.Tensor, seen: int) -> dict[str, Any]:
        """The talker's inputs over ``ids`` from position ``seen`` on as one call: the embeddings each step adds (the
        prompt's, with the codec bos and pad its prefill adds; each decoded id's plus its reply embedding), their positions."""
        embeds = call["inputs_embeds"].clone()
        embeds[:, -1] += codec(torch.tensor([talker.codec_bos_token], device=embeds.device))[0]
        embeds[:, -2] += codec(torch.tensor([talker.codec_pad_token], device=embeds.device))[0]
        split = max(0, min(ids.shape[1], prompt.shape[1] - seen))
        decoded = ids[:, split:]
        steps = (max(0, seen - prompt.shape[1]) + torch.arange(decoded.shape[1], device=ids.device)).clamp(max=reply.shape[1] - 1)
        embeds = torch.cat([embeds[:, seen:seen + split], codec(decoded) + reply[:, steps]], dim=1)
        positions = torch.arange(seen, seen + ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
        return {"inputs_embeds": embeds, "position_ids": positions, "attention_mask": mask(seen + ids.shape[1])}

    def whole(ids: torch.Tensor) -> dict[str, Any]:
        """The talker's inputs over ``ids`` from the start as one call, positions 0..S-1."""
        return embeds_at(ids, 0)

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        if ids.shape[1] != prompt.shape[1]:  # a fresh pass over a decoded sequence (the localization)
            return forward(cache, **whole(ids))
        cache, output = forward(cache, inputs_embeds=call["inputs_embeds"].clone(), attention_mask=mask(ids.shape[1]),
                                input_text_ids=call["input_text_ids"], thinker_reply_part=reply)
        carried["reply"] = output.thinker_reply_part
        return cache, output

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        seen = seq_length(cache) or 0
        if ids.shape[1] != 1 or seen - prompt.shape[1] != carried["fed"]:  # a path: the embeddings of those positions
            return forward(cache, **embeds_at(ids, seen))
        # the decode, as generate() feeds it: the codec id; the forward adds the next reply embedding and passes the rest on
        cache, output = forward(cache, input_ids=ids, attention_mask=mask(seen + 1),
                                input_text_ids=call["input_text_ids"], thinker_reply_part=carried["reply"])
        carried["reply"], carried["fed"] = output.thinker_reply_part, carried["fed"] + 1
        return cache, output

    forwards = Forwards(model=talker, prompt=prompt, start=start, more=more,
                        reference=lambda ids, keep: talker(use_cache=False, **whole(ids)),
                        make_cache=lambda kind, length: new_cache(talker, kind, length), default_cache=lambda: None,
                        row_inputs=True)
    return Driver(forwards, forbidden={int(i) for i in call.get("suppress_tokens") or ()})


def _talker_codes(result: Any) -> Any:
    """A talker's ``generate()`` result with its codes as ``sequences``: Qwen3-Omni-MoE's every frame's K codes
    ``[B, K, frames]`` (each step's residual codes ride in its hidden states, as generate() stacks them, :4284-4288)."""
    residual = [states[-1] for states in result.hidden_states or () if isinstance(states, tuple) and isinstance(states[-1], torch.Tensor)]
    if not residual:
        return result
    return SimpleNamespace(sequences=torch.stack(residual, dim=1).transpose(1, 2), scores=result.scores)


def run_omni_generate(model: Model, settings: dict[str, Any], cache: str = "dynamic", again: bool = True) -> GenerateRun:
    """``generate()`` with ``use_cache`` True and False, as a user calls it (token2wav's noise seeded alike): the talker's
    codes and scores (kept from its own ``generate()``, which returns codes only), the thinker's text, the waveform. A
    static cell's cached call gives the talker ``talker_cache_implementation="static"`` (the ``talker_`` arguments reach
    its generate(), modeling_qwen2_5_omni.py:3878-3879)."""
    static = {"talker_cache_implementation": "static"} if cache == "static" else {}
    described = ", ".join(f"{k}={v}" for k, v in {**settings, **static}.items() if not isinstance(v, torch.Tensor))
    def call(use_cache: bool) -> tuple[Any, Any]:
        original, talker = model.talker.generate, {}

        def talker_generate(**call: Any) -> Any:
            result = original(**{**call, "return_dict_in_generate": True, "output_scores": True})
            talker["codes"] = _talker_codes(result)
            return result if call.get("return_dict_in_generate") else result.sequences

        torch.manual_seed(0)
        given = {**settings, **(static if use_cache else {}), "use_cache": use_cache}
        result = through_stage(model, "talker", given, talker_generate)
        return talker["codes"], result

    def compare(first: tuple[Any, Any], second: tuple[Any, Any]) -> GenerateRun:
        run = compare_generated(described, first[0], second[0])
        (text, wave), (text_uncached, wave_uncached) = first[1], second[1]
        if not torch.equal(text, text_uncached):
            return replace(run, equal=False, detail=f"the thinker's text differs; talker codes: {run.detail}")
        waves = [wave] if isinstance(wave, torch.Tensor) else list(wave)
        uncached = [wave_uncached] if isinstance(wave_uncached, torch.Tensor) else list(wave_uncached)
        if run.equal and not all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(waves, uncached, strict=True)):
            return replace(run, equal=False, detail="the same codes, but token2wav's waveforms differ")
        return replace(run, output=f"talker {run.output} and waveform")

    return generated_twice(described, call, compare, again)


@dataclass
class TalkerRun:
    """The talker's decode run, how its inputs were made and what ``generate()`` did."""

    run: FamilyRun
    recipe: str
    generate: GenerateRun
    codebooks: int = 1
    depth: DepthTrace | None = None
    """A code predictor's own cache, frame by frame (Qwen3-Omni-MoE: heads 1..K-1 are its)."""


def probe_omni_talker(model: Model, plan: ProbePlan) -> TalkerRun:
    """Take the talker's inputs from one ``generate()``, decode ``plan.decode_steps`` codec ids (or frames) through its
    cache, compare with one uncached talker pass; then ``generate()`` with and without the cache."""
    device = next(p.device for p in model.parameters())
    thinker = model.config.thinker_config
    text = text_ids(plan.batch_size, plan.prompt_length, plan.seed + 2, int(thinker.text_config.vocab_size),
                    special_token_ids(model.config)).to(device)
    if has_code_predictor(model):
        return _probe_code_predictor(model, plan, text)
    settings = generate_settings(model, text, plan.decode_steps)
    call = talker_call(model, settings)
    prompt = call["input_ids"]
    run = drive(model, replace(plan, prompt_length=prompt.shape[1]), _driver(model, call))
    reply = call["thinker_reply_part"].shape[1]
    recipe = (f"text input_ids [B, {plan.prompt_length}] through the thinker ({THINKER_TOKENS} greedy tokens), then the "
              f"talker: codec prompt [B, {prompt.shape[1]}] with the thinker's inputs_embeds, one codec id a step plus "
              f"the thinker reply part ({reply} embeddings, the last repeated) as generate() hands it (modeling_qwen2_5_omni.py)")
    return TalkerRun(run, recipe, _timed_generate(run, model, settings, plan))


def _timed_generate(run: FamilyRun, model: Model, settings: dict[str, Any], plan: ProbePlan) -> GenerateRun:
    start = time.perf_counter()
    generated = run_omni_generate(model, settings, plan.cache, plan.calls)
    run.record.timings["generate_s"] = time.perf_counter() - start
    return generated


def _probe_code_predictor(model: Model, plan: ProbePlan, text: torch.Tensor) -> TalkerRun:
    """Qwen3-Omni-MoE: the talker a frame a step, each frame's residual codebooks through the code predictor's cache."""
    settings = code_predictor_settings(model, text, plan.decode_steps, THINKER_TOKENS)
    call = talker_call(model, settings)
    driver, frames, decode = residual_driver(model, call)
    prompt = call["talker_input_ids"]
    run = drive(model, replace(plan, prompt_length=prompt.shape[1]), driver)
    last = torch.tensor(run.record.steps[-1].cached_argmax, device=prompt.device).reshape(-1, 1)
    with torch.inference_mode():  # the frame the last step's logits choose (the decode stops before it): every step has all its heads
        decode(last)
    k = frames.codebooks
    recipe = (f"chat input_ids [B, {settings['input_ids'].shape[1]}] ({plan.prompt_length} text ids in a user turn, the "
              f"assistant turn opened) through the thinker ({THINKER_TOKENS} greedy tokens), then the talker: its "
              f"inputs_embeds [B, {prompt.shape[1]}] as generate() hands them, one frame [B, {k}] a step: codebook 0 "
              f"from the talker, 1..{k - 1} from the code predictor's own cache, empty every frame; fed the sum of the "
              f"frame's embeddings plus trailing_text_hidden ({call['trailing_text_hidden'].shape[1]} embeddings), then "
              f"tts_pad_embed (modeling_qwen3_omni_moe.py)")
    return TalkerRun(replace(run, row_deltas=frames.rows(run)), recipe, _timed_generate(run, model, settings, plan), k, frames.trace)

"""Qwen3-Omni-MoE's talker and code predictor: a frame of K codebooks a step, fed what the model's generate() hands it.

``Qwen3OmniMoeForConditionalGeneration`` has no forward; its ``generate()`` (modeling_qwen3_omni_moe.py:4064-4310) runs
the thinker on a chat prompt, builds the talker's inputs from the thinker's token embeddings (``_get_talker_user_parts``,
``_get_talker_assistant_parts``, :3983-4062) and calls ``talker.generate()`` with them (:4276-4283). The talker predicts
codebook 0 of a frame; its ``prepare_inputs_for_generation`` (:3370-3430) then decodes codebooks 1..K-1 with
``code_predictor.generate`` and feeds the talker the frame. The cell:

- runs that ``generate()`` once and takes the talker's call (``omni_talker.talker_call``): ``inputs_embeds`` (the
  user turn's projected thinker embeddings, then the assistant turn's with the codec specials and speaker added),
  ``attention_mask``, ``trailing_text_hidden`` (one projected embedding per later reply token, then the tts eos) and
  ``tts_pad_embed``. The thinker's own text decode is the image-text-to-text sweep's cell and is not repeated here;
- prefills the talker's cache with them; every decode step takes the greedy codebook 0 (through generate()'s
  repetition penalty and suppressed special ids), decodes codebooks 1..K-1 through the code predictor's own cache,
  empty every frame (``[the talker's last hidden state, c0's talker embedding]``, then one code a call, head ``k`` after
  code ``k``: ``generation_steps``), and feeds the talker the sum of the frame's K codebook embeddings (c0 the talker's,
  ``ck`` the code predictor's ``codec_embedding[k - 1]``) plus ``trailing_text_hidden[step]``, or ``tts_pad_embed`` once
  it is spent (:3398-3429);
- compares every talker step with ONE uncached talker pass over the prompt's and every fed frame's embeddings
  (positions 0..S-1, a text-only prompt's rope index), and every frame's code predictor heads with ONE uncached pass of
  its transformer over ``[hidden, c0, …, c(K-2)]``, position ``k`` through head ``k - 1`` (``depth_codebooks.DepthFrames``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families.decode import Driver
from kvconform.families.depth_codebooks import DepthCalls, DepthFrames, DepthTrace
from kvconform.probe.cache_io import new_cache, seq_length
from kvconform.probe.forwards import Forwards, fed_back

#: The id Qwen's tokenizer gives "\n" (published vocabularies; inside every shrunk one): the chat template's line ends.
NEWLINE = 198
#: The talker's repetition penalty: generate()'s default ``talker_repetition_penalty`` (modeling_qwen3_omni_moe.py:4073),
#: a logits processor that greedy decoding keeps.
REPETITION_PENALTY = 1.05


def has_code_predictor(model: Model) -> bool:
    """Whether ``model``'s talker decodes each frame's residual codebooks with a code predictor (Qwen3-Omni-MoE)."""
    return hasattr(getattr(model, "talker", None), "code_predictor")


def chat_prompt(model: Model, text: torch.Tensor) -> torch.Tensor:
    """``text`` as the chat template writes one user turn and opens the assistant's:
    ``<|im_start|>user\\n … <|im_end|>\\n<|im_start|>assistant\\n`` (generate() splits the talker's user and assistant parts
    at these ids, :4189-4231)."""
    config = model.config
    vocab = int(config.thinker_config.text_config.vocab_size)
    if NEWLINE >= vocab:
        raise ValueError(f"the newline id {NEWLINE} is outside the thinker's vocabulary of {vocab}")

    def ids(*values: int) -> torch.Tensor:
        return torch.tensor([values], device=text.device).expand(text.shape[0], -1)

    start, end = int(config.im_start_token_id), int(config.im_end_token_id)
    return torch.cat([ids(start, int(config.user_token_id), NEWLINE), text,
                      ids(end, NEWLINE, start, int(config.assistant_token_id), NEWLINE)], dim=1)


def settings(model: Model, text: torch.Tensor, steps: int, thinker_tokens: int) -> dict[str, Any]:
    """``generate()``'s arguments: the chat prompt with the processor's attention mask, the config's first speaker,
    greedy thinker and talker (the talker's greedy setting is mirrored onto its code predictor, :3362-3368)."""
    prompt = chat_prompt(model, text)
    return {"input_ids": prompt, "attention_mask": torch.ones_like(prompt),
            "speaker": next(iter(model.config.talker_config.speaker_id)), "thinker_max_new_tokens": thinker_tokens,
            "thinker_do_sample": False, "talker_max_new_tokens": steps, "talker_do_sample": False}


def _repetition_penalty(prompt_length: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The talker's repetition penalty over the codes it generated (its generate() gets no prompt ids, :4277-4283)."""
    from transformers import RepetitionPenaltyLogitsProcessor

    penalty = RepetitionPenaltyLogitsProcessor(REPETITION_PENALTY)
    return lambda ids, scores: penalty(ids[:, prompt_length:], scores)


def residual_driver(model: Model, call: dict[str, Any]) -> tuple[Driver, DepthFrames, Callable[[torch.Tensor], torch.Tensor]]:
    """The talker's driver over the call ``generate()`` made, the frames its code predictor decodes, and how to decode
    one more frame from the talker's last decoding call (the frame the last step's logits choose)."""
    from transformers import DynamicCache

    talker = model.talker
    predictor = talker.code_predictor
    keyword, predictor_keyword = cache_keyword(talker), cache_keyword(predictor)
    prompt, prompt_mask, prompt_embeds = call["talker_input_ids"], call["attention_mask"], call["inputs_embeds"]
    trailing, pad = call["trailing_text_hidden"], call["tts_pad_embed"]
    codebooks = int(talker.config.num_code_groups)
    config = predictor.config
    frames = DepthFrames(DepthTrace(int(config.num_hidden_layers), int(config.num_key_value_heads), int(config.head_dim),
                                    owner="talker", name="code predictor"), codebooks)
    hidden: dict[str, torch.Tensor] = {}

    def codec_embeds(frame: torch.Tensor, count: int) -> list[torch.Tensor]:
        """The embeddings of the frame's first ``count`` codebooks: c0 the talker's, ck the code predictor's k - 1."""
        tables = predictor.get_input_embeddings()
        return [talker.get_input_embeddings()(frame[:, :1])] + [tables[k - 1](frame[:, k:k + 1]) for k in range(1, count)]

    def frame_embeds(frame: torch.Tensor, step: int) -> torch.Tensor:
        """What the talker's step ``step`` is fed: the sum of the frame's embeddings plus its text (:3416-3429)."""
        text = trailing[:, step:step + 1] if step < trailing.shape[1] else pad
        return torch.cat(codec_embeds(frame, codebooks), dim=1).sum(1, keepdim=True) + text

    def depth_calls(state: torch.Tensor) -> DepthCalls:
        def start(first: torch.Tensor) -> tuple[Any, torch.Tensor]:
            cache = DynamicCache(config=config)
            output = predictor(inputs_embeds=torch.cat([state, *codec_embeds(first, 1)], dim=1), use_cache=True,
                               **{predictor_keyword: cache})
            return fed_back(output, cache)[0], output.logits[:, -1]

        def step(token: torch.Tensor, k: int, cache: Any) -> tuple[Any, torch.Tensor]:
            output = predictor(input_ids=token, generation_steps=k, use_cache=True, **{predictor_keyword: cache})
            return fed_back(output, cache)[0], output.logits[:, -1]

        def reference(frame: torch.Tensor) -> torch.Tensor:
            embeds = torch.cat([state, *codec_embeds(frame, codebooks - 1)], dim=1)
            states = predictor.model(inputs_embeds=embeds, use_cache=False).last_hidden_state
            return torch.stack([predictor.lm_head[k](states[:, k + 1]) for k in range(codebooks - 1)], dim=1)

        return DepthCalls(start, step, reference)

    def inputs(length: int) -> dict[str, torch.Tensor]:
        """The attention mask over ``length`` positions (the prompt's, then ones) and its text positions (:3311-3351)."""
        mask = torch.cat([prompt_mask, prompt_mask.new_ones(prompt.shape[0], max(0, length - prompt.shape[1]))], dim=1)[:, :length]
        return {"attention_mask": mask, "position_ids": (mask.long().cumsum(-1) - 1).clamp(min=0)}

    def embeds_at(ids: torch.Tensor, seen: int) -> torch.Tensor:
        """The embeddings of ``ids`` from position ``seen`` on: the prompt's, then every fed frame's."""
        split = max(0, min(ids.shape[1], prompt.shape[1] - seen))
        first = max(0, seen - prompt.shape[1])
        fed = frames.chosen(ids[:, split:], first)
        return torch.cat([prompt_embeds[:, seen:seen + split], *(frame_embeds(fed[:, s], first + s) for s in range(fed.shape[1]))], dim=1)

    def whole(ids: torch.Tensor) -> dict[str, Any]:
        """The talker's inputs over ``ids`` from the start as one call: the prompt's and every fed frame's embeddings."""
        return {"inputs_embeds": embeds_at(ids, 0), **inputs(ids.shape[1])}

    def forward(cache: Any, embeds: torch.Tensor, length: int, decoding: bool, step: int = -1) -> tuple[Any, Any]:
        """A talker call; ``step`` is the ``generation_step`` generate() carries to a one-frame call (:3353-3358)."""
        given = inputs(length)
        given["position_ids"] = given["position_ids"][:, -embeds.shape[1]:]
        output = talker(inputs_embeds=embeds, use_cache=True, output_hidden_states=True, generation_step=step, **given,
                        **({keyword: cache} if cache is not None else {}))
        if decoding:  # the decode's own calls start the next frame; a fresh pass (the localization) does not
            hidden["last"] = output.hidden_states[0][-1][:, -1:]  # as prepare_inputs_for_generation reads it (:3405)
        return fed_back(output, cache)

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        if ids.shape[1] != prompt.shape[1]:  # a fresh pass over a decoded sequence (the localization)
            return forward(cache, whole(ids)["inputs_embeds"], ids.shape[1], False)
        return forward(cache, prompt_embeds, ids.shape[1], True)

    def decode(first: torch.Tensor) -> torch.Tensor:
        """The frame whose codebook 0 is ``first``, from the talker's last decoding call."""
        return frames.decode(first, depth_calls(hidden["last"]))

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        seen = seq_length(cache) or 0
        step = seen - prompt.shape[1]
        if ids.shape[1] == 1 and step == len(frames.codes):  # the decode: a new frame
            return forward(cache, frame_embeds(decode(ids), step), seen + 1, True, step)
        return forward(cache, embeds_at(ids, seen), seen + ids.shape[1], False, step)  # a path: positions already decoded

    def reference(ids: torch.Tensor, keep: int | None) -> Any:
        return talker(use_cache=False, **whole(ids))

    forwards = Forwards(model=talker, prompt=prompt, start=start, more=more, reference=reference,
                        make_cache=lambda kind, length: new_cache(talker, kind, length), default_cache=lambda: None,
                        row_inputs=True)
    driver = Driver(forwards, forbidden={int(i) for i in call.get("suppress_tokens") or ()},
                    processor=_repetition_penalty(prompt.shape[1]))
    return driver, frames, decode

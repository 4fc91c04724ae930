"""A vision- or audio-language model's later generate() calls through one instance (state that leaks between calls).

A user's model serves one request after another: ``generate()`` over the text-only prompt, then over an image, then over
another image, then the text-only prompt again. Each call's logits must stay within the parity limit of one uncached
pass over what it generated, and the text-only prompt must give the same tokens the second time: state one call leaves
on the model (not in its cache, which each call builds anew) shows in the calls after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvconform.families.inputs import MediaInputs
from kvconform.probe.cache_io import fixed_length_config, whole_pass
from kvconform.probe.variants import row_delta

Model = Any


@dataclass
class GenerateCall:
    """One ``generate()`` call of the sequence: its new tokens and max |Δlogit| to one uncached pass over them."""

    what: str
    tokens: list[list[int]]
    max_abs_delta: float
    logit_scale: float
    error: str | None = None


Inputs = Callable[[torch.Tensor, MediaInputs | None, int], dict[str, Any]]


@torch.inference_mode()
def generate_calls(model: Model, text_model: Model, text: torch.Tensor, media: list[tuple[str, torch.Tensor, MediaInputs]],
                   new_tokens: int, inputs: Inputs, forbidden: set[int],
                   as_given: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[GenerateCall]:
    """``generate()`` over ``text``, each ``(name, prompt, media)`` in turn, then ``text`` again, on the same instance
    (``text_model``: the decoder a text-only prompt goes to, where the outer forward needs an image); ``inputs(ids, media,
    prompt_length)`` is what the forward takes beside the ids (the family's adapter); ``forbidden`` ids (the image
    placeholder, special tokens) are never generated, as the family's decode loop never picks them; ``as_given`` maps a
    media prompt (what the decoder reads) to the ids the model's generate() is given (the processor's closing token)."""
    calls = [("the text-only prompt", text, None), *media, ("the text-only prompt again", text, None)]
    return [_call(text_model if item is None else model, what, prompt, item, new_tokens, inputs, sorted(forbidden),
                  as_given if item is not None and as_given is not None else lambda ids: ids)
            for what, prompt, item in calls]


def _call(model: Model, what: str, prompt: torch.Tensor, media: MediaInputs | None, new_tokens: int,
          inputs: Inputs, forbidden: list[int], as_given: Callable[[torch.Tensor], torch.Tensor]) -> GenerateCall:
    config = fixed_length_config(model, new_tokens, output_logits=True, return_dict_in_generate=True, suppress_tokens=forbidden)
    given = as_given(prompt)
    try:
        out = model.generate(input_ids=given, attention_mask=torch.ones_like(given),
                             **inputs(prompt, media, prompt.shape[1]), generation_config=config)
    except Exception as exc:  # noqa: BLE001 - a crash of one call fails this check, with its words
        return GenerateCall(what, [], 0.0, 0.0, error=f"generate() raised {type(exc).__name__}: {exc}"[:500])
    full = out.sequences
    # The reference is given the mask generate() was given: a forward without one may not build the prompt's positions
    # (the Qwen omni thinkers compute their multimodal rotary index only with an attention_mask,
    # compute_3d_position_ids in modeling_qwen2_5_omni.py:1817-1849 in 5.24.0, and use plain positions otherwise).
    reference = model(input_ids=full, attention_mask=torch.ones_like(full), **inputs(full, media, prompt.shape[1]),
                      **whole_pass(model, prompt.shape[1]))
    reference = reference.logits[:, prompt.shape[1] - 1 : -1]
    delta = max(float(row_delta(logits, reference[:, k]).max()) for k, logits in enumerate(out.logits))
    scale = float(torch.nan_to_num(reference.float()).abs().max())
    return GenerateCall(what, full[:, prompt.shape[1] :].tolist(), delta, scale)

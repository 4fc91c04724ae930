"""Vision-language cells: a prompt with image tokens and synthetic pixels, then text decode steps.

The reference is ONE uncached pass over the whole sequence with the same image, so positions that
drift after the image (multimodal rotary ``rope_deltas``) show up as parity failures, located by
layer and position. A text-only prompt on the same model is the second record.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.inputs import ImageInputs, image_inputs, special_token_ids, text_ids
from kvconform.probe.cache_io import new_cache
from kvconform.probe.decode import ProbePlan

#: Text tokens before the image; the rest of the prompt follows it.
TEXT_BEFORE_IMAGE = 2


def _driver(model: Model, plan: ProbePlan, prompt: torch.Tensor, image: ImageInputs | None,
            forbidden: set[int]) -> Driver:
    keyword = cache_keyword(model)
    total = prompt.shape[1] + plan.decode_steps

    def pixels(ids: torch.Tensor) -> dict[str, Any]:
        return image.for_sequence(model, ids) if image is not None else {}

    def cached(ids: torch.Tensor) -> Any:
        cache = new_cache(model, plan.cache, total)
        return model(input_ids=ids, use_cache=True, **pixels(ids), **({keyword: cache} if cache is not None else {}))

    return Driver(
        prompt=prompt,
        prefill=lambda: cached(prompt),
        step=lambda token, cache: model(input_ids=token, use_cache=True, **{keyword: cache}),
        reference=lambda ids: model(input_ids=ids, use_cache=False, **pixels(ids)),
        fresh=cached,
        forbidden=forbidden,
    )


def probe_vision_language(model: Model, plan: ProbePlan) -> tuple[FamilyRun, FamilyRun, str]:
    """(run with an image, text-only run, how the image was made); the image run's plan counts image tokens."""
    forbidden = special_token_ids(model.config)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    device = next(p.device for p in model.parameters())
    text = text_ids(plan.batch_size, plan.prompt_length, plan.seed, vocab, forbidden).to(device)
    # Text only first: nothing the image run leaves on the model (rope_deltas) can reach it.
    text_only = drive(model, plan, _driver(model, plan, text, None, forbidden))
    image = image_inputs(model, plan.batch_size, plan.seed)
    placeholders = torch.full((plan.batch_size, image.tokens_per_image), image.token_id, device=device)
    prompt = torch.cat([text[:, :TEXT_BEFORE_IMAGE], placeholders, text[:, TEXT_BEFORE_IMAGE:]], dim=1)
    image_plan = replace(plan, prompt_length=prompt.shape[1])
    with_image = drive(model, image_plan, _driver(model, image_plan, prompt, image, forbidden))
    recipe = (f"{image.recipe}, {image.tokens_per_image} image tokens at positions "
              f"{TEXT_BEFORE_IMAGE}-{TEXT_BEFORE_IMAGE + image.tokens_per_image - 1} of a {prompt.shape[1]}-token prompt")
    return with_image, text_only, recipe

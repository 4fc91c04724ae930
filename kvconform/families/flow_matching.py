"""PI0 and PI05: vision-language-action policies whose flow-matching sampler reuses one prefix cache, cropped after every step.

``PI0ForConditionalGeneration.sample_actions`` (modeling_pi0.py:325-388 in 5.24) runs the PaliGemma prefix (the camera
images and the prompt) through ``model.vlm`` once with ``use_cache=True``; then each of ``num_inference_steps``
flow-matching steps calls ``self(state, noise, timestep, attention_mask, cache=cache)``, whose DiT runs the state and
``chunk_size`` noisy-action embeddings against that cache (writing ``chunk_size + 1`` positions into every layer), and
crops the cache back to the prefix (``cache.crop``, :387). The vlm's layers write the K/V the DiT's layers read. PI05
(5.25, modeling_pi05.py:642-705) is the same loop with the state written into the prompt's text by its processor and
``chunk_size`` positions a step (no state token).

The cell runs ``sample_actions`` as users call it, seeing every step's call through a forward hook: the cache before
the step's forward (the prefix, cropped), after it (prefix + chunk_size + 1) and the velocity (``output.logits``). The
reference of each step is the same call without the cache (``model(state, noise, timestep, input_ids, pixel_values,
pixel_attention_mask, attention_mask)``, which builds a fresh prefix cache itself, PI0Model.forward :160-174) on the
same noise and timestep. The core checks read it as an ordinary record: ``parity`` (each step's velocity), ``growth``,
``shapes`` and ``bytes`` after each forward (the record, ``ProbePlan.cropped_to``) and after each crop (its own cache).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from kvconform.build.geometry import CacheGeometry, cache_geometry, explain
from kvconform.build.models import Model
from kvconform.checks.table import CHECK_TABLE
from kvconform.compat import cache_keyword
from kvconform.families import VISION_LANGUAGE
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.families.processors import image_processor_class, run_processor
from kvconform.probe.cache_io import cache_layers, compute_dtype, returned_cache, seq_length
from kvconform.probe.decode import OwnCache, ProbePlan, ProbeRecord, step_record
from kvconform.probe.kv_compare import locate_divergence
from kvconform.probe.layer_state import snapshot_layers
from kvconform.transformers_memo import auto_mapping

#: The checks this cell takes: the velocity of every step, and the cache after each forward and each crop.
CHECKED = ("parity", "growth", "shapes", "bytes")
#: Why it takes no other check of the vision-language sweep.
NOT_APPLICABLE_REASON = ("a vision-language-action policy: sample_actions (modeling_pi0.py:325-388 in 5.24) decodes no text "
                         "tokens (no generate(), beam search, text-only prompt or token-by-token decode to extend, crop "
                         "or reorder); it reuses one prefix cache, cropped after every flow-matching step, which parity, "
                         "growth, shapes and bytes check")
#: Camera images per row: row 0 fills every slot, the others one (``pixel_attention_mask`` False for the rest), as
#: PI0Processor pads a batch of samples with fewer cameras (processing_pi0.py:166-172).
CAMERAS = 2
#: Text tokens of the longest prompt's task (row b has ``PROMPT_TOKENS - b``); the last one stands for the newline PI0's
#: processor ends every prompt with (processing_pi0.py:158).
PROMPT_TOKENS = 6
#: Robot state dimensions before the processor zero-pads them to ``max_state_dim`` (processing_pi0.py:183-186).
STATE_DIMS = 8


def is_flow_matching_model(model: Model) -> bool:
    """Whether ``model`` samples actions by flow matching over a vlm prefix cache (PI0)."""
    return callable(getattr(model, "sample_actions", None)) and hasattr(getattr(model, "model", None), "vlm")


@dataclass
class FlowMatchingRun:
    """The record (each step after its forward), its geometry and how the inputs were made."""

    record: ProbeRecord
    geometry: CacheGeometry
    explanation: str
    recipe: str
    not_applicable: dict[str, str]


def processor_text_defaults(model_type: str) -> tuple[dict[str, Any], bool]:
    """The text padding the type's processor class applies by default (``padding="max_length"``, its ``max_length``,
    ``padding_side="right"``: ``text_kwargs`` from 5.24, ``<Type>ProcessorKwargs._defaults`` before), and whether it writes
    the robot state into the prompt (PI05Processor.state_in_prompt: the state discretized into 256 bins as text,
    processing_pi05.py:200-215 in 5.25)."""
    import importlib

    import transformers

    name = auto_mapping("processing_auto", "PROCESSOR_MAPPING_NAMES")[model_type]
    cls = getattr(transformers, name)
    defaults = getattr(cls, "text_kwargs", None)
    if not isinstance(defaults, dict):
        module = importlib.import_module(cls.__module__)
        defaults = getattr(module, f"{name}Kwargs")._defaults["text_kwargs"]
    return dict(defaults), bool(getattr(cls, "state_in_prompt", False))


def _prefix_inputs(model: Model, batch: int, seed: int) -> tuple[dict[str, torch.Tensor], str]:
    """input_ids, attention_mask, pixel_values, pixel_attention_mask and state as the type's processor makes them: its
    image processor (class defaults, sized to the shrunk tower) on one seeded-noise image per camera, and the prompt it
    writes (``<image>`` × image_seq_length per camera, bos, the text; right-padded to its max_length). A processor that
    writes the state into the prompt (PI05) gets ``max_state_dim`` more text tokens for it, and the model no state."""
    vlm = model.config.vlm_config
    text = vlm.text_config
    cls = image_processor_class(model.config.model_type)
    kwargs, side, out = run_processor(cls, SimpleNamespace(vision_config=vlm.vision_config, model_type=model.config.model_type),
                             batch * CAMERAS, seed)
    images = out["pixel_values"].to(compute_dtype(model))
    cameras = torch.tensor([CAMERAS if row == 0 else 1 for row in range(batch)])
    pixel_mask = torch.arange(CAMERAS)[None, :] < cameras[:, None]
    pixels = images.new_zeros(batch, CAMERAS, *images.shape[1:])
    pixels[pixel_mask] = images[: int(cameras.sum())]
    per_image = int(kwargs.get("image_seq_length") or getattr(cls, "image_seq_length"))  # noqa: B009 - a class field
    special = special_token_ids(vlm)
    padding, state_in_prompt = processor_text_defaults(model.config.model_type)
    max_length = int(padding["max_length"])
    extra = int(getattr(model.config, "max_state_dim", 32)) if state_in_prompt else 0  # PI05Config has no max_state_dim
    lengths = [max(1, PROMPT_TOKENS - row) + extra for row in range(batch)]
    body = text_ids(batch, max(lengths), seed + 1, int(text.vocab_size), special)
    ids = torch.full((batch, max_length), int(text.pad_token_id))
    for row, length in enumerate(lengths):
        prompt = [int(vlm.image_token_id)] * per_image * int(cameras[row]) + [int(text.bos_token_id)] + body[row, :length].tolist()
        ids[row, :len(prompt)] = torch.tensor(prompt)
    mask = (torch.arange(max_length)[None, :] < (ids != int(text.pad_token_id)).sum(-1, keepdim=True)).long()
    tensors = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels, "pixel_attention_mask": pixel_mask}
    state = "the state in the prompt's text" if state_in_prompt else f"state [B, {model.config.max_state_dim}] ({STATE_DIMS} seeded dims, zero-padded)"
    if not state_in_prompt:
        generator = torch.Generator().manual_seed(seed + 2)
        values = torch.randn(batch, STATE_DIMS, generator=generator)
        tensors["state"] = F.pad(values, (0, int(model.config.max_state_dim) - STATE_DIMS)).to(compute_dtype(model))
    sized = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    recipe = (f"{cls.__name__}({sized}) on {side}x{2 * side} images, {cameras.tolist()} cameras per row of {CAMERAS} "
              f"(pixel_values {list(pixels.shape)}, pixel_attention_mask {pixel_mask.tolist()}); input_ids [B, {max_length}] as "
              f"its processor writes them (<image> x {per_image} per camera, bos, {lengths} text tokens"
              f"{f' ({extra} of them the state)' if extra else ''}, right-padded to max_length {max_length}: "
              f"{mask.sum(-1).tolist()} attended); {state}")
    return tensors, recipe


@dataclass
class _Step:
    """One flow-matching step as ``sample_actions`` made it."""

    before: Any
    """The cache's layer states before the forward (the cropped prefix)."""
    prefix: list[tuple[torch.Tensor, torch.Tensor]]
    """Each layer's K/V before the forward (kept to locate a parity failure)."""
    seen_before: int | None
    after: Any
    seen_after: int | None
    call: dict[str, torch.Tensor]
    velocity: torch.Tensor


def _sample(model: Model, inputs: dict[str, torch.Tensor], noise: torch.Tensor) -> tuple[list[_Step], Any]:
    """``sample_actions`` as users call it, each step's forward seen by hooks; the cache after the last crop."""
    steps: list[_Step] = []
    pending: dict[str, Any] = {}
    caches: list[Any] = []
    keyword = cache_keyword(model)  # past_key_values up to 5.23

    def before(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        cache = kwargs[keyword]
        caches[:] = [cache]
        pending.update(before=snapshot_layers(cache), seen=seq_length(cache),
                       prefix=[(layer.keys.clone(), layer.values.clone()) for layer in cache_layers(cache)],
                       call={k: kwargs[k].clone() for k in ("state", "noise", "timestep") if k in kwargs})

    def after(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        cache = kwargs[keyword]
        steps.append(_Step(pending["before"], pending["prefix"], pending["seen"], snapshot_layers(cache), seq_length(cache),
                           pending["call"], output.logits.detach().clone()))

    hooks = [model.register_forward_pre_hook(before, with_kwargs=True), model.register_forward_hook(after, with_kwargs=True)]
    try:
        model.sample_actions(**inputs, noise=noise)
    finally:
        for hook in hooks:
            hook.remove()
    return steps, caches[0] if caches else None


@torch.inference_mode()
def probe_flow_matching(model: Model, plan: ProbePlan) -> FlowMatchingRun:
    """Run ``sample_actions`` once and every step's uncached reference; the record and the cropped prefix's own cache."""
    config = model.config
    device = next(p.device for p in model.parameters())
    inputs, recipe = _prefix_inputs(model, plan.batch_size, plan.seed)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    generator = torch.Generator().manual_seed(plan.seed + 3)
    noise = torch.randn(plan.batch_size, int(config.chunk_size), int(config.max_action_dim), generator=generator)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    steps, cache = _sample(model, inputs, noise.to(device, compute_dtype(model)))
    timings["decode_s"] = time.perf_counter() - start
    if not steps or cache is None:
        raise RuntimeError("sample_actions made no cached forward (no flow-matching step called the model with its cache)")
    start = time.perf_counter()
    prefix_inputs = {k: v for k, v in inputs.items() if k != "state"}  # the state each step's call carries
    references = [model(**step.call, **prefix_inputs) for step in steps]
    timings["reference_s"] = time.perf_counter() - start
    prefix = steps[0].seen_before or 0
    # PI0 embeds the state as one token before the chunk (PI0ActionTimeEmbedding, modeling_pi0.py:87); PI05 reads it in
    # the prompt and feeds the chunk alone.
    suffix = int(config.chunk_size) + ("state" in steps[0].call)
    rows = plan.batch_size
    records = [step_record(k, (step.seen_after, step.after), step.velocity.reshape(rows, -1),
                            reference.logits.reshape(rows, -1)) for k, (step, reference) in enumerate(zip(steps, references, strict=True))]
    reference_steps = torch.stack([reference.logits for reference in references])
    scale = float(torch.nan_to_num(reference_steps.float(), nan=0.0, posinf=0.0, neginf=0.0).abs().max())
    nonfinite = next((f"cached velocity at step {k} is not finite" for k, step in enumerate(steps) if not torch.isfinite(step.velocity).all()),
                     None)
    if nonfinite is None and not torch.isfinite(reference_steps).all():
        nonfinite = "uncached reference velocity is not finite"
    limit = plan.locate_tolerance.limit(scale) if plan.locate_tolerance is not None else None
    failing = [k for k, record in enumerate(records) if limit is not None and record.max_abs_delta > limit]
    divergence = None
    if failing:  # the prefix the first failing step read against the fresh prefix its reference built
        k = failing[0]
        fresh = cache_layers(returned_cache(references[k]))
        pairs: list[Any] = [(keys, values, layer.keys[..., :prefix, :], layer.values[..., :prefix, :])
                            for (keys, values), layer in zip(steps[k].prefix, fresh, strict=False)]
        divergence = locate_divergence(pairs, valid_length=prefix)
    dtype = str(compute_dtype(model)).removeprefix("torch.")
    text = config.vlm_config.text_config
    geometry, explanation = cache_geometry(text), f"vlm text config: {explain(text)}"
    main = ProbePlan(batch_size=rows, prompt_length=prefix, decode_steps=len(steps), seed=plan.seed, cache=plan.cache,
                     device=plan.device, generate=False, locate_tolerance=plan.locate_tolerance, positions_per_step=suffix,
                     cropped_to=prefix, step_name="flow-matching step")
    cropped = [step_record(k, (step.seen_before, step.before), step.velocity.reshape(rows, -1), step.velocity.reshape(rows, -1))
               for k, step in enumerate(steps)]
    cropped.append(step_record(len(steps), (seq_length(cache), snapshot_layers(cache)), steps[-1].velocity.reshape(rows, -1),
                                steps[-1].velocity.reshape(rows, -1)))
    crop_plan = ProbePlan(batch_size=rows, prompt_length=prefix, decode_steps=len(steps), seed=plan.seed, cache=plan.cache,
                          device=plan.device, generate=False, positions_per_step=0, cropped_to=prefix,
                          step_name="crop before flow-matching step")
    crop_record = ProbeRecord(plan=crop_plan, dtype=dtype, cache_class=type(cache).__name__, max_cache_len=None, steps=cropped,
                              logit_scale=scale, nonfinite=None, located=False, divergence=None, prefix_instability=None,
                              topk_ties=None, generate=None)
    record = ProbeRecord(plan=main, dtype=dtype, cache_class=type(cache).__name__, max_cache_len=None, steps=records,
                         logit_scale=scale, nonfinite=nonfinite, located=bool(failing), divergence=divergence,
                         prefix_instability=None, topk_ties=None, generate=None, timings=timings,
                         reference="the uncached reference (a fresh prefix cache for that step)")
    record.own_caches.append(OwnCache("the prefix cache (after the prefill, before each step, after the last crop)",
                                      crop_record, geometry, explanation))
    recipe += (f"; sample_actions: {len(steps)} flow-matching steps (num_inference_steps), noise [B, {config.chunk_size}, "
               f"{config.max_action_dim}] seeded; each step's forward writes {suffix} positions (chunk_size{' + the state token' if suffix > config.chunk_size else ''}) over the "
               f"prefix of {prefix}, cropped back after it")
    not_applicable = {check.name: NOT_APPLICABLE_REASON for check in CHECK_TABLE
                      if VISION_LANGUAGE in check.families and check.name not in CHECKED}
    return FlowMatchingRun(record, geometry, explanation, recipe, not_applicable)

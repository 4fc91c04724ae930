"""Write a standalone reproduction script for one matrix cell (imports only torch and transformers).

The script builds the same model the suite builds (same config, seed and dtype loading), runs the
failing path, prints the measured Δ against one uncached pass, and exits 1 when the divergence (or
a crash) reproduces, 0 when it does not. A maintainer pastes it into an upstream issue.
"""

from __future__ import annotations

from typing import Any

from kvconform.cells import Cell
from kvconform.known_failures import known_failure

#: Paths a script can reproduce; a crash of any check reproduces through ``parity``.
REPRO_CHECKS = ("parity", "prefix_reuse", "ragged", "generate", "padded_generate", "crop", "beam", "reorder")

_TEMPLATE = '''#!/usr/bin/env python3
"""Reproduce kvconform cell {cell_id}, check {check}, with torch and transformers only.

{expectation}
Prefill {prompt} seeded random tokens (batch {batch}), decode {steps} greedy steps feeding the model's own cache
back{path_note}, and compare every step's logits with ONE uncached forward over the whole sequence
(causality makes its logits at position t the reference for the step that predicted token t+1).
Exit 1 when some step differs by more than atol + rtol * max|reference logit| (or the model raises), else 0.
"""
import copy
import inspect
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, StaticCache

DTYPE, SEED, BATCH, PROMPT, STEPS, CACHE, ATTN = {dtype!r}, {seed!r}, {batch!r}, {prompt!r}, {steps!r}, {cache!r}, {attn!r}
ATOL, RTOL = {atol!r}, {rtol!r}
CHECK = {check!r}
CONFIG_JSON = {config_json!r}
SUB_CONFIG, MODEL_CLASS = {sub_config!r}, {model_class!r}
ZERO_INIT_STD = {zero_init_std!r}


def build():
    """The model as kvconform builds it: seeded float32 weights, then from_pretrained(dtype=...) as users load."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(CONFIG_JSON)
        config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model_class = getattr(transformers, MODEL_CLASS)
    if SUB_CONFIG:  # a composite config whose causal-LM class takes one of its sub-configs
        model = model_class._from_config(getattr(config, SUB_CONFIG), dtype=torch.float32)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # kvconform gives all-zero weights (not biases) seeded noise, so selections do not tie (see kvconform/build/synthetic.py).
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    model = model.float().eval()
    if DTYPE != "float32":
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            model = model_class.from_pretrained(folder, dtype=getattr(torch, DTYPE)).eval()
    if model.config._attn_implementation != ATTN:  # the cell's attention implementation, as users switch it
        model.set_attn_implementation(ATTN)
    return model


def next_token(model, logits):
    """Greedy, never a pad id whose embedding row is all zero (a random build's; kvconform's decode skips it too)."""
    embeddings = model.get_input_embeddings()
    pad = getattr(embeddings, "padding_idx", None)
    if pad is not None and pad < logits.shape[-1] and not embeddings.weight[pad].any():
        logits = logits.clone()
        logits[..., pad] = float("-inf")
    return logits.argmax(-1, keepdim=True)


def forward(model, keyword, cache, **inputs):
    """A use_cache forward; a model that returns no cache object gets an explicit DynamicCache."""
    output = model(use_cache=True, **inputs, **({{keyword: cache}} if cache is not None else {{}}))
    returned = getattr(output, "cache", None) or getattr(output, "past_key_values", None) or cache
    if returned is None:
        returned = transformers.DynamicCache(config=model.config)
        output = model(use_cache=True, **inputs, **{{keyword: returned}})
    return returned, output


@torch.inference_mode()
def main():
    model = build()
    print(f"torch {{torch.__version__}}, transformers {{transformers.__version__}}, {{type(model).__name__}} in {{DTYPE}}")
    keyword = next(k for k in ("cache", "past_key_values", "cache_params") if k in inspect.signature(model.forward).parameters)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompt = torch.randint(3, max(4, min(vocab, 32000)), (BATCH, PROMPT), generator=torch.Generator().manual_seed(SEED))
    total = PROMPT + STEPS
    fresh = lambda: StaticCache(config=model.config, max_cache_len=total) if CACHE == "static" else None
    try:
        if CHECK == "ragged":
            return ragged(model, keyword, prompt, fresh())
        if CHECK in ("generate", "padded_generate"):
            return generate(model, prompt)
        if CHECK == "beam":
            return beam(model, prompt)
        cache, output = forward(model, keyword, fresh(), input_ids=prompt)
        logits, sequence = [output.logits[:, -1]], [prompt]
        for _ in range(STEPS):
            token = next_token(model, logits[-1])
            sequence.append(token)
            cache, output = forward(model, keyword, cache, input_ids=token)
            logits.append(output.logits[:, -1])
        full = torch.cat(sequence, dim=1)
        if CHECK == "prefix_reuse":
            # Prefill PROMPT-2 tokens, copy that cache, extend the copy by 2 tokens at once, then decode the same tokens.
            prefix = max(1, PROMPT - 2)
            stored, _ = forward(model, keyword, fresh(), input_ids=full[:, :prefix])
            reused, output = forward(model, keyword, copy.deepcopy(stored), input_ids=full[:, prefix:PROMPT])
            logits = [output.logits[:, -1]]
            for position in range(PROMPT, total):
                reused, output = forward(model, keyword, reused, input_ids=full[:, position : position + 1])
                logits.append(output.logits[:, -1])
        if CHECK == "crop":
            return crop(model, keyword, full, fresh)
        if CHECK == "reorder":
            return reorder(model, keyword, full, fresh)
        reference = model(input_ids=full, use_cache=False).logits[:, PROMPT - 1 :].float()
    except Exception as exc:  # the crash is the finding
        print(f"the model raised {{type(exc).__name__}}: {{exc}}")
        return 1
    return verdict([float((step.float() - reference[:, k]).abs().max()) for k, step in enumerate(logits)],
                   float(reference.abs().max()))


def ragged(model, keyword, prompt, cache):
    """Rows of lengths PROMPT, PROMPT-1, ... left-padded with id 0 and masked, decoded together; each row is
    compared with one uncached pass over its own unpadded tokens. A zero pad-embedding row gets seeded noise first, as
    kvconform's ragged path gives it (a random build's is zero, which hides pads that leak)."""
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for module in model.modules():
            row = module.padding_idx if isinstance(module, torch.nn.Embedding) else None
            if row is not None and module.weight.shape[0] > 1 and not module.weight[row].any():
                noise = torch.randn(module.weight.shape[1:], generator=generator) * float(module.weight.float().std())
                module.weight[row] = noise.to(module.weight.dtype).to(module.weight.device)
    width = prompt.shape[1]
    lengths = [max(2, width - row) for row in range(BATCH)]
    mask = torch.zeros_like(prompt)
    for row, length in enumerate(lengths):
        mask[row, width - length :] = 1
    padded = torch.where(mask.bool(), prompt, torch.zeros_like(prompt))
    positions = "position_ids" in inspect.signature(model.forward).parameters

    def step(ids, attention, cache, feed_mask=True):
        extra = {{"position_ids": (attention.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1] :]}} if positions else {{}}
        return forward(model, keyword, cache, input_ids=ids, **({{"attention_mask": attention}} if feed_mask else {{}}), **extra)

    cache, output = step(padded, mask, cache)
    logits, tokens = [output.logits[:, -1]], []
    for k in range(STEPS):
        token = logits[-1].argmax(-1, keepdim=True)
        tokens.append(token)
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        if k == 0:  # feed the mask on cached steps only where generate() does (Mamba-style models drop it)
            try:
                prepared = model.prepare_inputs_for_generation(token, attention_mask=mask, use_cache=True,
                                                               is_first_iteration=False, **{{keyword: cache}})
                feed_mask = prepared.get("attention_mask") is not None
            except (TypeError, ValueError, AttributeError):  # needs generate()'s own state: GenerationMixin feeds it
                feed_mask = True
        cache, output = step(token, mask, cache, feed_mask)
        logits.append(output.logits[:, -1])
    generated = torch.cat(tokens, dim=1)
    deltas, scale = [0.0] * len(logits), 0.0
    for row, length in enumerate(lengths):
        own = torch.cat([prompt[row : row + 1, width - length :], generated[row : row + 1]], dim=1)
        extra = {{"position_ids": torch.arange(own.shape[1])[None]}} if positions else {{}}
        reference = model(input_ids=own, use_cache=False, **extra).logits[0, length - 1 :].float()
        scale = max(scale, float(reference.abs().max()))
        for k, step_logits in enumerate(logits):
            deltas[k] = max(deltas[k], float((step_logits[row].float() - reference[k]).abs().max()))
    print(f"left-padded rows of lengths {{lengths}}; each row against its own unpadded uncached pass")
    return verdict(deltas, scale)


def generation_config(model, use_cache, **extra):
    """The model's own generation config for STEPS greedy tokens, with the cell's cache_implementation."""
    config = copy.deepcopy(model.generation_config)
    implementation = {{"cache_implementation": CACHE}} if use_cache and CACHE != "dynamic" else {{}}
    config.update(**{{"max_new_tokens": STEPS, "min_new_tokens": STEPS, "do_sample": False, "num_beams": 1, "use_cache": use_cache,
                     "eos_token_id": None, "pad_token_id": 0, **implementation, **extra}})  # extra may set num_beams
    return config


def generate(model, prompt):
    """Greedy generate() with and without the cache (padded_generate: rows left-padded to lengths PROMPT, PROMPT-1, ...)."""
    mask = torch.ones_like(prompt)
    if CHECK == "padded_generate":
        for row in range(BATCH):
            mask[row, : PROMPT - max(2, PROMPT - row)] = 0
        prompt = torch.where(mask.bool(), prompt, torch.zeros_like(prompt))
    runs = {{}}
    for use_cache in (True, False):
        runs[use_cache] = model.generate(prompt, generation_config=generation_config(model, use_cache), attention_mask=mask)
    cached, uncached = runs[True][:, PROMPT:], runs[False][:, PROMPT:]
    print(f"cached   {{cached.tolist()}}")
    print(f"uncached {{uncached.tolist()}}")
    return int(not torch.equal(cached, uncached))


def beam(model, prompt):
    """Beam search (3 beams, 3 returned) with and without the cache: the same beams, scores within 2 × the limit."""
    runs = {{}}
    for use_cache in (True, False):
        config = generation_config(model, use_cache, num_beams=3, num_return_sequences=3, early_stopping=False, length_penalty=1.0,
                                   output_scores=True, return_dict_in_generate=True)
        runs[use_cache] = model.generate(prompt, generation_config=config, attention_mask=torch.ones_like(prompt))
    cached, uncached = runs[True], runs[False]
    print(f"cached   beams {{cached.sequences[:, PROMPT:].tolist()}} scores {{cached.sequences_scores.tolist()}}")
    print(f"uncached beams {{uncached.sequences[:, PROMPT:].tolist()}} scores {{uncached.sequences_scores.tolist()}}")
    scale = float(model(input_ids=uncached.sequences, use_cache=False).logits.float().abs().max())
    delta = float((cached.sequences_scores - uncached.sequences_scores).abs().max())
    limit = 2 * (ATOL + RTOL * scale)
    print(f"same beams: {{torch.equal(cached.sequences, uncached.sequences)}}; max |score delta| {{delta:.3g}} (limit {{limit:.3g}})")
    return int(not torch.equal(cached.sequences, uncached.sequences) or delta > limit)


def crop(model, keyword, full, fresh):
    """Prefill PROMPT+3 tokens recording the past (as assisted decoding does), crop(-3), decode the same tokens again."""
    cache = fresh() or transformers.DynamicCache(config=model.config.get_text_config(decoder=True))
    start = getattr(cache, "activate_past_recording", None)
    if start is not None:  # transformers 5.14+: assisted decoding records the past (5.25+: the last 3 recurrent states)
        parameters = inspect.signature(start).parameters.values()
        keep = ({{"recurrent_states_to_keep": 3}} if any(p.name == "recurrent_states_to_keep" or p.kind is p.VAR_KEYWORD
                                                      for p in parameters) else {{}})
        start(**keep)
    cache, _ = forward(model, keyword, cache, input_ids=full[:, : PROMPT + 3])
    every_forward = start is not None and "length" not in next(iter(inspect.signature(cache.crop).parameters))
    if ".crop(new_cur_len" in inspect.getsource(transformers.GenerationMixin._assisted_decoding):  # before 5.14
        cache.crop(int(cache.get_seq_length()) - 3)
    else:
        cache.crop(-3)
    print(f"get_seq_length() after cropping 3 tokens: {{int(cache.get_seq_length())}} (expected {{PROMPT}})")
    logits = []
    for position in range(PROMPT, full.shape[1]):
        cache, output = forward(model, keyword, cache, input_ids=full[:, position : position + 1])
        if every_forward:  # as 5.15+'s assisted decoding does after every forward (crop(0) empties a cache before)
            cache.crop(0)
        logits.append(output.logits[:, -1])
    reference = model(input_ids=full, use_cache=False).logits[:, PROMPT:].float()
    return verdict([float((step.float() - reference[:, k]).abs().max()) for k, step in enumerate(logits)], float(reference.abs().max()))


def reorder(model, keyword, full, fresh):
    """reorder_cache(rows rolled by one) on a prefilled cache, then decode; against the same cache prefilled in that order."""
    order = torch.roll(torch.arange(BATCH), 1)
    runs = []
    for rows, reorder_after in ((full, True), (full[order], False)):
        cache, _ = forward(model, keyword, fresh(), input_ids=rows[:, :PROMPT])
        if reorder_after:
            cache.reorder_cache(order)
        logits = []
        for position in range(PROMPT, full.shape[1]):
            cache, output = forward(model, keyword, cache, input_ids=full[order][:, position : position + 1])
            logits.append(output.logits[:, -1].float())
        runs.append(logits)
    return verdict([float((a - b).abs().max()) for a, b in zip(*runs)], max(float(b.abs().max()) for b in runs[1]))


def verdict(deltas, scale):
    """Print every step's max |Δ| against the limit; 1 when some step is over it."""
    limit = ATOL + RTOL * scale
    for k, delta in enumerate(deltas):
        print(f"step {{k}} ({{'prefill' if k == 0 else 'decode'}}): max |cached - uncached| = {{delta:.3g}}{{'  > limit' if delta > limit else ''}}")
    worst = max(deltas)
    print(f"worst {{worst:.3g}} vs limit {{limit:.3g}} ({{DTYPE}}: {{ATOL:g}} + {{RTOL:g}} * max|logit| {{scale:.3g}})")
    return 1 if worst > limit else 0


if __name__ == "__main__":
    sys.exit(main())
'''


#: How each path departs from the plain decode, for the script's docstring.
PATH_NOTES = {
    "prefix_reuse": ", then continue a copied prefix cache extended by 2 tokens at once",
    "crop": "; the crop path prefills 3 more, crops them (crop(-3)) and decodes them again",
    "reorder": "; the reorder path reorders the prefilled rows (reorder_cache) against a cache prefilled in that order",
    "beam": "; the beam path compares beam search with and without the cache instead",
    "padded_generate": "; the padded_generate path compares generate() on left-padded rows with and without the cache instead",
}


class ReproError(ValueError):
    """The cell or check cannot be reproduced by a standalone script."""


def repro_script(cell: Cell, check: str = "parity") -> str:
    """The standalone script text for ``check`` on ``cell`` (synthetic cells on the CPU)."""
    spec = cell.spec
    if check not in REPRO_CHECKS:
        raise ReproError(f"{cell.id}: no standalone repro for check {check!r}; available: {', '.join(REPRO_CHECKS)} (a crash of any check reproduces with parity)")
    if spec.source != "synthetic":
        raise ReproError(f"{cell.id}: repro scripts rebuild synthetic (random-weight) models; {spec.source} models are loaded from {spec.location} with from_pretrained")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from kvconform.build.architecture_table import architecture_table
    from kvconform.build.synthetic import ZERO_INIT_STD, shrink_config

    config = shrink_config(spec.location, spec.config)
    sub_config = (architecture_table().get("build_from_sub_config") or {}).get(config.model_type)
    known = known_failure(spec.xfail, check, cell.dtype, cell.cache, cell.attn)
    expectation = f"Expected ({known.kind}): {known.reason}" if known else "No known failure is recorded for this cell."
    settings, tolerance = spec.settings, cell.tolerance
    return _TEMPLATE.format(
        cell_id=cell.id, check=check, expectation=_wrap(expectation), dtype=cell.dtype, seed=settings.seed,
        batch=settings.batch_size, prompt=settings.prompt_length, steps=settings.decode_steps, cache=cell.cache, attn=cell.attn,
        atol=tolerance.atol, rtol=tolerance.rtol, config_json=config.to_json_string(),
        sub_config=sub_config, model_class=_class_name(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]),
        zero_init_std=ZERO_INIT_STD,
        path_note=PATH_NOTES.get(check, ""),
    )


def _class_name(model_class: Any) -> str:
    """The name of a model class looked up in transformers' (loosely typed) auto mapping."""
    return str(model_class.__name__)


def _wrap(text: str, width: int = 100) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text.replace('"""', "'''"), width))


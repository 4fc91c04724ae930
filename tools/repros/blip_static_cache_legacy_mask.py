"""BLIP (transformers 5.0-5.8): the text decoder builds its own mask for the tokens seen and cannot read a StaticCache.

transformers 5.8.1, modeling_blip_text.py. BlipTextModel.forward makes its self-attention mask itself
(get_extended_attention_mask, :486-538, called at :610): from a 2-D mask it builds a causal mask as wide as that mask,
the tokens seen (`past_key_values_length = ... get_seq_length()`, :603; an all-ones mask of that width when none is
given, :605-606), and it refuses any other mask: "Wrong shape for input_ids ... or attention_mask" (:535-537). A
StaticCache hands attention its preallocated max_cache_len keys, so:
- generate(cache_implementation="static") on BlipForConditionalGeneration, which hands the prompt and the image's states to
  self.text_decoder.generate (modeling_blip.py:935-943), raises ValueError at the prefill: for a compileable cache
  generate() converts the 2-D mask into the 4-D one the StaticCache needs (generation/utils.py:555-575), which BLIP refuses;
- a forward with the 2-D mask adds a mask as wide as the tokens seen to scores over max_cache_len keys (:184):
  RuntimeError "The size of tensor a (max_cache_len) must match the size of tensor b (tokens seen)".
(5.0.0: the same code at modeling_blip_text.py:538-590, :665, :672, :196.) 5.9 builds the masks with
create_causal_mask / create_bidirectional_mask (modeling_blip_text.py:539-560 in 5.9.0): the StaticCache forward then
equals the dynamic one, and the image's generate() meets the next bug, the cross-attention K/V written into the
self-attention layers (blip_static_cache_cross_attention_into_self_layers.py, IndexError). The dynamic cache runs.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import BlipConfig, BlipForConditionalGeneration, DynamicCache, StaticCache

TRANSFORMERS = "<5.9"  # 5.9 builds the masks with create_causal_mask (tests/test_repros.py skips it elsewhere)

torch.manual_seed(0)
config = BlipConfig(
    text_config={"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "intermediate_size": 128, "max_position_embeddings": 64, "bos_token_id": 255, "sep_token_id": 102,
                 "pad_token_id": 0},
    vision_config={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                   "image_size": 32, "patch_size": 8},
)
model = BlipForConditionalGeneration(config).eval()
pixel_values = torch.randn(2, 3, 32, 32)
# As BlipProcessor writes a prompt: [CLS] text [SEP]; generate() puts [DEC] (bos) first and drops the [SEP].
prompt = torch.cat([torch.full((2, 1), 101), torch.randint(110, 250, (2, 5)), torch.full((2, 1), 102)], dim=1)


def generate(cache_implementation: str | None) -> str:
    try:
        with torch.no_grad():
            model.generate(pixel_values=pixel_values, input_ids=prompt, attention_mask=torch.ones_like(prompt),
                           max_new_tokens=4, min_new_tokens=4, do_sample=False, cache_implementation=cache_implementation)
        return "runs"
    except (ValueError, RuntimeError, IndexError) as exc:
        return f"raises {type(exc).__name__}: {exc}"


runs = {impl: generate(impl) for impl in (None, "static")}
for impl, result in runs.items():
    print(f"generate(pixel_values, prompt, cache_implementation={impl}): {result}")
refused = "Wrong shape for input_ids" in runs["static"]

# The decoder as generate() drives it, with the 2-D mask of the prompt it has seen: with the image's states, and without
# (no cross-attention: from 5.9 the StaticCache forward equals the dynamic one).
decoder_prompt = prompt[:, :-1].clone()
decoder_prompt[:, 0] = config.text_config.bos_token_id
with torch.no_grad():
    image_states = model.vision_model(pixel_values=pixel_values)[0]
mismatch = False
for name, extra in (("with the image's states", {"encoder_hidden_states": image_states}), ("text only", {})):
    inputs = {"input_ids": decoder_prompt, "attention_mask": torch.ones_like(decoder_prompt), "use_cache": True, **extra}
    try:
        with torch.no_grad():
            dynamic = model.text_decoder(**inputs, past_key_values=DynamicCache()).logits
            static = model.text_decoder(**inputs, past_key_values=StaticCache(config=config.text_config, max_cache_len=10)).logits
        result = f"runs, max |static - dynamic logits| {float((static - dynamic).abs().max()):.3g}"
        mismatch |= not torch.allclose(static, dynamic, atol=1e-5, rtol=1e-4)
    except RuntimeError as exc:
        result, mismatch = f"raises RuntimeError: {exc}", mismatch or "must match the size of tensor b" in str(exc)
    except IndexError as exc:  # 5.9+: the masks are right; the image's K/V then overrun the self-attention slots
        result = f"raises IndexError (the cross-attention K/V written into the self-attention layers): {exc}"
    print(f"text_decoder forward {name}, StaticCache(max_cache_len=10), 2-D mask of {decoder_prompt.shape[1]} tokens: {result}")
sys.exit(1 if runs[None] == "runs" and (refused or mismatch) else 0)

"""Idefics2, Idefics3 and SmolVLM up to transformers 5.3: generate(use_cache=False) drops the image after the first step.

transformers 5.3.0: their prepare_inputs_for_generation sets pixel_values and pixel_attention_mask to None on every step
but the first (``if image_hidden_states is not None or not is_first_iteration``: modeling_idefics2.py:1161,
modeling_idefics3.py:935, modeling_smolvlm.py:908; :1162, :933, :906 in 5.0.0), which is right only when the image's
tokens are in the cache. Without a cache each step re-runs the whole sequence, and from the second generated token on it
runs with the image placeholders' text embeddings instead of the image (the image's hidden states are not carried either).
5.4.0 drops them only ``if ... (use_cache and not is_first_iteration)`` (modeling_idefics3.py:905 in 5.4.0). kvconform
sees it as cached and uncached generate() (greedy and beam) parting at generated token 1; the cached run is the right one.
Exit 1 when the bug reproduces for any of the three. Needs only torch and transformers (random weights).
"""
import sys

import torch
from transformers import AutoConfig, AutoModelForImageTextToText

TRANSFORMERS = "<5.4"

VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "patch_size": 8,
          "image_size": 32}
TEXT = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2}
IMAGE = 255
CONFIGS = {
    "idefics2": {"vision_config": VISION, "text_config": {**TEXT, "model_type": "mistral"},
                 "perceiver_config": {"hidden_size": 64, "resampler_n_latents": 4, "resampler_depth": 1, "resampler_n_heads": 4,
                                      "resampler_head_dim": 16, "num_key_value_heads": 2}},
    "idefics3": {"vision_config": VISION, "text_config": {**TEXT, "model_type": "llama"}, "scale_factor": 2},
    "smolvlm": {"vision_config": VISION, "text_config": {**TEXT, "model_type": "llama"}, "scale_factor": 2},
}
#: image tokens per image: the perceiver's latents (idefics2); (32 / 8) ** 2 patches / scale_factor ** 2 (the others)
TOKENS = {"idefics2": 4, "idefics3": 4, "smolvlm": 4}

failed = []
for model_type, values in CONFIGS.items():
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, image_token_id=IMAGE, tie_word_embeddings=False, **values)
    model = AutoModelForImageTextToText.from_config(config).eval()
    prompt = torch.cat([torch.randint(3, 200, (1, 2)), torch.full((1, TOKENS[model_type]), IMAGE), torch.randint(3, 200, (1, 4))], dim=1)
    image = {"pixel_values": torch.randn(1, 1, 3, 32, 32), "pixel_attention_mask": torch.ones(1, 1, 32, 32, dtype=torch.bool)}
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "num_beams": 1, "output_logits": True,
                "return_dict_in_generate": True, "suppress_tokens": [IMAGE]}
    with torch.no_grad():
        worst = {}
        for use_cache in (True, False):
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=use_cache, **image, **settings)
            # one uncached pass over the sequence it generated, with the image: what each step's logits must be
            reference = model(input_ids=out.sequences, **image, use_cache=False).logits
            worst[use_cache] = max(float((logits - reference[:, prompt.shape[1] - 1 + k]).abs().max())
                                   for k, logits in enumerate(out.logits))
    bad = worst[False] > 1e-3 and worst[True] < 1e-4
    print(f"{model_type}: generate(use_cache=True) max |Δlogit| to one pass over its sequence with the image {worst[True]:.2e}; "
          f"generate(use_cache=False) {worst[False]:.2e}{' (the image dropped)' if bad else ''}")
    if bad:
        failed.append(model_type)
sys.exit(1 if failed else 0)

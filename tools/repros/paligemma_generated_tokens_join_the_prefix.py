"""PaliGemma up to transformers 5.17: generate() extends token_type_ids by repeating the prompt's last value (0, the
bidirectional prefix), so an uncached generate() re-runs every generated token as part of the prefix.

transformers 5.17.0: PaliGemmaForConditionalGeneration has no _update_model_kwargs_for_generation of its own, and the
generic one (generation/utils.py) repeats the last token_type_ids column; the prefix-LM mask then lets earlier
generated tokens attend to later ones in a use_cache=False run (each step re-runs the whole sequence). The cached run,
whose earlier tokens are in the cache, does not re-run them. 5.18.0 appends 1 for each generated token
(modeling_paligemma.py:386-404 in 5.18.0). kvconform sees it as cached and uncached beam search returning the same
beams with other scores. Exit 1 when the bug reproduces. Needs only torch and transformers (random weights).
"""
import sys

import torch
from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

TRANSFORMERS = "<5.18"

torch.manual_seed(0)
config = PaliGemmaConfig(
    vision_config={"model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "image_size": 32, "patch_size": 8, "projection_dim": 64},
    text_config={"model_type": "gemma", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64},
    image_token_index=250, projection_dim=64,
)
config.vision_config.projection_dim = 64
model = PaliGemmaForConditionalGeneration(config).eval()
images = 16  # (32 / 8) ** 2 patches
prompt = torch.cat([torch.full((1, images), 250), torch.randint(3, 200, (1, 4))], dim=1)
pixels = torch.randn(1, 3, 32, 32)
types = torch.zeros_like(prompt)  # the processor's prefix: all 0
settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "num_beams": 1, "output_logits": True,
            "return_dict_in_generate": True, "suppress_tokens": [250]}
with torch.no_grad():
    worst = {}
    for use_cache in (True, False):
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), pixel_values=pixels,
                             token_type_ids=types, use_cache=use_cache, **settings)
        sequence = out.sequences
        marks = torch.ones_like(sequence)
        marks[:, : prompt.shape[1]] = 0  # a generated token is in the causal suffix
        reference = model(input_ids=sequence, pixel_values=pixels, token_type_ids=marks, use_cache=False).logits
        worst[use_cache] = max(float((logits - reference[:, prompt.shape[1] - 1 + k]).abs().max())
                               for k, logits in enumerate(out.logits))
print(f"generate(use_cache=True): max |Δlogit| to a pass with the generated tokens in the suffix {worst[True]:.2e}")
print(f"generate(use_cache=False): max |Δlogit| to the same pass {worst[False]:.2e}")
sys.exit(1 if worst[False] > 1e-3 and worst[True] < 1e-4 else 0)

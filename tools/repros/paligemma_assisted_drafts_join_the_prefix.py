"""PaliGemma: assisted generate() verifies its first drafts as part of the bidirectional prefix, so the prompt's
positions attend to the draft tokens after them and the first generated token's logits leave greedy's.

transformers 5.24.0: _assisted_decoding sizes token_type_ids for the candidate forward with _prepare_token_type_ids
(generation/utils.py:4067), which repeats the last column (candidate_generator.py:1744-1759): the prompt's 0, the
prefix type. PaliGemma's prefill mask makes every type-0 position attend to every other both ways
(modeling_paligemma.py:241-243, block_sequence_ids), so the first forward, the prompt plus the drafts, lets the prompt's
last position see the drafts; greedy generate() appends 1 for each generated token (modeling_paligemma.py:378-386).
kvconform sees it as the assisted check's logits leaving the uncached reference at generated token 0 while the tokens
may still agree. Exit 1 when the bug reproduces. Needs only torch and transformers (random weights).
"""
import sys

import torch
from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

TRANSFORMERS = ">=5.0"

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
model.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant")
images = 16  # (32 / 8) ** 2 patches
prompt = torch.cat([torch.full((1, images), 250), torch.randint(3, 200, (1, 4))], dim=1)
pixels = torch.randn(1, 3, 32, 32)
types = torch.zeros_like(prompt)  # the processor's prefix: all 0
settings = {"max_new_tokens": 6, "do_sample": False, "num_beams": 1, "output_logits": True,
            "return_dict_in_generate": True, "suppress_tokens": [250]}
with torch.no_grad():
    worst = {}
    for name, extra in (("greedy", {}), ("assisted", {"assistant_model": model})):
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), pixel_values=pixels,
                             token_type_ids=types, **settings, **extra)
        sequence = out.sequences
        marks = torch.ones_like(sequence)
        marks[:, : prompt.shape[1]] = 0  # a generated token is in the causal suffix
        reference = model(input_ids=sequence, pixel_values=pixels, token_type_ids=marks, use_cache=False).logits
        worst[name] = float((out.logits[0] - reference[:, prompt.shape[1] - 1]).abs().max())
print(f"greedy generate(): first generated token's |Δlogit| to one pass with the generated tokens in the suffix {worst['greedy']:.2e}")
print(f"generate(assistant_model=model): the same {worst['assisted']:.2e}")
sys.exit(1 if worst["assisted"] > 1e-3 and worst["greedy"] < 1e-4 else 0)

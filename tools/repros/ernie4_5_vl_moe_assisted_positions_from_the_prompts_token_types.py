"""Ernie 4.5 VL MoE in transformers 5.0-5.1: assisted generate() raises on an image prompt: the verification forward's
3-D positions are recomputed from the prompt's mm_token_type_ids, which the drafts do not extend.

transformers 5.1.0: Ernie4_5_VL_MoeForConditionalGeneration.prepare_inputs_for_generation recomputes the position ids at
every call from model_inputs["mm_token_type_ids"] (modeling_ernie4_5_vl_moe.py:1766-1775), and _assisted_decoding's
candidate forward, the prompt plus the first drafts, gets the prompt's mm_token_type_ids unextended (only token_type_ids
are resized for the candidates, _prepare_token_type_ids): the rope index masks the longer ids with the shorter types and
raises IndexError ("The shape of the mask [15] at index 0 does not match the shape of the indexed tensor [14]"); greedy
generate() runs. A text-only prompt does not reach the image branch. 5.2 takes the positions generate() prepares
(_prepare_position_ids_for_generation) and the call runs. Exit 1 when the bug reproduces. Needs only torch and
transformers (random weights, no download).
"""
import sys

import torch
from transformers import Ernie4_5_VL_MoeConfig, Ernie4_5_VL_MoeForConditionalGeneration

TRANSFORMERS = "<5.2"

torch.manual_seed(0)
text = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": [32, 32],
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "moe_num_experts": 4, "moe_k": 2,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default", "mrope_section": [3, 3, 2]}}
vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2}
config = Ernie4_5_VL_MoeConfig(text_config=text, vision_config=vision, image_token_id=250, image_start_token_id=251,
                               image_end_token_id=252, video_token_id=253, video_start_token_id=254, video_end_token_id=255)
model = Ernie4_5_VL_MoeForConditionalGeneration(config).eval()
model.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant")
grid = torch.tensor([[1, 4, 4]])  # one 56 x 56 image: 4 x 4 patches of 14, merged 2 x 2 into 4 image tokens
pixels = torch.randn(16, 3 * 14 * 14)  # what its image processor returns for it: [patches, channels x 14 x 14]
text_ids = torch.randint(3, 200, (1, 8), generator=torch.Generator().manual_seed(0))
prompt = torch.cat([text_ids[:, :2], torch.tensor([[251, 250, 250, 250, 250, 252]]), text_ids[:, 2:]], dim=1)
types = (prompt == 250).long()  # the processor's mm_token_type_ids: 1 at the image tokens
kwargs = {"attention_mask": torch.ones_like(prompt), "mm_token_type_ids": types, "pixel_values": pixels,
          "image_grid_thw": grid, "max_new_tokens": 6, "do_sample": False}
with torch.no_grad():
    greedy = model.generate(prompt, **kwargs)
    print(f"greedy generate(): {greedy.shape[1] - prompt.shape[1]} tokens")
    try:
        assisted = model.generate(prompt, assistant_model=model, **kwargs)
    except IndexError as exc:
        print(f"generate(assistant_model=model) raised IndexError: {exc}")
        sys.exit(1)
print(f"generate(assistant_model=model): {assisted.shape[1] - prompt.shape[1]} tokens, the same as greedy's: "
      f"{torch.equal(assisted, greedy)}")
sys.exit(0)

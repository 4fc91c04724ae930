"""NemotronH Omni: generate() with an image decodes through NemotronH's Mamba2 step, which skips the scan's dt clamp.

transformers 5.24.0: the vision-language model hands the merged prompt to its NemotronH language model
(modeling_nemotron_h_omni.py:472), whose Mamba2 mixer clamps dt to time_step_limit = (time_step_min, inf) in the
chunked scan of a prompt (modeling_nemotron_h.py:296, dt_limit passed at :597) but applies softplus only in the
one-token decode step (modeling_nemotron_h.py:231-232; its call at :566-577 passes no dt_limit). Every cached decode
step so leaves the uncached pass over the same tokens, and the gap grows with the steps; with the floor set to 0 the two
agree to float32 rounding. The same bug as nemotron_h's and zamba2's parity labels of the causal matrix. It shows
where a step's softplus(dt) falls below the floor: with weights of std 0.15 (initializer_range, as the suite's shrunk
builds), not with the default 0.02, under which every dt stays above it and both paths agree.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import NemotronH_Omni_Reasoning_V3, NemotronH_Omni_Reasoning_V3_Config

TRANSFORMERS = "<5.25"  # 5.25 passes dt_limit to the decode step too (exits 0 on 5.25.0; tests/test_repros.py skips it there)

IMAGE_TOKEN = 250
torch.manual_seed(0)
text = {"vocab_size": 256, "hidden_size": 64, "layers_block_type": ["linear_attention", "moe", "full_attention", "moe"],
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
        "moe_intermediate_size": 64, "moe_shared_expert_intermediate_size": 64, "ssm_state_size": 16, "mamba_num_heads": 8,
        "mamba_n_groups": 2, "mamba_head_dim": 16, "mamba_chunk_size": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "initializer_range": 0.15}
vision = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "patch_size": 16, "image_size": 64,
          "max_img_size": 64, "num_cls_tokens": 2, "num_registers": 1, "video_temporal_patch_size": 2}
config = NemotronH_Omni_Reasoning_V3_Config(text_config=text, vision_config=vision, vision_hidden_size=64,
                                            projector_hidden_size=64, image_token_id=IMAGE_TOKEN)
model = NemotronH_Omni_Reasoning_V3(config).eval()
# What its image processor makes of a 64 x 64 image: 4 x 4 patches of 3 x 16 x 16 values, 2 x 2 image tokens after the
# pixel shuffle (downsample_ratio 0.5).
pixel_values = torch.randn(2 * 16, 3 * 16 * 16)
image_grid_hw = torch.tensor([[4, 4], [4, 4]])
prompt = torch.cat([torch.randint(3, 200, (2, 2)), torch.full((2, 4), IMAGE_TOKEN), torch.randint(3, 200, (2, 4))], dim=1)


def worst_gap() -> float:
    """max |Δlogit| of generate()'s cached steps against one uncached pass over the prompt and its tokens."""
    with torch.no_grad():
        out = model.generate(input_ids=prompt, pixel_values=pixel_values, image_grid_hw=image_grid_hw, max_new_tokens=8,
                             min_new_tokens=8, do_sample=False, output_logits=True, return_dict_in_generate=True,
                             suppress_tokens=[IMAGE_TOKEN])
        reference = model(input_ids=out.sequences, pixel_values=pixel_values, image_grid_hw=image_grid_hw,
                          use_cache=False).logits
    start = prompt.shape[1] - 1
    return max(float((logits - reference[:, start + k]).abs().max()) for k, logits in enumerate(out.logits))


clamped = worst_gap()
print(f"published dt floor (time_step_min {config.text_config.time_step_min}): max |Δlogit| {clamped:.2e}")
mixers = [module for module in model.modules() if hasattr(module, "time_step_limit")]
for mixer in mixers:
    mixer.time_step_limit = (0.0, float("inf"))  # the scan's clamp becomes a no-op, as the decode step has it
unclamped = worst_gap()
print(f"floor 0 in {len(mixers)} Mamba2 mixer(s): max |Δlogit| {unclamped:.2e}")
sys.exit(1 if clamped > 1e-4 and unclamped < 2e-5 else 0)

"""Qwen2-VL: a cached text-only sequence decoded after an image sequence reuses the image's rope_deltas.

transformers 5.24.0, modeling_qwen2_vl.py:1093-1116 (Qwen2VLModel.compute_3d_position_ids): the model keeps
`self.rope_deltas` from the last multimodal prefill. A new text-only prefill (cache length 0, no image_grid_thw)
neither recomputes nor clears it (position_ids stay None there), and every later decode step of that new
sequence takes `cache_length + self.rope_deltas`: the previous sequence's image offset. generate() is not
affected (_prepare_position_ids_for_generation, :1364-1367, resets rope_deltas to zeros for text-only
prompts); a hand-written forward loop on a shared model is.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import inspect
import sys

import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

torch.manual_seed(0)
config = Qwen2VLConfig(
    text_config=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.15,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}),
    vision_config=dict(depth=2, embed_dim=64, hidden_size=64, num_heads=4, patch_size=8, spatial_merge_size=2,
                       temporal_patch_size=2, in_channels=3),
    image_token_id=255, video_token_id=254, vision_start_token_id=253, vision_end_token_id=252,
)
model = Qwen2VLForConditionalGeneration(config).eval()


def cached_decode(prompt, steps=4, **image):
    """Prefill with a fresh cache, then one token per step (greedy); returns the sequence and per-step logits."""
    out = model(input_ids=prompt, use_cache=True, **image)
    # The cache argument and output are `cache` from transformers 5.24 on, `past_key_values` before.
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache, logits, ids = getattr(out, keyword), [out.logits[:, -1]], prompt
    for _ in range(steps):
        token = logits[-1][:, :250].argmax(-1, keepdim=True)
        ids = torch.cat([ids, token], 1)
        out = model(input_ids=token, use_cache=True, **{keyword: cache})
        cache = getattr(out, keyword)
        logits.append(out.logits[:, -1])
    return ids, logits


def worst_delta(ids, logits, prompt_length):
    reference = model(input_ids=ids, use_cache=False).logits[:, prompt_length - 1:]
    return max(float((step - reference[:, k]).abs().max()) for k, step in enumerate(logits))


text = torch.randint(3, 250, (1, 6))
with torch.no_grad():
    ids, logits = cached_decode(text)
    fresh = worst_delta(ids, logits, 6)
    # An image sequence: 4 x 4 patches merged 2 x 2 -> 4 image tokens (rope_deltas -2).
    image_prompt = torch.cat([text[:, :2], torch.full((1, 4), 255), text[:, 2:]], 1)
    pixels = torch.randn(16, 3 * 2 * 8 * 8)
    cached_decode(image_prompt, pixel_values=pixels, image_grid_thw=torch.tensor([[1, 4, 4]]),
                  mm_token_type_ids=(image_prompt == 255).int())
    print("rope_deltas left on the model:", model.model.rope_deltas.tolist())
    ids, logits = cached_decode(text)
    after = worst_delta(ids, logits, 6)
print(f"text-only cached decode vs one uncached pass: max |Δlogit| {fresh:.2e} on a fresh model, {after:.2e} after an image sequence")
sys.exit(1 if after > 1e-3 and fresh < 1e-3 else 0)

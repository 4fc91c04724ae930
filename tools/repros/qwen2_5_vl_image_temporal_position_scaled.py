"""Qwen2.5-VL in transformers 5.3-5.4: a still image's temporal rotary position is its start position times
tokens_per_second, so the rope_deltas decoding continues from disagree with the positions of the prompt's own text.

transformers 5.4.0: get_rope_index gives every image time_interval = tokens_per_second * second_per_grid_t
(modeling_qwen2_5_vl.py:1120; :1173 in 5.3.0) and get_vision_position_ids sets the temporal position to
start_position * time_interval (:1018-1019; :1071-1072 in 5.3.0). The text after the image continues from the image's
height/width extent, but rope_deltas is the largest position + 1 - length (:1131), so once the image starts later than
its grid is wide (start * tokens_per_second > start + grid) every cached decode step is numbered past what one pass over
the same sequence gives the same token. One generate() call is not affected (it numbers its steps from the prompt's
position_ids, :1576-1612), but generate() continued from the cache a previous call returned (a chat's next turn: positions
= text positions + rope_deltas, :1585-1587) and a forward loop without position_ids (compute_3d_position_ids, :1252 in 5.4.0, :1302 in 5.3.0) are: their
logits leave one long generate()'s and one pass over the same sequence. 5.5 applies the temporal interval to videos
only (time_interval = 1 for images, modeling_qwen2_5_vl.py:1122-1125 in 5.5.4, upstream issue #45325). 5.0-5.2 computed the
index another way and agree. Exit 1 when the bug reproduces. Needs only torch and transformers (random weights).
"""
import inspect
import sys

import torch
import transformers
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

TRANSFORMERS = ">=5.3,<5.5"

IMAGE, VIDEO, START, END = 255, 254, 253, 252
torch.manual_seed(0)
config = Qwen2_5_VLConfig(
    text_config=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.15,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}),
    vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, out_hidden_size=64, patch_size=8,
                       spatial_merge_size=2, temporal_patch_size=2, in_channels=3, window_size=16, fullatt_block_indexes=[1],
                       tokens_per_second=2),  # the published checkpoints' value (Qwen2.5-VL-3B/7B/72B config.json)
    image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END,
)
model = Qwen2_5_VLForConditionalGeneration(config).eval()
# A 32x32 image: 4x4 patches of 8, merged 2x2 into 4 tokens (grid 1x4x4); placed after 8 text tokens, as a chat
# template's system prompt puts it.
grid = torch.tensor([[1, 4, 4]])
pixels = torch.randn(16, 3 * 2 * 8 * 8)
text = torch.randint(3, 200, (1, 8), generator=torch.Generator().manual_seed(0))
prompt = torch.cat([text, torch.tensor([[START, IMAGE, IMAGE, IMAGE, IMAGE, END]]), text[:, :3]], dim=1)
image = {"pixel_values": pixels, "image_grid_thw": grid}
if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # 5.3+: the processor returns the modality ids
    image["mm_token_type_ids"] = (prompt == IMAGE).int()
settings = {"do_sample": False, "output_logits": True, "return_dict_in_generate": True,
            "suppress_tokens": [IMAGE, VIDEO, START, END]}


def inputs(ids):
    """The image inputs for ``ids`` (the modality ids extended over the generated text)."""
    return {**image, **({"mm_token_type_ids": (ids == IMAGE).int()} if "mm_token_type_ids" in image else {})}


with torch.no_grad():
    whole = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **inputs(prompt),
                           max_new_tokens=6, min_new_tokens=6, **settings)
    first = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **inputs(prompt),
                           max_new_tokens=3, min_new_tokens=3, **settings)
    cache = first.past_key_values
    ids = first.sequences
    # the image is in the cache: the continued call gives the sequence only
    then = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                          max_new_tokens=3, min_new_tokens=3, **settings)
    continued = max(float((a - b).abs().max()) for a, b in zip(then.logits, whole.logits[3:], strict=True))
    # a forward loop without position_ids: the prefill with the image, then the model's own rope_deltas
    model.model.rope_deltas = None
    out = model(input_ids=prompt, **inputs(prompt), use_cache=True)
    loop_cache, loop = out.past_key_values, []
    for token in whole.sequences[0, prompt.shape[1]:]:
        out = model(input_ids=token.view(1, 1), past_key_values=loop_cache, use_cache=True)
        loop.append(out.logits[:, -1])
    reference = model(input_ids=whole.sequences, **inputs(whole.sequences), use_cache=False).logits
    stepped = max(float((a - reference[:, prompt.shape[1] + k]).abs().max()) for k, a in enumerate(loop[:-1]))
new = prompt.shape[1]
print(f"transformers {transformers.__version__}")
print(f"one generate() of 6 tokens: {whole.sequences[:, new:].tolist()}; 3 continued for 3 from the cache it returned: "
      f"{then.sequences[:, new:].tolist()} (max |Δlogit| of the continued steps {continued:.2e})")
print(f"a forward loop without position_ids vs one pass over the same sequence: max |Δlogit| {stepped:.2e}")
sys.exit(1 if continued > 1e-3 else 0)

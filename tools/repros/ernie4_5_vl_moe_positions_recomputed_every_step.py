"""Ernie 4.5 VL MoE in transformers 5.0-5.1: prepare_inputs_for_generation recomputes the 3-D positions at every step
from the prompt's mm_token_type_ids, and a cached forward after the prefill is given one position whatever its length.

transformers 5.1.0: Ernie4_5_VLMoeForConditionalGeneration.prepare_inputs_for_generation calls
self.model.get_position_ids(...) on every step (modeling_ernie4_5_vl_moe.py:1766-1775, the same lines in 5.0.0) with generate()'s attention mask
and the prompt-length mm_token_type_ids generate() never extends; whenever that reaches get_rope_index
(:1476-1482, :1197) it indexes mm_token_type_ids with the mask: generate(use_cache=False) with an
image raises IndexError at its second step (the mask has grown by the generated token), and
generate(cache_implementation="static") at its first (the static path hands it a 4-D mask), leaving on the model the
StaticCache it made (generation/utils.py:1866-1874), whose layers were never written: the next static generate() on the
model raises AttributeError reading its max_batch_size. After the prefill
get_position_ids numbers a cached forward as ONE token (seq_length = 1, :1487, :1489), so a multi-token forward on the cache
(a prefix extended by 2 tokens, as assisted decoding's verification) gives its tokens one position. 5.2 prepares the
positions once (_prepare_position_ids_for_generation, :1713 in 5.2.0) and passes them on. Exit 1 when any reproduces. Needs only torch
and transformers (random weights).
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

TRANSFORMERS = "<5.2"

IMAGE_START, IMAGE_END, IMAGE = 255, 254, 253
torch.manual_seed(0)
config = AutoConfig.for_model(
    "ernie4_5_vl_moe",
    vision_config={"depth": 2, "hidden_size": 64, "hidden_act": "quick_gelu", "num_heads": 4, "in_channels": 3, "patch_size": 8,
                   "spatial_merge_size": 2, "intermediate_size": 128, "temporal_merge_size": 2, "initializer_range": 0.15},
    text_config={"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "max_position_embeddings": 64, "initializer_range": 0.15, "use_bias": False,
                 "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default", "mrope_section": [3, 3, 2]},
                 "mlp_layer_types": ["dense", "sparse"], "moe_intermediate_size": [64, 64], "moe_k": 2, "moe_num_experts": 4,
                 "moe_num_shared_experts": 1},
    image_start_token_id=IMAGE_START, image_end_token_id=IMAGE_END, image_token_id=IMAGE, video_start_token_id=252,
    video_end_token_id=251, video_token_id=250, tie_word_embeddings=True,
)
model = AutoModelForImageTextToText.from_config(config).eval()
# one 32x64 image per row: a 4x8 grid of 8-pixel patches, merged 2x2 into 8 tokens
text = torch.randint(3, 200, (2, 7), generator=torch.Generator().manual_seed(0))
prompt = torch.cat([text[:, :2], torch.full((2, 1), IMAGE_START), torch.full((2, 8), IMAGE), torch.full((2, 1), IMAGE_END),
                    text[:, 2:]], dim=1)
image = {"pixel_values": torch.randn(64, 3 * 8 * 8), "image_grid_thw": torch.tensor([[1, 4, 8], [1, 4, 8]]),
         "mm_token_type_ids": (prompt == IMAGE).int()}
settings = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "suppress_tokens": list(range(250, 256))}
print(f"transformers {transformers.__version__}")
bad = []
with torch.no_grad():
    for name, extra in (("generate(use_cache=False)", {"use_cache": False}),
                        ("generate(cache_implementation='static')", {"cache_implementation": "static"})):
        try:
            model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **image, **settings, **extra)
            print(f"{name}: runs")
        except IndexError as exc:
            print(f"{name} with an image raised IndexError: {exc}")
            bad.append(name)
    if "generate(cache_implementation='static')" in bad:  # the StaticCache it left on the model, never written
        try:
            model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **image, **settings, cache_implementation="static")
        except AttributeError as exc:
            print(f"generate(cache_implementation='static') again on the same model raised AttributeError: {exc}")
    # a prefix extended by 2 tokens at once on the cache, against one pass over the whole sequence
    more = torch.randint(3, 200, (2, 2), generator=torch.Generator().manual_seed(1))
    model.model.rope_deltas = None
    out = model(input_ids=prompt, **image, use_cache=True)
    extended = model(input_ids=more, past_key_values=out.past_key_values, use_cache=True,
                     cache_position=torch.arange(prompt.shape[1], prompt.shape[1] + 2)).logits
    whole = torch.cat([prompt, more], dim=1)
    model.model.rope_deltas = None
    reference = model(input_ids=whole, **{**image, "mm_token_type_ids": (whole == IMAGE).int()}, use_cache=False).logits[:, -2:]
    delta = float((extended - reference).abs().max())
    print(f"2 tokens at once on the prefilled cache vs one pass over the sequence: max |Δlogit| {delta:.2e}")
    if delta > 1e-3:
        bad.append("a multi-token cached forward")
sys.exit(1 if bad else 0)

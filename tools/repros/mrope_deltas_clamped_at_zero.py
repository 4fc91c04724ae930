#!/usr/bin/env python3
"""PaddleOCR-VL and Qwen2-VL (transformers 5.2): the multimodal rotary offset is clamped at 0, so decoding after an image drifts.

Expected (model bug): ``get_rope_index`` numbers a prompt's image tokens on a (temporal, height, width) grid, so an
image of h x w merged tokens spans max(h, w) positions, and the text after it continues from the largest one + 1.
``rope_deltas`` = largest position + 1 - prompt length is therefore negative for every image of more than one row of
merged tokens, and the later positions are (cache length + rope_deltas). 5.2.0 rewrote the function and clamps that
offset at zero (modeling_paddleocr_vl.py:1185 in 5.2.0,
``mrope_position_deltas.append(max(llm_positions.max() + 1 - len(total_input_ids[i]), 0))``; 5.1.0 appends it
unclamped, :1180, and so does 5.3.0, :1220). Qwen2-VL's get_rope_index got the same clamp in 5.2.0
(modeling_qwen2_vl.py:1115 in 5.2.0; unclamped at :1091 in 5.1.0 and :1150 in 5.3.0); Qwen2.5-VL, Qwen3-VL, GLM-4V
and the other copies of the function do not clamp in 5.2.0. Every position after the prompt is then too large by the
image's (h x w - max(h, w)): a decode step's query sits that far from the keys the prefill wrote with the right
positions.

generate() reads ``rope_deltas`` when it continues from a cache it returned (a second turn of a chat, or any
generate(past_key_values=...)): PaddleOCRVLForConditionalGeneration._prepare_position_ids_for_generation returns
text positions + rope_deltas (modeling_paddleocr_vl.py:1531-1535 in 5.2.0; Qwen2VLForConditionalGeneration's, modeling_qwen2_vl.py:1546-1548);
so does every forward after the prefill that is given no position_ids (PaddleOCRVLModel.compute_3d_position_ids,
:1273-1283; Qwen2VLModel.compute_3d_position_ids, modeling_qwen2_vl.py:1227-1237). One generate() call is not hurt:
it carries the prefill's position_ids forward by + 1 per step.

Shown here on a PaddleOCR-VL of the published geometry (PaddlePaddle/PaddleOCR-VL: 14-pixel patches merged 2 x 2,
rotary sections over (temporal, height, width)), narrower and shallower, with one 112 x 224-pixel image (8 x 16 patches,
4 x 8 = 32 placeholders, rope_deltas -24; 5.2.0 keeps 0), and on a Qwen2-VL of the published geometry
(Qwen/Qwen2-VL-2B-Instruct: 14-pixel patches, 2 frames a temporal patch, merged 2 x 2, mrope_section [16, 24, 24] of
a 128-wide head), narrower and shallower, with the same image: generate() of 4 tokens continued for 4 more from the
cache it returned, against one generate() of 8 tokens, both greedy with the logits returned.
Exit 1 when either model's continued call's logits leave its single call's, 0 when both agree.
"""
import inspect
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

TRANSFORMERS = ">=5.2,<5.3"  # 5.3 rewrites get_rope_index without the clamp (tests/test_repros.py skips it elsewhere)

IMAGE, VIDEO, START, END = 250, 251, 252, 253  # image ids inside a small vocabulary
H, W = 8, 16  # the image's grid of 14-pixel patches (112 x 224 pixels), merged 2 x 2 into 4 x 8 placeholders


def build_paddleocr_vl():
    config = AutoConfig.for_model(
        "paddleocr_vl",
        text_config={"model_type": "paddleocr_vl_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 256, "initializer_range": 0.15,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [2, 3, 3]}},
        vision_config={"model_type": "paddleocr_vl_vision", "hidden_size": 64, "intermediate_size": 128,
                       "num_hidden_layers": 2, "num_attention_heads": 4},
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END,
    )
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    # As the processor lays a prompt out: text, vision start, the placeholders, vision end, text.
    ids = torch.tensor([[5, 6, START, *[IMAGE] * (H * W // 4), END, 10, 11, 12]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "pixel_values": torch.randn(H * W, 3, 14, 14, generator=torch.Generator().manual_seed(0)),
              "image_grid_thw": torch.tensor([[1, H, W]])}
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # the processor's output from 5.3 on
        inputs["mm_token_type_ids"] = (ids == IMAGE).int()
    return model, inputs


def build_qwen2_vl():
    config = AutoConfig.for_model(
        "qwen2_vl",
        text_config={"model_type": "qwen2_vl_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "max_position_embeddings": 256, "initializer_range": 0.15,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]}},
        vision_config={"model_type": "qwen2_vl", "depth": 2, "embed_dim": 64, "hidden_size": 64, "num_heads": 4},
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END,
    )
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    ids = torch.tensor([[5, 6, START, *[IMAGE] * (H * W // 4), END, 10, 11, 12]])
    # A still image is 2 equal frames per temporal patch: H * W patches of 3 x 2 x 14 x 14 values.
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "pixel_values": torch.randn(H * W, 3 * 2 * 14 * 14, generator=torch.Generator().manual_seed(0)),
              "image_grid_thw": torch.tensor([[1, H, W]])}
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # the processor's output from 5.3 on
        inputs["mm_token_type_ids"] = (ids == IMAGE).int()
    return model, inputs


def continued_against_one_call(name, model, inputs) -> bool:
    """Whether generate() continued from its own cache leaves one generate() over the same tokens."""
    greedy = {"do_sample": False, "pad_token_id": 0, "output_logits": True, "return_dict_in_generate": True}
    one = model.generate(**inputs, max_new_tokens=8, **greedy)
    first = model.generate(**inputs, max_new_tokens=4, **greedy)
    deltas = model.model.rope_deltas.flatten().tolist()
    # The cache returned and taken back is `cache` from transformers 5.24 on, `past_key_values` before; the image is
    # in the cache already, so the continuation passes the whole sequence's ids and the cache only.
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    ids = first.sequences
    second = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4,
                            **{keyword: getattr(first, keyword)}, **greedy)
    logits = torch.stack([*first.logits, *second.logits])
    reference = torch.stack(one.logits)
    gap = (logits - reference).abs().amax(dim=(1, 2))
    print(f"{name}: rope_deltas after the prompt: {deltas} (the image's 4 x 8 placeholders span 8 positions: -24 "
          f"unclamped)")
    print(f"{name}: generate() of 4 tokens continued for 4 from its cache vs one generate() of 8, max |Δlogit| per "
          f"generated token: {[f'{g:.2e}' for g in gap.tolist()]}")
    print(f"{name}: tokens: continued {second.sequences[0, -8:].tolist()}, one call {one.sequences[0, -8:].tolist()}")
    return float(gap.max()) > 1e-4


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    diverged = [continued_against_one_call("PaddleOCR-VL", *build_paddleocr_vl()),
                continued_against_one_call("Qwen2-VL", *build_qwen2_vl())]
    return 1 if any(diverged) else 0


if __name__ == "__main__":
    sys.exit(main())

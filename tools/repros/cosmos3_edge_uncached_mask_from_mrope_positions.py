#!/usr/bin/env python3
"""Cosmos3-Edge's uncached forward with an image and no attention_mask masks like packed sequences in transformers 5.20 (fixed in 5.23).

Cosmos3EdgeTextModel.forward hands the temporal row of its 3-D multimodal rotary positions to
create_causal_mask as position_ids (modeling_cosmos3_edge.py:681-687 in 5.20). Without an attention_mask
and without a cache, create_causal_mask treats position_ids that do not step by 1 as packed sequences
(masking_utils.py:840-845, find_packed_sequence_indices): the image tokens share one temporal position, so
each image token after the first, and the text after the image, starts a new "sequence" that cannot see
the tokens before it. A forward with use_cache=True, or with an all-ones attention_mask, gets the plain causal mask.
5.23 passes no text positions to the mask for 3-row (unpacked) positions. From 5.18 generate() drops an all-ones
attention_mask before the forward (generation/utils.py:2865-2875 in 5.18.0), so generate(use_cache=False) with the
prompt's mask meets it too (5.18-5.22): its first step scores are not one forward's, and cached and uncached greedy
search part at generated token 0 (shown below; 5.16-5.17 pass the mask on, and agree). Exit 1 while the uncached logits
without a mask differ from the same pass with an all-ones mask.
"""
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig

TRANSFORMERS = "<5.23"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SEED, BATCH, GRID = 0, 2, 4
CONFIG_JSON = '{"dtype": "float32", "image_token_id": 19, "model_type": "cosmos3_edge", "projector_hidden_size": 11520, "text_config": {"attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1, "dtype": "float32", "eos_token_id": 11, "head_dim": 16, "hidden_act": "relu2", "hidden_size": 64, "initializer_range": 0.15, "intermediate_size": 128, "max_position_embeddings": 64, "mlp_bias": false, "model_type": "cosmos3_edge_text", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_parameters": {"mrope_section": [3, 2, 3], "rope_theta": 100000000.0, "rope_type": "default"}, "tie_word_embeddings": false, "use_cache": true, "vocab_size": 256}, "tie_word_embeddings": false, "transformers_version": "5.24.0", "video_token_id": 18, "vision_config": {"attention_dropout": 0.0, "dtype": "float32", "hidden_act": "gelu_pytorch_tanh", "hidden_size": 64, "intermediate_size": 128, "layer_norm_eps": 1e-06, "model_type": "cosmos3_edge_vision", "num_attention_heads": 4, "num_channels": 3, "num_hidden_layers": 2, "num_patches": 256, "patch_size": 8, "spatial_merge_size": 2}, "vision_end_token_id": 21, "vision_start_token_id": 20}'
ZERO_INIT_STD = 0.15


def build():
    """A shrunk Cosmos3-Edge with seeded random weights (all-zero weights get seeded noise, as kvconform builds it)."""
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            handle.write(CONFIG_JSON)
        config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    return model.float().eval()


@torch.inference_mode()
def main():
    model = build()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {type(model).__name__}")
    vision = model.config.vision_config
    generator = torch.Generator().manual_seed(SEED + 1)
    width = vision.num_channels * vision.patch_size ** 2  # one temporal patch per image
    pixels = torch.randn(BATCH * GRID * GRID, width, generator=generator)
    grid = torch.tensor([[1, GRID, GRID]] * BATCH)
    image_tokens = GRID * GRID // vision.spatial_merge_size ** 2
    # ids 18-21 are the video, image and vision start/end tokens
    text = torch.randint(22, 200, (BATCH, 6), generator=torch.Generator().manual_seed(SEED))
    placeholders = torch.full((BATCH, image_tokens), model.config.image_token_id)
    ids = torch.cat([text[:, :2], placeholders, text[:, 2:]], dim=1)
    inputs = {"input_ids": ids, "pixel_values": pixels, "image_grid_thw": grid,
              "mm_token_type_ids": (ids == model.config.image_token_id).int()}
    no_mask = model(**inputs, use_cache=False).logits
    with_mask = model(**inputs, use_cache=False, attention_mask=torch.ones_like(ids)).logits
    cached = model(**inputs, use_cache=True).logits
    per_position = (no_mask - with_mask).abs().amax(dim=(0, 2))
    print(f"prompt: 2 text tokens, {image_tokens} image tokens, 4 text tokens")
    print("uncached, no mask vs all-ones mask, max |dlogit| per position:", [f"{d:.3g}" for d in per_position.tolist()])
    print(f"cached prefill vs uncached with the mask: max |dlogit| {float((cached - with_mask).abs().max()):.3g}")
    # The path users run: generate() with the prompt's all-ones mask, with and without the cache.
    expected = with_mask[:, -1].log_softmax(-1)
    runs = {use_cache: model.generate(**inputs, attention_mask=torch.ones_like(ids), use_cache=use_cache, max_new_tokens=3,
                                      do_sample=False, pad_token_id=0, eos_token_id=None, output_scores=True,
                                      return_dict_in_generate=True)
            for use_cache in (True, False)}
    for use_cache, run in runs.items():
        gap = float((run.scores[0].log_softmax(-1) - expected).abs().max())
        print(f"generate(use_cache={use_cache}): tokens {run.sequences[:, -3:].tolist()}, first step's log-probs vs one "
              f"forward with the mask: max |diff| {gap:.3g}")
    return int(float(per_position.max()) > 1e-4)


if __name__ == "__main__":
    sys.exit(main())

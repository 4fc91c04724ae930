#!/usr/bin/env python3
"""Molmo2: a left-padded batch through generate(cache_implementation="static") attends the image causally (5.20-5.22).

Molmo2 lets every image token see every other one: its forward overlays a block on the causal mask from
mm_token_type_ids (block_sequence_ids, modeling_molmo2.py:873-875 in 5.20.2-5.22.2), and so does its
create_masks_for_generate (:1055-1056). With a compileable (static) cache, GenerationMixin.prepare_inputs_for_generation
builds the 4-D mask itself before the forward and hands create_masks_for_generate
``mm_token_type_ids=model_inputs.get("mm_token_type_ids")`` (generation/utils.py:727-740 in 5.20.2-5.22.2), but it
moves only ``token_type_ids`` from kwargs into model_inputs (:704-705), so mm_token_type_ids is None there and the mask
is plain causal; the forward returns a ready 4-D mask as it is (masking_utils.py:796-798, "already prepared 4D mask",
modeling_molmo2.py:864), so the prefill of a padded batch runs with the image tokens attending causally. A dynamic cache
(2-D mask, built in the forward with the block) and an unpadded prompt (generate() drops its all-ones mask,
generation/utils.py:2880-2887 in 5.20.2, so create_masks_for_generate returns no mask and the forward builds it) are
right. 5.23 moves mm_token_type_ids into model_inputs as well (generation/utils.py:703-705 in 5.23.0). The batch is
two image prompts as Molmo2Processor pads them (padding_side="left"): row 1 one text token shorter after the image,
one pad column (attention_mask 0, mm_token_type_ids 0, which create_mm_token_type_ids writes for a pad id,
processing_utils.py:921-951 in 5.22.2). Each row's logits are compared with its own unpadded generate(use_cache=False)
fed the same tokens. Exit 1 while the static-cache batch leaves them, else 0.
"""
import inspect
import sys

import torch
import transformers
from transformers import LogitsProcessor

TRANSFORMERS = ">=5.20,<5.23"  # the releases this bug is in (Molmo2 from 5.20; tests/test_repros.py skips it elsewhere)

SEED, STEPS, PAD, TOLERANCE, ZERO_INIT_STD = 0, 4, 0, 1e-4, 0.15
START, END, PATCH = 256, 257, 258  # <im_start>, <im_end>, <im_patch> past the text vocabulary (additional_vocab_size)
IMAGE_TOKENS, PATCHES = 4, 16  # one 4x4-patch crop per image, pooled 2x2 into 4 tokens


class Forced(LogitsProcessor):
    """Greedy search picks ``tokens[:, k]`` at step k (output_logits still returns the raw logits)."""

    def __init__(self, tokens):
        self.tokens, self.step = tokens, 0

    def __call__(self, input_ids, scores):
        forced = self.tokens[:, self.step : self.step + 1]
        self.step += 1
        return torch.full_like(scores, float("-inf")).scatter(1, forced, 0.0)


def build():
    """A shrunk Molmo2 with seeded random weights (all-zero weights get seeded noise)."""
    from transformers import Molmo2Config, Molmo2ForConditionalGeneration

    small = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "intermediate_size": 128, "initializer_range": 0.15}
    config = Molmo2Config(
        vision_config={**small, "num_hidden_layers": 2, "image_size": [32, 32], "patch_size": 8,
                       "num_position_embeddings": PATCHES},
        adapter_config={**small, "vision_feature_layer": [1, 0], "text_hidden_size": 64},
        text_config={**small, "num_hidden_layers": 2, "vocab_size": 256, "additional_vocab_size": 128,
                     "max_position_embeddings": 64},
        image_start_token_id=START, image_end_token_id=END, image_patch_id=PATCH, low_res_image_start_token_id=260,
        frame_start_token_id=263, frame_end_token_id=264, initializer_range=0.15)
    torch.manual_seed(SEED)
    model = Molmo2ForConditionalGeneration(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() > 1 and param.is_floating_point() and not name.endswith("bias") and not param.any():
                param.copy_(torch.randn(param.shape, generator=generator) * ZERO_INIT_STD)
    return model.float().eval()


def pooling(offset):
    """Each image token pools a 2x2 square of the crop's 4x4 patches (indices into the batch's flattened patches)."""
    return torch.tensor([[r * 4 + c, r * 4 + c + 1, r * 4 + c + 4, r * 4 + c + 5] for r in (0, 2) for c in (0, 2)]) + offset


def prompts(model):
    """Each row's own prompt (text, <im_start>, image tokens, <im_end>, text; row 1 one text token shorter) with its
    image, and the batch Molmo2Processor makes of them: left-padded, masked, mm_token_type_ids 1 on the image's tokens.
    Its pooling indexes the batch's patches before 5.25, each image's own from 5.25 (get_image_features then takes
    image_num_crops and adds each image's offset)."""
    offset = 0 if "image_num_crops" in inspect.signature(model.model.get_image_features).parameters else PATCHES
    text = torch.randint(3, 250, (2, 6), generator=torch.Generator().manual_seed(SEED))
    rows = []
    for row in range(2):
        ids = torch.cat([text[row, :2], torch.tensor([START] + [PATCH] * IMAGE_TOKENS + [END]), text[row, 2 : 6 - row]])[None]
        rows.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                     "mm_token_type_ids": torch.isin(ids, torch.tensor([START, END, PATCH])).long(),
                     "pixel_values": torch.randn(1, PATCHES, 192, generator=torch.Generator().manual_seed(SEED + 1 + row)),
                     "image_token_pooling": pooling(0), "image_grids": torch.tensor([[0, 0, 2, 2]]),
                     "image_num_crops": torch.tensor([1])})
    width = rows[0]["input_ids"].shape[1]

    def left(value, fill):
        return torch.cat([torch.full((1, width - value.shape[1]), fill, dtype=value.dtype), value], dim=1)

    batch = {"input_ids": torch.cat([left(r["input_ids"], PAD) for r in rows]),
             "attention_mask": torch.cat([left(r["attention_mask"], 0) for r in rows]),
             "mm_token_type_ids": torch.cat([left(r["mm_token_type_ids"], 0) for r in rows]),
             "pixel_values": torch.cat([r["pixel_values"] for r in rows]),
             "image_token_pooling": torch.cat([pooling(0), pooling(offset)]),
             "image_grids": torch.cat([r["image_grids"] for r in rows]),
             "image_num_crops": torch.cat([r["image_num_crops"] for r in rows])}
    return rows, batch


def gap(run, row, reference):
    """The largest |logit| difference over the steps between row ``row`` of ``run`` and the one-row ``reference``."""
    return max(float((a[row] - b[0]).abs().max()) for a, b in zip(run.logits, reference.logits, strict=True))


@torch.inference_mode()
def main():
    model = build()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {type(model).__name__}")
    rows, batch = prompts(model)
    print("batch input_ids:", batch["input_ids"].tolist(), "\nbatch attention_mask:", batch["attention_mask"].tolist(),
          "\nbatch mm_token_type_ids:", batch["mm_token_type_ids"].tolist())
    settings = dict(max_new_tokens=STEPS, do_sample=False, output_logits=True, return_dict_in_generate=True,
                    pad_token_id=PAD, eos_token_id=None)
    batched = {cache: model.generate(**batch, cache_implementation=cache, **settings) for cache in ("static", "dynamic")}
    tokens = batched["dynamic"].sequences[:, -STEPS:]
    print("greedy tokens, static:", batched["static"].sequences[:, -STEPS:].tolist(), "dynamic:", tokens.tolist())
    batched["static"] = model.generate(**batch, cache_implementation="static", logits_processor=[Forced(tokens)], **settings)
    worst = 0.0
    for row, own in enumerate(rows):
        reference = model.generate(**own, use_cache=False, logits_processor=[Forced(tokens[row : row + 1])], **settings)
        own_static = model.generate(**own, cache_implementation="static", logits_processor=[Forced(tokens[row : row + 1])],
                                    **settings)

        worst = max(worst, gap(batched["static"], row, reference))
        print(f"row {row} ({'padded' if row else 'unpadded'} in the batch), max |dlogit| over {STEPS} steps vs its own "
              f"unpadded generate(use_cache=False): batch static {gap(batched['static'], row, reference):.3g}, batch "
              f"dynamic {gap(batched['dynamic'], row, reference):.3g}, own unpadded static {gap(own_static, 0, reference):.3g}")
    print(f"worst (batch, static cache): {worst:.3g} (limit {TOLERANCE})")
    return int(worst > TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())

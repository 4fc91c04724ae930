#!/usr/bin/env python3
"""SmolVLM in transformers 5.20: the image merger cuts the image features into blocks of vision_config.patch_size.

transformers 5.20 changes SmolVLMModel.inputs_merger to take its block length from the vision tower's patch size in
pixels, ``patch_size = self.config.vision_config.patch_size`` and ``image_hidden_states.view(-1, patch_size, dim)``, and
to check ``num_image_tokens % patch_size == 0`` (modeling_smolvlm.py:481-496 in 5.20.2); 5.19 took the block length
from the features, ``_, patch_size, _ = image_hidden_states.shape`` (modeling_smolvlm.py:481 in 5.19.0), the image's
tokens per tile. The two agree only where a tile's token count, (image_size / patch_size) ** 2 / scale_factor ** 2, is
a multiple of the patch size (SmolVLM-256M/500M: 64 tokens, patch 16). The published SmolVLM-Instruct and
SmolVLM2-2.2B-Instruct geometry (image_size 384, patch_size 14, scale_factor 3: 81 tokens per tile) is not, and every
forward with an image raises: the view (RuntimeError: shape '[-1, 14, 64]' is invalid) or, where the features fill
whole blocks, ValueError("At least one sample has <image> tokens not divisible by patch_size.") (kvconform's shrunk
tower: 4 tokens per tile, patch 8), so generate() with an image cannot run. 5.21 drops inputs_merger: the forward scatters the features into the
placeholders (get_placeholder_mask, inputs_embeds.masked_scatter, modeling_smolvlm.py:585-588 in 5.21.1).

Here: a SmolVLM with that published vision geometry, narrower and shallower, generate() with one image per prompt.
Exit 1 when it raises that error, 0 when generate() runs and its first step matches one forward of the prompt.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

TRANSFORMERS = ">=5.20,<5.21"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

IMAGE = 250
# SmolVLM-Instruct's vision geometry (image_size 384, patch_size 14, scale_factor 3 -> 81 tokens per tile)
VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "patch_size": 14,
          "image_size": 384}
TEXT = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256}


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = AutoConfig.for_model("smolvlm", text_config=TEXT, vision_config=VISION, scale_factor=3, image_token_id=IMAGE,
                                  pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    tokens = (VISION["image_size"] // VISION["patch_size"]) ** 2 // 3 ** 2
    ids = torch.tensor([[5, 6, *[IMAGE] * tokens, 10, 11], [7, 8, *[IMAGE] * tokens, 12, 13]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "pixel_values": torch.randn(2, 1, 3, 384, 384, generator=torch.Generator().manual_seed(0))}
    print(f"{tokens} image tokens per tile, vision_config.patch_size {VISION['patch_size']}")
    try:
        expected = model(**inputs).logits[:, -1].log_softmax(-1)
        out = model.generate(**inputs, max_new_tokens=2, do_sample=False, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=0, eos_token_id=None)
    except (ValueError, RuntimeError) as error:  # the check, or the view before it when the features do not fill blocks
        if "not divisible by patch_size" not in str(error) and f", {VISION['patch_size']}, " not in str(error):
            raise
        print(f"BUG: a forward with the image raises {type(error).__name__}: {error}")
        return 1
    gap = float((out.scores[0].log_softmax(-1) - expected).abs().max())
    print(f"generate() runs: tokens {out.sequences[:, -2:].tolist()}, first step vs one forward: max |diff| {gap:.2e}")
    return 0 if gap < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())

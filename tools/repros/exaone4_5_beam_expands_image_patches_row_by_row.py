#!/usr/bin/env python3
"""transformers 5.18-5.19: EXAONE 4.5's beam search repeats every image patch row, so each beam sees a scrambled image.

Expected (model bug, transformers 5.18.0-5.19.0): 5.18 drops Exaone4_5ForConditionalGeneration's own
``_expand_inputs_for_generation`` (the 5.8-5.17 bug of exaone4_5_beam_expansion_counts_placeholders_as_images.py) for
generate()'s: a model whose ``input_modalities`` name image or video has its media encoded once before the expansion
(``_maybe_prepare_encoder_kwargs_for_generation``, generation/utils.py:965-970 in 5.19.0) and the encoded images
repeated whole per beam (``_expand_multimodal_outputs``, :1106-1175). EXAONE 4.5's classes declare no
``input_modalities`` in 5.18-5.19 (modeling_exaone4_5.py:634, :802 in 5.19.0), so they keep PreTrainedModel's "text"
(modeling_utils.py:1104): the media are not pre-encoded and the generic expansion repeat_interleaves every tensor on
dim 0 (generation/utils.py:1199-1209), ``pixel_values`` included. Its rows are the processor's flattened patches
(grid_t * grid_h * grid_w rows for all images together), not images: expanded by 3 they become p0 p0 p0 p1 p1 p1 ...,
so the 3 beams of the first prompt read the first third of that list as their image tokens (the first image's patches
at the wrong places) and the later beams other scrambles. generate(num_beams>1) with an image scores and picks
tokens for a different image than the prompt's (num_return_sequences > 1 expands the same way); the cached and
uncached beam searches even disagree, since each beam row's prefill saw a different scramble. 5.20 declares
``input_modalities = ("image", "video", "text")`` on Exaone4_5_Model and Exaone4_5_ForConditionalGeneration
(modeling_exaone4_5.py:634, :812 in 5.20.2). Adding those two lines to a copy of 5.19.0 makes this script exit 0.
Exit 1 when beam search's first-step log-probabilities of a prompt with one image are not the model's own
log-probabilities for that prompt and image (one plain forward), 0 when they are.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

TRANSFORMERS = ">=5.18,<5.20"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

IMAGE = 67  # Exaone4_5_Config.image_token_id's default
BEAMS = 3


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    # The published LGAI-EXAONE/EXAONE-4.5-33B vision geometry (Exaone4_5_VisionConfig defaults: patch_size 14,
    # temporal_patch_size 2, spatial_merge_size 2, window_size 112), narrower and shallower.
    config = AutoConfig.for_model(
        "exaone4_5",
        text_config={"model_type": "exaone4", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                     "max_position_embeddings": 128, "sliding_window": None,
                     "layer_types": ["full_attention", "full_attention"]},
        vision_config={"model_type": "exaone4_5_vision", "depth": 2, "hidden_size": 64, "intermediate_size": 128,
                       "num_heads": 4, "num_key_value_heads": 4, "out_hidden_size": 64, "fullatt_block_indexes": [1]},
    )
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    # One 112 x 112-pixel image per prompt, as the Qwen2-VL image processor flattens it: an 8 x 8 grid of 14-pixel
    # patches, one row of channels x temporal_patch_size x patch_size**2 values each, merged 2 x 2 into 16 placeholders.
    grid = torch.tensor([[1, 8, 8], [1, 8, 8]])
    pixel_values = torch.randn(2 * 64, 3 * 2 * 14 * 14, generator=torch.Generator().manual_seed(0))
    text = [5, *[IMAGE] * 16, 10, 11]
    ids = torch.tensor([text, [6, *text[1:-2], 20, 21]])
    mask = torch.ones_like(ids)

    # What every beam's first step must score: the model's next-token log-probabilities for its prompt and image.
    expected = model(input_ids=ids, attention_mask=mask, pixel_values=pixel_values, image_grid_thw=grid).logits[:, -1]
    expected = expected.float().log_softmax(-1).repeat_interleave(BEAMS, dim=0)
    out = model.generate(input_ids=ids, attention_mask=mask, pixel_values=pixel_values, image_grid_thw=grid,
                         num_beams=BEAMS, num_return_sequences=BEAMS, max_new_tokens=1, do_sample=False, pad_token_id=0,
                         output_scores=True, return_dict_in_generate=True)
    first = out.scores[0].float()  # (batch * beams, vocab): the step's log-probabilities before the beam scores
    gap = (first - expected).abs().amax(-1)
    top = expected[::BEAMS].topk(BEAMS).indices.tolist()
    print(f"beam search's first-step log-probs vs one forward of the prompt, per beam: max |diff| {[round(g, 4) for g in gap.tolist()]}")
    print(f"returned tokens {out.sequences[:, -1].view(2, BEAMS).tolist()}; the prompts' top-{BEAMS} next tokens {top}")
    if gap.max() > 1e-4:
        print("BUG: every beam scores its prompt with another image than the prompt's (pixel_values expanded patch row by patch row)")
        return 1
    print("beam search scores each prompt with its own image")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PaddleOCR-VL (5.18-5.20), Step3p7, MuseGlimmer (5.16-5.19), GLM-5-Next (5.18-5.19): beam search repeats each patch row.

Expected (model bug): from 5.18 generate() encodes a prompt's media once before the beam expansion and repeats each
encoded image whole per beam, but only for a model whose forward takes ``mm_encoder_outputs`` and whose
``input_modalities`` name image or video (``_maybe_prepare_encoder_kwargs_for_generation``, generation/utils.py:973-976,
``_expand_multimodal_outputs`` :1114-1183 in 5.20.2; :965-968 in 5.18.0). Any other model gets the generic expansion,
``repeat_interleave(num_beams, dim=0)`` of every tensor (generation/utils.py:1207-1211 in 5.20.2), the only one up to
5.17. Media whose first axis counts patches, not prompts, then become p0 p0 p0 p1 p1 p1 ...: the beams of the first
prompt read the first third of that list as their image (its patches at the wrong places), the later beams other
scrambles. generate(num_beams>1) with an image scores and picks tokens for a different image than the prompt's
(num_return_sequences > 1 expands the same way), and the cached and uncached beam searches disagree, each beam row's
prefill having seen a different scramble.

- PaddleOCR-VL, 5.18.0-5.20.2: up to 5.17 PaddleOCRVLForConditionalGeneration has its own
  ``_expand_inputs_for_generation`` that repeats each prompt's patches whole (modeling_paddleocr_vl.py:1508-1594 in
  5.17.0); 5.18 drops it. PaddleOCRVLPreTrainedModel declares no ``input_modalities`` (modeling_paddleocr_vl.py:459 in
  5.20.2; only the vision tower's classes say "image", :867, :922), so the class generate() runs on keeps
  PreTrainedModel's "text" (modeling_utils.py:1102), and its forward takes no ``mm_encoder_outputs`` (:1328-1342;
  PaddleOCRVLModel's does, :1249). ``pixel_values`` is the processor's [patches, 3, 14, 14]. 5.21 declares
  ``input_modalities = ("image", "text")`` and passes ``mm_encoder_outputs`` through the forward
  (modeling_paddleocr_vl.py:468, :1342, :1392 in 5.21.1). Both are needed: copies of 5.18.0, 5.19.0 and 5.20.2 with those
  three lines give each beam its prompt's image; 5.20.2 with only the input_modalities line, or only the keyword, does not.
- Step3p7 (new in 5.16), 5.16.0-5.19.0: ``pixel_values`` holds one global view per image, but ``pixel_values_local``
  is [local crops of all images, 3, H, W] (image_processing_step3p7.py:262-264 in 5.19.0). No override of the
  expansion; up to 5.17 no release pre-encodes, and 5.18-5.19 leave Step3p7 out: Step3p7Model and
  Step3p7ForConditionalGeneration declare no input_modalities (modeling_step3p7.py:948, :1125 in 5.19.0; the text model's
  ("text",) at :818). 5.20 declares ("image", "text") on both (modeling_step3p7.py:947, :1126 in 5.20.2); a copy of
  5.19.0 with those two lines gives each beam its prompt's image.
- MuseGlimmer, 5.16.1-5.19.0 (no override of the expansion; pixel_values [patches, 2 * 3 * 8 * 8]), and GLM-5-Next,
  5.18.0-5.19.0 (5.18 drops its own ``_expand_inputs_for_generation``, which repeated each prompt's patches whole,
  modeling_glm5_next.py:2307 in 5.17.0): MuseGlimmerModel / MuseGlimmerForConditionalGeneration and Glm5NextModel /
  Glm5NextForConditionalGeneration declare no input_modalities (only their vision towers' ("image", "video"),
  modeling_muse_glimmer.py:805, modeling_glm5_next.py:1804 in 5.19.0) until 5.20 declares ("image", "video", "text") on
  both (modeling_muse_glimmer.py:895, :1066; modeling_glm5_next.py:1884, :2143 in 5.20.2); copies of 5.18.0 and 5.19.0
  with those two lines give each beam its prompt's image.

The same finding as EXAONE 4.5's on 5.18-5.19 (exaone4_5_beam_expands_image_patches_row_by_row.py).
Exit 1 when, for some type, beam search's first-step log-probabilities of a prompt with one image are not the model's
own log-probabilities for that prompt and image (one plain forward), 0 when they are for every type the release has.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

TRANSFORMERS = ">=5.16,<5.21"  # Step3p7, MuseGlimmer 5.16-5.19, GLM-5-Next 5.18-5.19, PaddleOCR-VL 5.18-5.20 (tests/test_repros.py skips it elsewhere)

IMAGE, VIDEO, START, END = 250, 251, 252, 253  # image ids inside a small vocabulary
BEAMS = 3
TEXT = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128}


def paddleocr_vl():
    # The published PaddlePaddle/PaddleOCR-VL geometry (PaddleOCRVisionConfig defaults: patch_size 14, spatial_merge_size
    # 2; the text model's multimodal rotary sections 16/24/24 of head_dim 128), narrower and shallower.
    config = AutoConfig.for_model(
        "paddleocr_vl",
        text_config={**TEXT, "model_type": "paddleocr_vl_text",
                     "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [2, 3, 3]}},
        vision_config={"model_type": "paddleocr_vl_vision", "hidden_size": 64, "intermediate_size": 128,
                       "num_hidden_layers": 2, "num_attention_heads": 4},
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END,
    )
    # One 112 x 112-pixel image per prompt, as the PaddleOCR-VL image processor cuts it: an 8 x 8 grid of 14-pixel
    # patches, one [3, 14, 14] row each, merged 2 x 2 into 16 placeholders between the vision start and end ids.
    text = [5, START, *[IMAGE] * 16, END, 10, 11]
    ids = torch.tensor([text, [6, *text[1:-2], 20, 21]])
    media = {"pixel_values": torch.randn(2 * 64, 3, 14, 14, generator=torch.Generator().manual_seed(0)),
             "image_grid_thw": torch.tensor([[1, 8, 8], [1, 8, 8]]), "mm_token_type_ids": (ids == IMAGE).int()}
    return config, ids, media


def step3p7():
    # Step3p7's layout (a global view per image plus its local crops, the vision tower downsampling each 8-pixel-patch
    # grid 4 x 4; published: 728-pixel global views, 504-pixel crops), narrower and shallower, with a sliding layer
    # and rope parameters per layer type as published checkpoints name them.
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    config = AutoConfig.for_model(
        "step3p7",
        text_config={**TEXT, "pad_token_id": 0, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"],
                     "rope_parameters": {"sliding_attention": rope, "full_attention": rope}},
        vision_config={"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "image_size": 64, "patch_size": 8, "max_position_embeddings": 64},
        image_token_id=IMAGE,
    )
    # One image per prompt: a 64 x 64 global view and two 64 x 64 local crops, 4 placeholders each (crops first).
    text = [5, *[IMAGE] * 12, 10, 11]
    ids = torch.tensor([text, [6, *text[1:-2], 20, 21]])
    generator = torch.Generator().manual_seed(0)
    media = {"pixel_values": torch.randn(2, 3, 64, 64, generator=generator),
             "pixel_values_local": torch.randn(2 * 2, 3, 64, 64, generator=generator),
             "num_local_patches": torch.tensor([2, 2])}  # as the processor returns them (return_tensors="pt")
    return config, ids, media


def muse_glimmer():
    # MuseGlimmer's layout (Qwen-VL-style flattened patches [patches, 2 * 3 * 8 * 8] with image_grid_thw, merged 2 x 2),
    # narrower and shallower; the projector reads the tower's width x merge_size ** 2 (out_hidden_size).
    mrope = {"rope_theta": 10000.0, "rope_type": "default", "mrope_section": [2, 3, 3]}
    config = AutoConfig.for_model(
        "muse_glimmer",
        text_config={**TEXT, "model_type": "muse_glimmer_text", "rope_parameters": mrope, "sliding_window": 4,
                     "layer_types": ["sliding_attention", "full_attention"], "layer_rope_theta": [10000.0, 0]},
        vision_config={"model_type": "muse_glimmer_vision", "patch_size": 8, "num_attention_heads": 4, "num_hidden_layers": 2,
                       "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 64,
                       "layer_types": ["window_attention", "full_attention"]},
        image_token_id=IMAGE, video_token_id=VIDEO, out_hidden_size=256, projector_hidden_size=64,
    )
    # One 32 x 64-pixel image per prompt as MuseGlimmerImageProcessor cuts it: a 4 x 8 grid of patches, 8 placeholders.
    text = [5, *[IMAGE] * 8, 10, 11]
    ids = torch.tensor([text, [6, *text[1:-2], 20, 21]])
    media = {"pixel_values": torch.randn(2 * 32, 2 * 3 * 8 * 8, generator=torch.Generator().manual_seed(0)),
             "image_grid_thw": torch.tensor([[1, 4, 8], [1, 4, 8]])}
    return config, ids, media


def glm5_next():
    # GLM-5-Next's layout (Glm4v-style flattened patches with image_grid_thw, merged 2 x 2, between image start and end
    # ids), its text model narrower and shallower, with the config's default layer schedule for 4 layers (three
    # linear-attention layers, then the sparse-attention one; dense MLPs, then a MoE one).
    config = AutoConfig.for_model(
        "glm5_next",
        text_config={**TEXT, "model_type": "glm5_next_text", "num_hidden_layers": 4, "num_key_value_heads": 4,
                     "moe_intermediate_size": 64, "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2,
                     "n_group": 2, "topk_group": 1, "kv_lora_rank": 24, "q_lora_rank": 32, "qk_rope_head_dim": 0,
                     "v_head_dim": 16, "qk_nope_head_dim": 16, "head_dim": 0, "qk_head_dim": 32, "pad_token_id": 0,
                     "index_topk": 4, "index_head_dim": 32, "index_n_heads": 32, "index_kpool": 2,
                     "linear_head_dim": 16, "linear_num_heads": 4, "linear_conv_kernel_dim": 4},
        vision_config={"model_type": "glm5_next_vision", "depth": 2, "hidden_size": 64, "num_heads": 4, "image_size": 32,
                       "patch_size": 8, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
                       "intermediate_size": 128},
        image_token_id=IMAGE, video_token_id=VIDEO, image_start_token_id=START, image_end_token_id=END,
        video_start_token_id=248, video_end_token_id=249,
    )
    # One 32 x 64-pixel image per prompt as Glm5NextImageProcessor cuts it: a 4 x 8 grid of patches, 8 placeholders.
    text = [5, START, *[IMAGE] * 8, END, 10, 11]
    ids = torch.tensor([text, [6, *text[1:-2], 20, 21]])
    media = {"pixel_values": torch.randn(2 * 32, 3 * 2 * 8 * 8, generator=torch.Generator().manual_seed(0)),
             "image_grid_thw": torch.tensor([[1, 4, 8], [1, 4, 8]])}
    return config, ids, media


@torch.inference_mode()
def wrong_image(name, build) -> bool:
    config, ids, media = build()
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **media}
    # What every beam's first step must score: the model's next-token log-probabilities for its prompt and image.
    expected = model(**inputs).logits[:, -1].float().log_softmax(-1).repeat_interleave(BEAMS, dim=0)
    out = model.generate(**inputs, num_beams=BEAMS, num_return_sequences=BEAMS, max_new_tokens=1, do_sample=False,
                         pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    first = out.scores[0].float()  # (batch * beams, vocab): the step's log-probabilities before the beam scores
    gap = (first - expected).abs().amax(-1)
    top = expected[::BEAMS].topk(BEAMS).indices.tolist()
    print(f"{name} ({type(model).__name__}.input_modalities = {model.input_modalities!r}): beam search's first-step "
          f"log-probs vs one forward of the prompt, per beam: max |diff| {[round(g, 4) for g in gap.tolist()]}; returned "
          f"tokens {out.sequences[:, -1].view(2, BEAMS).tolist()}, the prompts' top-{BEAMS} next tokens {top}")
    return bool(gap.max() > 1e-4)


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    bad = []
    for name, build in {"paddleocr_vl": paddleocr_vl, "step3p7": step3p7, "muse_glimmer": muse_glimmer,
                        "glm5_next": glm5_next}.items():
        if name not in CONFIG_MAPPING:
            print(f"{name}: not in this release")
        elif wrong_image(name, build):
            bad.append(name)
    if bad:
        print(f"BUG: {', '.join(bad)}: every beam scores its prompt with another image than the prompt's "
              "(the patch rows expanded one by one)")
        return 1
    print("beam search scores each prompt with its own image")
    return 0


if __name__ == "__main__":
    sys.exit(main())

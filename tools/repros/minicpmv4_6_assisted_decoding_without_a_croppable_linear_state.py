#!/usr/bin/env python3
"""transformers 5.7-5.13 run assisted decoding on MiniCPM-V 4.6, whose Qwen3.5 language model keeps linear-attention
(gated delta net) states that the crop of the rejected drafts leaves as they are: generate(assistant_model=...)
returns other tokens than greedy generate().

Expected (model bug, transformers 5.7.0-5.13.1, the releases that have the type and do not refuse; kvconform labels crop
of minicpmv4_6, the float32 dynamic cell):
- MiniCPM-V 4.6 (new in 5.7) wraps a Qwen3.5 text model (three linear-attention layers to one full-attention layer),
  whose own classes are declared stateful (`_is_stateful = True`, modeling_qwen3_5.py:810 in 5.7.0, :829 in 5.13.1),
  but MiniCPMV4_6PreTrainedModel is not (modeling_minicpmv4_6.py:620 in 5.7.0, :575 in 5.13.1), so
  generate(assistant_model=...) runs the assisted loop instead of refusing ("assisted generation is not supported with
  stateful models", the `_is_stateful` check, generation/utils.py:1473 in 5.7.0, :1529 in 5.13.1).
- The loop crops the rejected drafts (outputs.past_key_values.crop(new_cur_len - 1), generation/utils.py:3620 in
  5.7.0, :3752 in 5.13.1), which does nothing to the linear-attention layers ("We don't crop the linear attention
  cache, so simply do nothing here", LinearAttentionCacheLayerMixin.crop, cache_utils.py:729-730 in 5.7.0, :923-924 in
  5.13.1): their conv and recurrent states keep the rejected drafts, and every later token is computed from them.
5.14 declares MiniCPMV4_6PreTrainedModel stateful (modeling_minicpmv4_6.py:587 in 5.14.1) and generate() refuses
assisted decoding (as it does from 5.14 on); LFM2's 5.5-5.12 finding
(tools/repros/lfm2_assisted_decoding_without_a_croppable_conv_state.py) is the same omission for a conv cache.
A main model and a random assistant of the same architecture (its drafts are mostly rejected, so every burst crops), the
published layout (linear_attention x3, full_attention), a text prompt. Exit 1 when assisted generate() returns other
tokens than greedy generate() or its logits leave greedy's; 0 when they agree or generate() refuses.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.7,<5.14"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
TEXT = {"model_type": "qwen3_5_text", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4, "max_position_embeddings": 128, "initializer_range": 0.1, "pad_token_id": 0,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}
VISION = {"model_type": "minicpmv4_6_vision", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2}
LIMIT = 1e-3  # float32 logits of this model agree with greedy's to about 1e-5


def build(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model("minicpmv4_6", text_config=TEXT, vision_config=VISION,
                                               image_token_id=250, insert_layer_id=1)
    return transformers.MiniCPMV4_6ForConditionalGeneration(config).float().eval()


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if not hasattr(transformers, "MiniCPMV4_6ForConditionalGeneration"):
        print("this release has no MiniCPM-V 4.6 (new in 5.7)")
        return 0
    model, assistant = build(0), build(1)
    prompt = torch.randint(3, 240, (1, 6), generator=torch.Generator().manual_seed(0))
    common = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 8, "do_sample": False, "pad_token_id": 0,
              "return_dict_in_generate": True, "output_logits": True}
    greedy = model.generate(prompt, **common)
    uncached = model.generate(prompt, use_cache=False, **common)
    if not torch.equal(greedy.sequences, uncached.sequences):
        print("greedy generate() with and without the cache part (the control): cannot show it")
        return 2
    try:
        assisted = model.generate(prompt, assistant_model=assistant, **common)
    except ValueError as exc:  # 5.14+: the stateful refusal
        print(f"generate(assistant_model=...) refuses: {exc}".splitlines()[0])
        return 0
    tokens, reference = assisted.sequences[0, 6:].tolist(), greedy.sequences[0, 6:].tolist()
    deltas = [float((a - g).abs().max()) for a, g in zip(assisted.logits, greedy.logits, strict=False)]
    print(f"greedy {reference}, assisted {tokens}; per-token max |Δlogit| " + ", ".join(f"{d:.2e}" for d in deltas))
    bad = tokens != reference or max(deltas) > LIMIT
    print("assisted generate() leaves greedy's" if bad else "assisted generate() returns greedy's tokens")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""transformers up to 5.12 run assisted decoding on LFM2 (and LFM2-MoE), whose conv cache can neither take the
verification forward nor roll back the rejected drafts: generate(assistant_model=...) returns other tokens than greedy.

Expected (model bug, transformers 5.0.0-5.12.1; kvconform labels assisted of lfm2 and lfm2_moe, float32 dynamic cells,
on 5.0-5.12, where they run; before 5.5 generate() builds LFM2 no Cache, its input preparation builds LFM2's own
Lfm2HybridConvCache (modeling_lfm2.py:647 in 5.0.0), which assisted decoding takes (it asks for a cache generate()
prepared only from 5.14) and crops (generation/utils.py:3749 in 5.0.0, :3603 in 5.4.0), and whose crop cuts the
attention keys only (modeling_lfm2.py:266-277 in 5.0.0, :286-297 in 5.4.0): the same wrong tokens):
- From 5.5 generate() builds LFM2 a DynamicCache whose conv layers are LinearAttentionLayers, and LFM2 is not declared stateful, so
  generate(assistant_model=...) runs the assisted loop instead of refusing (the `_is_stateful` refusal,
  generation/utils.py:1473 in 5.5.4, :1520 in 5.12.1).
- The loop verifies the drafts in one forward of 1 token + the drafts on the filled cache, which Lfm2ShortConv runs
  as one conv decode step: any forward on a filled cache takes update_conv_state and computes one convolution output
  for every token (modeling_lfm2.py:370-376 in 5.6.2; the multi-token conv finding of
  tools/repros/conv_mixers_multi_token_cached_forward_drop_the_conv_state.py, up to 5.14).
- It then crops the rejected drafts (outputs.past_key_values.crop, generation/utils.py:3624 in 5.5.4, :3686 in
  5.12.1), which does nothing to the conv layers ("We don't crop the linear attention cache, so simply do nothing
  here", LinearAttentionCacheLayerMixin.crop, cache_utils.py:729-730 in 5.5.4, :912-913 in 5.12.1): their window
  keeps the rejected drafts. Either alone parts the tokens: 5.6.2 with the multi-token conv step fixed (5.15's
  carry of the cached window) still leaves the uncached logits by 4.1 at the first verified token.
5.13 declares Lfm2ForCausalLM and Lfm2MoeForCausalLM stateful (`_is_stateful = True`, modeling_lfm2.py:484,
modeling_lfm2_moe.py:573 in 5.13.1) and generate() refuses assisted decoding ("assisted generation is not supported
with stateful models"); 5.15 drops the flag and records the conv states for the crop (Cache.activate_past_recording)
and carries the window for any length: the assisted tokens are greedy's.
A main model and a random assistant of the same architecture (its drafts are mostly rejected, so every burst crops),
LFM2's published layout (conv_L_cache 3, conv layers around full-attention ones). Exit 1 when assisted generate()
returns other tokens than greedy generate() or its logits leave greedy's; 0 when they agree or generate() refuses.
"""
import sys

import torch
import transformers

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
COMMON = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 64, "conv_L_cache": 3, "initializer_range": 0.15,
          "pad_token_id": 0, "layer_types": ["conv", "conv", "full_attention", "conv"], "num_hidden_layers": 4}
CONFIGS = {
    "lfm2": {"full_attn_idxs": [2]},
    "lfm2_moe": {"num_dense_layers": 1, "moe_intermediate_size": 64, "num_experts_per_tok": 2, "num_experts": 4},
}
LIMIT = 1e-3  # float32 logits of these models agree with greedy's to about 1e-5


def build(model_type: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(model_type, **COMMON, **CONFIGS[model_type])
    return transformers.AutoModelForCausalLM.from_config(config).float().eval()


@torch.inference_mode()
def reproduces(model_type: str) -> bool:
    model, assistant = build(model_type, 0), build(model_type, 1)
    prompt = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(0))
    common = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 8, "do_sample": False, "pad_token_id": 0,
              "return_dict_in_generate": True, "output_logits": True}
    greedy = model.generate(prompt, **common)
    uncached = model.generate(prompt, use_cache=False, **common)
    if not torch.equal(greedy.sequences, uncached.sequences):
        print(f"{model_type}: greedy generate() with and without the cache part (the control): cannot show it")
        raise SystemExit(2)
    try:
        assisted = model.generate(prompt, assistant_model=assistant, **common)
    except ValueError as exc:  # 5.13-5.14: the stateful refusal
        print(f"{model_type}: generate(assistant_model=...) refuses: {exc}".splitlines()[0])
        return False
    tokens, reference = assisted.sequences[0, 6:].tolist(), greedy.sequences[0, 6:].tolist()
    deltas = [float((a - g).abs().max()) for a, g in zip(assisted.logits, greedy.logits, strict=False)]
    print(f"{model_type}: greedy {reference}, assisted {tokens}; per-token max |Δlogit| "
          + ", ".join(f"{d:.2e}" for d in deltas))
    return tokens != reference or max(deltas) > LIMIT


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    bad = [model_type for model_type in CONFIGS if reproduces(model_type)]
    print(f"assisted generate() leaves greedy's: {bad}" if bad else "assisted generate() returns greedy's tokens (or refuses)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

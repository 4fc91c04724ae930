#!/usr/bin/env python3
"""T5Gemma2 (transformers 5.0-5.12): generate(cache_implementation="static") after a plain generate() that followed a
static one raises AttributeError 'DynamicSlidingWindowLayer' object has no attribute 'max_batch_size'.

Expected (model bug, transformers 5.0.0-5.12.1; 5.13 asks the cache's batch_size): generate() keeps its static cache on
the model as `_cache` for reuse. T5Gemma2ForConditionalGeneration._prepare_cache_for_generation (modeling_t5gemma2.py:
1378-1382 in 5.12.1, :1388-1392 in 5.0.0) overwrites a kept `_cache` with whatever this call built, the DynamicCache
(decoder config: DynamicSlidingWindowLayers for the sliding_attention layers) of a plain generate() too. The next
static generate() takes that dynamic self-attention cache as the one to reuse (generation/utils.py:1792 in 5.12.1,
:1874 in 5.0.0) and asks its max_batch_size (:1799 in 5.12.1, :1879 in 5.0.0), which Cache reads from every layer
(cache_utils.py:857-859 in 5.0.0) and only a StaticLayer sets: AttributeError. Any config with layers of its own
(the published ones alternate sliding and full attention) meets it on the call sequence static, plain, static. 5.13
reads Cache.batch_size, which skips layers without one (generation/utils.py:1833, cache_utils.py:1437-1442 in 5.13.1),
and the third call runs. No kvconform cell meets it (each check builds its own calls); it showed in the sequence of
t5gemma2_static_multi_token_decoder_prompt.py's calls on 5.0-5.12.
Exit 1 when the third generate() raises the AttributeError (the first two run); 0 when all three run.
"""
import json
import sys

import torch
import transformers
from transformers import T5Gemma2Config, T5Gemma2ForConditionalGeneration

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

# kvconform's shrunk T5Gemma2 (2 layers, hidden 64, a sliding window of 4 and a full-attention layer; a 2-block vision tower)
CONFIG = json.loads('{"attention_dropout": 0.0, "bos_token_id": 2, "classifier_dropout_rate": 0.0, "decoder": {"attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2, "dropout_rate": 0.0, "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64, "initializer_range": 0.15, "intermediate_size": 128, "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64, "model_type": "t5gemma2_decoder", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}, "sliding_window": 4, "tie_word_embeddings": true, "use_cache": true, "vocab_size": 256}, "dropout_rate": 0.0, "encoder": {"boi_token_index": 255, "eoi_token_index": 254, "image_token_index": 255, "initializer_range": 0.15, "mm_tokens_per_image": 4, "model_type": "t5gemma2_encoder", "text_config": {"attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2, "dropout_rate": 0.0, "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64, "initializer_range": 0.15, "intermediate_size": 128, "is_encoder_decoder": false, "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64, "model_type": "t5gemma2_text", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}, "sliding_window": 4, "tie_word_embeddings": true, "use_cache": true, "vocab_size": 256}, "tie_word_embeddings": true, "vision_config": {"attention_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 64, "image_size": 32, "intermediate_size": 128, "is_encoder_decoder": false, "layer_norm_eps": 1e-06, "model_type": "siglip_vision_model", "num_attention_heads": 4, "num_channels": 3, "num_hidden_layers": 2, "patch_size": 8, "vision_use_head": true}}, "eoi_token_index": 254, "eos_token_id": 1, "image_token_index": 255, "initializer_range": 0.15, "is_encoder_decoder": true, "model_type": "t5gemma2", "pad_token_id": 0, "tie_word_embeddings": true, "vocab_size": 256}')


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = T5Gemma2ForConditionalGeneration(T5Gemma2Config.from_dict(CONFIG)).eval()
    source = torch.randint(3, 200, (2, 5), generator=torch.Generator().manual_seed(0))
    start = torch.full((2, 1), 2)
    print(f"transformers {transformers.__version__}")
    for call, implementation in enumerate(("static", None, "static")):
        try:
            model.generate(input_ids=source, decoder_input_ids=start, max_new_tokens=4, do_sample=False,
                           cache_implementation=implementation, decoder_start_token_id=2)
        except AttributeError as exc:
            print(f"generate() {call + 1}, cache_implementation={implementation}: raises AttributeError: {exc}")
            return 1 if call == 2 and "max_batch_size" in str(exc) else 0
        kept = model.__dict__.get("_cache")
        print(f"generate() {call + 1}, cache_implementation={implementation}: runs; the model keeps "
              f"{type(getattr(kept, 'self_attention_cache', kept)).__name__} "
              f"{sorted({type(layer).__name__ for layer in getattr(getattr(kept, 'self_attention_cache', None), 'layers', [])})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

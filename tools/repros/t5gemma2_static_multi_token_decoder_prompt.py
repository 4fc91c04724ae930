"""T5Gemma2: generate(cache_implementation="static") with a decoder prompt of more than one token raises.

transformers 5.24.0, modeling_t5gemma2.py:1021-1028 (T5Gemma2Decoder.forward): the decoder concatenates its self-attention
masks with the cross-attention mask for merged attention, and with a StaticCache and a multi-token decoder prompt the
self-attention mask it concatenates is None (TypeError: expected Tensor as element 0 in argument 0, but got NoneType).
The dynamic cache, and the static one from a one-token decoder start, run. Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
Since 5.18 (found by tools/history.py, whose label XPASSed on 5.0-5.17): 5.13.1-5.17.0 run this call (exit 0), 5.18.0
raises. Each call starts without the cache an earlier one kept on the model: on 5.0-5.12 the static call after a plain
one that followed a static one raises AttributeError 'max_batch_size' (another bug,
t5gemma2_static_generate_after_a_plain_one_reads_max_batch_size.py), which this sequence of calls met before.
"""
import json
import sys

import torch
from transformers import T5Gemma2Config, T5Gemma2ForConditionalGeneration

TRANSFORMERS = ">=5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

# kvconform's shrunk T5Gemma2 (2 layers, hidden 64, a sliding window of 4 and a full-attention layer; a 2-block vision tower)
CONFIG = json.loads('{"attention_dropout": 0.0, "bos_token_id": 2, "classifier_dropout_rate": 0.0, "decoder": {"attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2, "dropout_rate": 0.0, "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64, "initializer_range": 0.15, "intermediate_size": 128, "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64, "model_type": "t5gemma2_decoder", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}, "sliding_window": 4, "tie_word_embeddings": true, "use_cache": true, "vocab_size": 256}, "dropout_rate": 0.0, "encoder": {"boi_token_index": 255, "eoi_token_index": 254, "image_token_index": 255, "initializer_range": 0.15, "mm_tokens_per_image": 4, "model_type": "t5gemma2_encoder", "text_config": {"attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2, "dropout_rate": 0.0, "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64, "initializer_range": 0.15, "intermediate_size": 128, "is_encoder_decoder": false, "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64, "model_type": "t5gemma2_text", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}, "sliding_window": 4, "tie_word_embeddings": true, "use_cache": true, "vocab_size": 256}, "tie_word_embeddings": true, "vision_config": {"attention_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 64, "image_size": 32, "intermediate_size": 128, "is_encoder_decoder": false, "layer_norm_eps": 1e-06, "model_type": "siglip_vision_model", "num_attention_heads": 4, "num_channels": 3, "num_hidden_layers": 2, "patch_size": 8, "vision_use_head": true}}, "eoi_token_index": 254, "eos_token_id": 1, "image_token_index": 255, "initializer_range": 0.15, "is_encoder_decoder": true, "model_type": "t5gemma2", "pad_token_id": 0, "tie_word_embeddings": true, "vocab_size": 256}')
torch.manual_seed(0)
model = T5Gemma2ForConditionalGeneration(T5Gemma2Config.from_dict(CONFIG)).eval()
source = torch.randint(3, 200, (2, 5))
start = torch.full((2, 1), 2)
prompt = torch.cat([start, torch.randint(3, 200, (2, 2))], dim=1)


def outcome(decoder_input_ids: torch.Tensor, cache_implementation: str | None) -> str:
    model.__dict__.pop("_cache", None)  # each call on its own: no static cache kept from an earlier call
    try:
        model.generate(input_ids=source, decoder_input_ids=decoder_input_ids, max_new_tokens=4, do_sample=False,
                       cache_implementation=cache_implementation, decoder_start_token_id=2)
        return "runs"
    except (TypeError, RuntimeError) as exc:
        return f"raises {type(exc).__name__}: {exc}"


runs = {(what, impl): outcome(ids, impl) for what, ids in (("start token", start), ("3-token prompt", prompt))
        for impl in (None, "static")}
for (what, impl), result in runs.items():
    print(f"decoder {what}, cache_implementation={impl}: {result}")
bug = runs["3-token prompt", "static"] != "runs" and all(runs[key] == "runs" for key in runs if key != ("3-token prompt", "static"))
sys.exit(1 if bug else 0)

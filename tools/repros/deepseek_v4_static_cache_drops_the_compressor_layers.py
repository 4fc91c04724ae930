#!/usr/bin/env python3
"""``generate(cache_implementation="static")`` on DeepSeek-V4 raises AttributeError in transformers 5.8-5.13.

DeepSeek-V4's compressed attention layers keep their compressor state in their own cache layer classes,
``DeepseekV4HCACache(DynamicSlidingWindowLayer)`` (``layer_type = "heavily_compressed_attention"``) and
``DeepseekV4CSACache(DeepseekV4HCACache)`` (``"compressed_sparse_attention"``), modeling_deepseek_v4.py:171-194 and
:255-274 in 5.8.1, which register themselves in ``LAYER_TYPE_CACHE_MAPPING``. ``StaticCache(config)`` in 5.8-5.13
takes every registered type whose dynamic class subclasses ``DynamicSlidingWindowLayer`` for a plain sliding type
(cache_utils.py:1398-1412 in 5.8.1, :1669-1683 in 5.13.1) and builds a ``StaticSlidingWindowLayer`` for it, so
``generate(cache_implementation="static")`` builds that cache (``_prepare_static_cache``, generation/utils.py:1791 in
5.8.1, :1851 in 5.13.1) and the first forward raises: the compressor calls ``cache_layer.store_compression_weights``
(modeling_deepseek_v4.py:410 in 5.8.1 and 5.13.1, also :526 and :642 in 5.13.1), which the static layer lacks. The
model's own comment says the StaticCache path cannot work (modeling_deepseek_v4.py:1168-1174 in 5.8.1), but nothing
refuses it. 5.14 dispatches ``StaticCache`` through ``STATIC_LAYER_TYPE_MAPPING`` (cache_utils.py:1796 in 5.14.1),
which has no entry for the compressed types: the construction raises KeyError, so generate() refuses the static
cache before building one (5.24.0 the same, cache_utils.py:2156).

The config is the published layer pattern (``DeepseekV4Config``'s default ``layer_types``, ``compress_rates`` and
``sliding_window`` 128), shrunk in width and depth. Exit 1 while generate() builds a StaticCache and its static
run raises or picks other tokens than the dynamic one; 0 when the release builds no StaticCache for the config
(generate() refuses it) or the two runs agree.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.8,<5.14"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
SHRUNK = {"vocab_size": 256, "hidden_size": 64, "moe_intermediate_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "qk_rope_head_dim": 16, "q_lora_rank": 32,
          "o_lora_rank": 32, "o_groups": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "index_n_heads": 4,
          "index_head_dim": 32, "index_topk": 4, "max_position_embeddings": 512, "initializer_range": 0.15}
PROMPT, STEPS = 6, 6


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if "deepseek_v4" not in transformers.models.auto.configuration_auto.CONFIG_MAPPING:
        print("this release has no DeepSeek-V4")
        return 0
    config = transformers.AutoConfig.for_model("deepseek_v4", **SHRUNK)
    print("layer_types", config.layer_types, "sliding_window", config.sliding_window, "compress_rates", config.compress_rates)
    torch.manual_seed(0)
    # built first: importing the modeling file registers the compressed layer types (LAYER_TYPE_CACHE_MAPPING)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    try:
        cache = transformers.StaticCache(config=config, max_cache_len=PROMPT + STEPS)
    except Exception as exc:  # what generate()'s _prepare_static_cache meets: a refusal before any cache exists
        print(f"StaticCache(config) refuses the config ({type(exc).__name__}: {exc}): generate() builds no static cache")
        return 0
    print("StaticCache(config) layers:", [type(layer).__name__ for layer in cache.layers])
    prompt = torch.randint(3, 256, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    runs = {}
    for implementation in (None, "static"):
        try:
            runs[implementation] = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS,
                                                  do_sample=False, pad_token_id=0, cache_implementation=implementation)
        except Exception as exc:  # the raise is the finding
            print(f"generate(cache_implementation={implementation!r}) raised {type(exc).__name__}: {exc}")
    if None not in runs:
        print("the dynamic generate() itself fails: cannot compare")
        return 2
    if "static" not in runs:
        return 1
    same = torch.equal(runs[None], runs["static"])
    print(f"dynamic {runs[None][:, PROMPT:].tolist()}, static {runs['static'][:, PROMPT:].tolist()}: "
          f"{'the same' if same else 'different'} tokens")
    return int(not same)


if __name__ == "__main__":
    sys.exit(main())

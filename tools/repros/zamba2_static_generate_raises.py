#!/usr/bin/env python3
"""``generate(cache_implementation="static")`` on Zamba2, Zamba and Falcon-H1 raises in transformers 5.5-5.14 (Zaya in 5.13).

5.5-5.13: ``StaticCache(config)`` builds a plain attention layer for each of their ``hybrid`` layers (every layer type
that is not mamba/conv/linear_attention/moe becomes a ``StaticLayer``, cache_utils.py:1355-1368 in 5.5.4, :1682-1694 in
5.13.1, while ``DynamicCache`` builds a hybrid layer from 5.5, :1253), and the hybrid layer's Mamba mixer asks that layer
``has_previous_state`` (modeling_zamba2.py:668 in 5.8.1, modeling_zamba.py:379 and modeling_falcon_h1.py:498 in 5.13.1),
which raises ValueError on an attention layer (cache_utils.py:1062 in 5.5.4, :1375 in 5.13.1); ``generate()`` itself
raises (KeyError on 5.5-5.12 for Zamba2, the same ValueError otherwise). Zaya (new in 5.13; every layer "hybrid" by
default, configuration_zaya.py:96 in 5.13.1) meets the same layer: its attention's CCA convolution asks
``has_previous_state(self.layer_idx)`` (modeling_zaya.py:233 in 5.13.1). 5.14 builds a hybrid layer
(``LinearAttentionAndStaticFullAttentionLayer``, cache_utils.py:1183 in 5.14.1) and Falcon-H1 and Zaya run, but ``generate()``'s
static path hands the forward its dict of per-layer-type masks as ``attention_mask``, which ``Zamba2Model.forward`` and
``ZambaModel.forward`` pass to ``create_causal_mask`` (modeling_zamba2.py:1203, modeling_zamba.py:758 in 5.14.1), reading
``attention_mask.ndim`` (masking_utils.py:830): AttributeError. 5.15 runs both and picks the dynamic cache's tokens (5.4
ignores ``cache_implementation`` for these models). Exit 1 while a static ``generate()`` raises or parts from the dynamic
one, 0 when they agree for every model.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.5,<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
COMMON = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "initializer_range": 0.15, "max_position_embeddings": 64, "pad_token_id": 0}
CONFIGS = {
    "zamba2": {"num_hidden_layers": 2, "layers_block_type": ["mamba", "hybrid"], "attention_hidden_size": 128,
               "attention_head_dim": 32, "n_mamba_heads": 8, "mamba_headdim": 16, "mamba_d_state": 8, "mamba_d_conv": 4,
               "mamba_expand": 2, "mamba_ngroups": 1, "num_mem_blocks": 1, "use_mem_rope": False},
    # layers 0-1 mamba, 2-3 hybrid (configuration_zamba.py:106-111 in 5.5.4); the hybrid layers share one transformer
    "zamba": {"num_hidden_layers": 4, "attn_layer_period": 1, "attn_layer_offset": 0, "n_mamba_heads": 2, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2,
              "mamba_dt_rank": 8, "use_mamba_kernels": False},
    # every layer hybrid (configuration_falcon_h1.py:135 in 5.5.4)
    "falcon_h1": {"num_hidden_layers": 2, "mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_n_groups": 1,
                  "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 16},
    # every layer "hybrid" (configuration_zaya.py:96 in 5.13.1); Zyphra/ZAYA1-8B's shape (head_dim 128, 8 heads over 2
    # KV heads, one expert per token) shrunk; it exists from 5.13 ("not shown" before)
    "zaya": {"num_hidden_layers": 2, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 1,
             "moe_intermediate_size": 64, "router_hidden_size": 32, "eos_token_id": 1},
}


@torch.inference_mode()
def reproduces(model_type: str) -> bool:
    try:
        config = transformers.AutoConfig.for_model(model_type, **COMMON, **CONFIGS[model_type])
    except Exception as exc:  # falcon_h1 on 5.4: its config annotates use_cache as int (another finding)
        print(f"{model_type}: not shown, its config cannot be built on this release ({type(exc).__name__})")
        return False
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    # The cache a user builds for a static forward: StaticCache(config=...), as generate() builds it
    cache = transformers.StaticCache(config=config, max_cache_len=16)
    try:
        model(prompt, attention_mask=torch.ones_like(prompt), past_key_values=cache, use_cache=True)
        print(f"{model_type}: a forward on StaticCache(config) runs")
    except Exception as exc:  # the raise is the finding
        print(f"{model_type}: a forward on StaticCache(config) raised {type(exc).__name__}: {exc}")
    runs = {}
    for implementation in (None, "static"):
        try:
            runs[implementation] = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                                  do_sample=False, pad_token_id=0, cache_implementation=implementation)
        except Exception as exc:  # the raise is the finding
            print(f"{model_type}: generate(cache_implementation={implementation!r}) raised {type(exc).__name__}: {exc}")
    bad = len(runs) < 2 or not torch.equal(runs[None], runs["static"])
    if len(runs) == 2:
        print(f"{model_type}: static generate() against the dynamic one: the same tokens {not bad}")
    return bad


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    bad = [model_type for model_type in CONFIGS if reproduces(model_type)]
    print(f"BUG: static generate() does not run on {bad}" if bad else "ok: static generate() runs on every model")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

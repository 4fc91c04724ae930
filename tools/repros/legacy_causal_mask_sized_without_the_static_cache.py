#!/usr/bin/env python3
"""transformers 5.0-5.8: models that build their attention mask for the tokens seen cannot run a StaticCache: the mask
is sized to past + new tokens, not to the cache's max_cache_len keys.

Expected (model bug): XGLMModel.forward builds its 4-D mask with `_prepare_4d_causal_attention_mask(attention_mask,
input_shape, inputs_embeds, past_key_values_length)` (modeling_xglm.py:466-468 in 5.0.0), whose key length is past +
new tokens; a StaticCache hands attention all max_cache_len preallocated keys, so eager attention refuses the mask
(modeling_xglm.py:203-206, "Attention mask should be of size (2, 1, 6, 16)"), and generate(cache_implementation="static")
raises the same way ("Incorrect 4D attention_mask shape"); mpt, mvp, trocr, speecht5, seamless_m4t and led build it
the same way in 5.0-5.1, and 5.2 moves them to masking_utils.create_causal_mask (modeling_xglm.py:472 in 5.2.0), which
sizes the mask by the cache. RoFormer keeps `get_extended_attention_mask(attention_mask, input_shape)` over a mask of
past + new columns (modeling_roformer.py:718 in 5.8.1) until 5.9 moves it to masking_utils: its eager attention adds a
6-column mask to 14 keys (RuntimeError); BigBird, MegatronBert and RemBert alike (get_extended_attention_mask,
modeling_big_bird.py:1667, modeling_megatron_bert.py:632, modeling_rembert.py:564 in 5.8.1; masking_utils from 5.9).
Exit 1 when a prefill into a StaticCache raises on the mask's size (XGLM up to 5.1, the BERT-style decoders up to 5.8);
0 when all run.
"""
import sys

import torch
import transformers
from transformers import (
    BigBirdConfig,
    BigBirdForCausalLM,
    MegatronBertConfig,
    MegatronBertForCausalLM,
    RemBertConfig,
    RemBertForCausalLM,
    RoFormerConfig,
    RoFormerForCausalLM,
    StaticCache,
    XGLMConfig,
    XGLMForCausalLM,
)

TRANSFORMERS = "<5.9"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def prefill_raises(name: str, model: torch.nn.Module, config: object) -> bool:
    """Whether a prefill into a StaticCache raises on the mask's size (the default dynamic cache is the control)."""
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    model(input_ids=prompt, use_cache=True)
    try:
        model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True,
              past_key_values=StaticCache(config=config, max_cache_len=14))
    except (ValueError, RuntimeError) as exc:
        print(f"{name}: the dynamic cache runs; the prefill into a StaticCache(max_cache_len=14) raised "
              f"{type(exc).__name__}: {exc}")
        return True
    print(f"{name}: the prefill into a StaticCache runs")
    return False


@torch.inference_mode()
def main() -> int:
    print(f"transformers {transformers.__version__}")
    torch.manual_seed(0)
    xglm = XGLMConfig(vocab_size=256, d_model=64, ffn_dim=128, num_layers=2, attention_heads=4, max_position_embeddings=64)
    roformer = RoFormerConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                              max_position_embeddings=64, is_decoder=True, attn_implementation="eager")
    raised = [prefill_raises("XGLM (eager)", XGLMForCausalLM(xglm).eval(), xglm),
              prefill_raises("RoFormer (eager)", RoFormerForCausalLM(roformer).eval(), roformer)]
    sizes = {key: getattr(roformer, key) for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                                    "intermediate_size", "max_position_embeddings", "is_decoder")}
    for name, config_class, model_class, extra in (
        ("BigBird", BigBirdConfig, BigBirdForCausalLM, {"attention_type": "original_full"}),
        ("MegatronBert", MegatronBertConfig, MegatronBertForCausalLM, {}),
        ("RemBert", RemBertConfig, RemBertForCausalLM, {"input_embedding_size": 64, "output_embedding_size": 64}),
    ):
        config = config_class(**sizes, **extra, attn_implementation="eager")
        raised.append(prefill_raises(f"{name} (eager)", model_class(config).eval(), config))
    return 1 if any(raised) else 0


if __name__ == "__main__":
    sys.exit(main())

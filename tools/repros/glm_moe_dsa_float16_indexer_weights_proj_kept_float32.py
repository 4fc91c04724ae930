#!/usr/bin/env python3
"""transformers 5.2-5.10: GLM-MoE-DSA loaded in float16 keeps its indexer's weights_proj in float32 and feeds it float16.

Expected (model bug, transformers 5.2.0-5.10.4): GlmMoeDsaPreTrainedModel declares
``_keep_in_fp32_modules = ["indexer.weights_proj"]`` (modeling_glm_moe_dsa.py:655 in 5.3.0), which
``from_pretrained(..., dtype=torch.float16)`` honours (the non-strict list applies to float16 only,
modeling_utils.py:3645-3646 in 5.3.0), while the indexer calls ``self.weights_proj(hidden_states)`` on the float16
hidden states (modeling_glm_moe_dsa.py:216 in 5.3.0, :214 in 5.10.4): every float16 forward, generate() included, raises
"expected m1 and m2 to have the same dtype". 5.11 casts the input to the layer's dtype first
(``self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype))``, modeling_glm_moe_dsa.py:250 in 5.11.0).
Exit 1 when float16 generate() raises that dtype error, 0 when it runs.
"""
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

TRANSFORMERS = ">=5.2,<5.11"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    config = AutoConfig.for_model(
        "glm_moe_dsa", vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, index_n_heads=2, index_head_dim=16, index_topk=4,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float16).eval()
    proj = next(m.weights_proj for m in model.modules() if hasattr(m, "weights_proj"))
    print(f"indexer.weights_proj weight dtype {proj.weight.dtype}; embeddings {model.get_input_embeddings().weight.dtype}")
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10]])
    try:
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                             pad_token_id=0)
    except RuntimeError as exc:
        if "same dtype" not in str(exc):
            raise
        print(f"BUG: float16 generate() raised RuntimeError: {exc}")
        return 1
    print(f"float16 generate() ran: {out[0, 6:].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""transformers 5.0-5.14: DBRX's MoE block takes ffn_config.ffn_hidden_size (the experts' width) for the model width.

In 5.0.0-5.14.1 DbrxRouter builds ``nn.Linear(config.ffn_hidden_size, moe_num_experts)`` (``self.hidden_size =
config.ffn_hidden_size``, modeling_dbrx.py:331 in 5.14.1) and DbrxExperts reshapes the hidden states to
``(-1, ffn_hidden_size)`` (:304) and multiplies them by the untransposed expert weights (:281-285), while the hidden
states are ``d_model`` wide: every DBRX whose experts are wider than the model (the published checkpoints:
d_model 6144, ffn_hidden_size 10752) raises in its first forward, so generate() cannot run (nor can the router's
checkpoint weight, [experts, d_model], load). 5.15.0 reads the model width (``self.hidden_size = config.hidden_size``,
modeling_dbrx.py:324 in 5.15.1; DbrxConfig sets ``ffn_config.hidden_size = d_model``, configuration_dbrx.py:167).
Exit 1 while the bug is there (generate() raises the shape error), 0 when generate() runs.
"""
import sys

import torch
import transformers
from transformers import DbrxConfig, DbrxForCausalLM

TRANSFORMERS = "<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    # the published checkpoints' proportions, shrunk: experts wider than the model (d_model 6144, ffn_hidden_size 10752)
    config = DbrxConfig(
        d_model=64, n_heads=4, n_layers=2, vocab_size=256, max_seq_len=64,
        attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        # hidden_size = d_model given explicitly: 5.0-5.14's DbrxFFNConfig defaults it to 6144 (5.15 sets it itself)
        ffn_config={"ffn_hidden_size": 128, "hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
    )
    torch.manual_seed(0)
    model = DbrxForCausalLM(config).eval()
    print(f"router: {model.transformer.blocks[0].ffn.router.layer}; d_model {config.d_model}")
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10]])
    try:
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                                 pad_token_id=0)
    except RuntimeError as exc:
        if "shapes cannot be multiplied" not in str(exc):
            raise
        print(f"BUG: generate() raised RuntimeError: {exc}")
        return 1
    print(f"generate() ran: {out[0, 6:].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

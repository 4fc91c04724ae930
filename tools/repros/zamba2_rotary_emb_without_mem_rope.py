#!/usr/bin/env python3
"""Zamba2 without ``use_mem_rope`` (its default) cannot run a forward in transformers 5.0-5.3.

``Zamba2Model.__init__`` creates ``self.rotary_emb`` only when ``config.use_mem_rope``
(modeling_zamba2.py:1270-1275 in 5.0.0), but ``Zamba2Model.forward`` calls it unconditionally
(modeling_zamba2.py:1340 in 5.0.0: ``position_embeddings = self.rotary_emb(hidden_states, ...)``), so every
forward of a config with ``use_mem_rope=False`` raises ``AttributeError: 'Zamba2Model' object has no attribute
'rotary_emb'``. 5.4.0 guards the call (``if self.config.use_mem_rope:``, modeling_zamba2.py:1284-1285).
Exit 1 while the bug is there (the forward raises it), 0 when a cached prefill and decode step run.
"""
import sys

import torch
import transformers

TRANSFORMERS = "<5.4"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def main() -> int:
    config = transformers.Zamba2Config(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, layers_block_type=["mamba", "hybrid"],
        num_attention_heads=4, num_key_value_heads=4, attention_head_dim=16, mamba_d_state=16, mamba_headdim=16,
        n_mamba_heads=8, intermediate_size=128, use_mem_rope=False,
    )
    torch.manual_seed(0)
    model = transformers.Zamba2ForCausalLM(config).eval()
    ids = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(0))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, use_mem_rope={config.use_mem_rope}")
    try:
        with torch.no_grad():
            output = model(input_ids=ids, use_cache=True)
            model(input_ids=ids[:, -1:], use_cache=True, past_key_values=output.past_key_values)
    except AttributeError as exc:
        if "rotary_emb" not in str(exc):
            raise
        print(f"BUG: the forward raised AttributeError: {exc}")
        return 1
    print("ok: a prefill and a cached decode step ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())

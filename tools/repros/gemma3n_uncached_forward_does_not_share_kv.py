"""Gemma 3n up to transformers 5.5: a forward without a cache does not share K/V, so use_cache=False is another model.

Gemma 3n's last num_kv_shared_layers decoder layers (15 of 35 in the default config, 10 of 30 in gemma-3n-E2B) have no
K/V of their own: they attend over the K/V of the last earlier layer of their kind. Up to 5.5 Gemma3nTextAttention
shares them through the cache only (``if self.is_kv_shared_layer and past_key_values is not None: key_states,
value_states = past_key_values.shared_layers[self.kv_shared_layer_index]``, modeling_gemma3n.py:1232-1233 in 5.5.4,
the same lines since 5.0.0; the sharing layer files them in ``past_key_values.shared_layers`` at :1250-1253). Without
a cache (use_cache=False: generate(use_cache=False), training, gradient checkpointing) the shared layers fall into
the ``else`` branch and project K/V with their own k_proj/v_proj/k_norm, weights the model never uses otherwise (the
checkpoints carry them; 5.6 drops them on load). So one uncached forward of a prompt and the cached prefill of the same
prompt give other logits from the first token, and generate() with and without the cache part. 5.6 threads a
``shared_kv_states`` dict through the layers and reads it whether or not there is a cache (modeling_gemma3n.py:1242-1243
and :1259-1260 in 5.6.2; upstream's words in huggingface/transformers#45312, the Gemma 4 twin: "the weight matrices of
shared layers are NEVER used, and ... kv states should ALWAYS be shared, even during training or inference without
Cache"): the same script exits 0.
A Gemma3nForCausalLM of the default (published) layer plan, 35 layers of which 15 share, at small widths with its own
random init: exit 1 when the uncached prefill leaves the cached one or greedy generate() parts with and without the
cache, else 0. Needs only torch and transformers.
"""
import sys

import torch
from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

TRANSFORMERS = "<5.6"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

# gemma-3n's layer plan (4 sliding + 1 full, the last 15 of 35 sharing K/V, AltUp, LAuReL, per-layer inputs, the
# activation sparsity of its first 10 layers), narrow: a few seconds on a CPU.
CONFIG = dict(vocab_size=256, vocab_size_per_layer_input=256, hidden_size=64, hidden_size_per_layer_input=16,
              intermediate_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=32, laurel_rank=8,
              max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=2)
PROMPT, STEPS = 8, 8


@torch.inference_mode()
def main() -> int:
    config = Gemma3nTextConfig(**CONFIG)
    torch.manual_seed(0)
    model = Gemma3nForCausalLM(config).eval()
    shared = [i for i, layer in enumerate(model.model.layers) if layer.self_attn.is_kv_shared_layer]
    print(f"{config.num_hidden_layers} layers, K/V shared by layers {shared[0]}-{shared[-1]}")
    prompt = torch.randint(3, config.vocab_size, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompt)

    cached = model(input_ids=prompt, attention_mask=mask, use_cache=True).logits.float()
    uncached = model(input_ids=prompt, attention_mask=mask, use_cache=False).logits.float()
    delta = float((cached - uncached).abs().max())
    limit = 1e-5 + 3e-5 * float(uncached.abs().max())
    print(f"one forward of the {PROMPT}-token prompt, use_cache=True vs use_cache=False: max |Δlogit| {delta:.3g} "
          f"(limit {limit:.3g}, max |logit| {float(uncached.abs().max()):.3g})")

    settings = dict(max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False, num_beams=1)
    tokens = {use_cache: model.generate(prompt, attention_mask=mask, use_cache=use_cache, **settings)[:, PROMPT:]
              for use_cache in (True, False)}
    parted = (tokens[True] != tokens[False]).any(dim=0).nonzero()
    print(f"greedy generate(use_cache=True):  {tokens[True].tolist()}")
    print(f"greedy generate(use_cache=False): {tokens[False].tolist()}")
    if len(parted):
        print(f"generate() with and without the cache part at generated token {int(parted[0])}")
    return 1 if delta > limit or len(parted) else 0


if __name__ == "__main__":
    sys.exit(main())

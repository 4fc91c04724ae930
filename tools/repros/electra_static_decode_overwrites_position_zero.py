"""ELECTRA up to transformers 5.3: a StaticCache's decode steps all write position 0, as ElectraModel.forward drops
the cache_position it computed instead of passing it to its layers.

transformers 5.3.0: ElectraModel.forward computes cache_position (modeling_electra.py:623-624) and hands it to its mask
builder, but calls self.encoder(...) without it (:645-654; :644 in 5.0.0; BERT passes cache_position=cache_position
there), so every attention calls StaticCache.update with cache_position None, and StaticLayer.update then writes the new
keys at arange(new tokens) (cache_utils.py:333-336 in 5.3.0): each decode step overwrites position 0, the cache never
grows past the prompt, and the token's own keys are missing from what it attends. generate(cache_implementation="static")
therefore returns other tokens than the dynamic cache. 5.4's StaticLayer counts its tokens itself (cumulative_length,
cache_utils.py in 5.4.0) and needs no cache_position. Exit 1 when the bug reproduces. Needs only torch and transformers.
"""
import sys

import torch
import transformers
from transformers import ElectraConfig, ElectraForCausalLM

TRANSFORMERS = "<5.4"

torch.manual_seed(0)
config = ElectraConfig(vocab_size=256, embedding_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_position_embeddings=64, is_decoder=True, initializer_range=0.2)
model = ElectraForCausalLM(config).eval()
prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
with torch.no_grad():
    runs = {kind: model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **settings,
                                 **({"cache_implementation": kind} if kind != "dynamic" else {}))
            for kind in ("dynamic", "static")}
    worst = max(float((a - b).abs().max()) for a, b in zip(runs["dynamic"].logits, runs["static"].logits, strict=True))
    new = prompt.shape[1]
print(f"transformers {transformers.__version__}")
for kind, out in runs.items():
    print(f"generate({kind} cache): {out.sequences[:, new:].tolist()}")
stored = int(runs["static"].past_key_values.get_seq_length())
print(f"max |Δlogit| static vs dynamic: {worst:.2e}; the static cache holds {stored} positions after "
      f"{new} + {len(runs['static'].logits) - 1} tokens")
sys.exit(1 if worst > 1e-3 else 0)

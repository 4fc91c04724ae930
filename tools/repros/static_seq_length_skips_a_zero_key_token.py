"""StaticCache up to transformers 5.3: get_seq_length() counts the positions whose layer-0 key is not all zero, so a token
whose key is zero (the pad token, whose embedding row is zero: nn.Embedding(padding_idx=pad_token_id)) is not counted,
and a forward without cache_position then writes the next token over it.

transformers 5.3.0: StaticLayer.get_seq_length returns (self.keys[0, 0].any(dim=-1)).sum() ("Occupied cache == any slot
holds a non-zero value", cache_utils.py:354-358). A GLM-4 built from its config (RMSNorm before k_proj, whose bias transformers initialises
to zero; a trained checkpoint's bias is not) turns the zero embedding of its pad token into an all-zero key at layer 0, so after decoding it the cache says it holds one token fewer; Glm4Model
.forward, given no cache_position, numbers the next token from get_seq_length() (modeling_glm4.py:417 in 5.3.0, :416 in
5.0.0), and it overwrites the pad token's slot with the wrong rotary position: its logits leave the dynamic cache's
(|Δlogit| 1.6). generate() passes cache_position itself and is not affected. 5.4's StaticLayer counts the tokens it was given (cumulative_length).
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights).
"""
import sys

import torch
import transformers
from transformers import DynamicCache, Glm4Config, Glm4ForCausalLM, StaticCache

TRANSFORMERS = "<5.4"

torch.manual_seed(0)
PAD = 255
config = Glm4Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=64, pad_token_id=PAD, eos_token_id=[254],
                    initializer_range=0.2)
model = Glm4ForCausalLM(config).eval()
prompt = torch.randint(3, 200, (1, 6), generator=torch.Generator().manual_seed(0))
steps = [torch.tensor([[17]]), torch.tensor([[PAD]]), torch.tensor([[42]]), torch.tensor([[99]])]
with torch.no_grad():
    results = {}
    for name, cache in (("dynamic", DynamicCache(config=config)), ("static", StaticCache(config=config, max_cache_len=16))):
        logits, lengths = [], []
        model(input_ids=prompt, past_key_values=cache, use_cache=True)
        for token in steps:  # a decode loop without cache_position, as the forward's signature allows
            logits.append(model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1])
            lengths.append(int(cache.get_seq_length()))
        results[name] = (logits, lengths)
worst = max(float((a - b).abs().max()) for a, b in zip(results["dynamic"][0], results["static"][0], strict=True))
print(f"transformers {transformers.__version__}; decode tokens {[int(t) for t in steps]} (pad id {PAD})")
for name, (_, lengths) in results.items():
    print(f"{name}: get_seq_length() after each decode step {lengths}")
print(f"max |Δlogit| static vs dynamic: {worst:.2e}")
sys.exit(1 if results["static"][1] != results["dynamic"][1] and worst > 1e-3 else 0)

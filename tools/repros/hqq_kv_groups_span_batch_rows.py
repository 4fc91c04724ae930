"""transformers 5.24 QuantizedCache(backend="hqq"): a quantization group mixes the values of every sequence of the
batch, so one sequence's cached K/V (and its logits) change with the other sequences it is batched with.

HQQQuantizedLayer._quantize (cache_utils.py:988-995) calls hqq's Quantizer.quantize(tensor, axis=0, group_size=...)
on the whole [batch, heads, tokens, head_dim] tensor; hqq groups with axis=0 as W.reshape([group_size, -1]) and
takes the min/max over axis 0 (hqq 0.2.8 hqq/core/quantize.py:110 and :118), so group j holds the flat elements j,
j + N, j + 2N, … (N = numel / group_size): values of other rows, heads and tokens. The class documents the
quantization as "per-channel with a set q_group_size"; quanto's groups (q_group_size consecutive values of one
token) keep the rows apart, and this script shows both. Decoding rows [a, b] and [a, c] must give row a the same
logits; with HQQ they differ from the first decode step on (the prefill is attended unquantized; every later step
reads the quantized part). Needs hqq and optimum-quanto (pip install "kvconform[quantized]").
Run: python hqq_kv_groups_span_batch_rows.py  (no kvconform import); exits 1 while HQQ's row a depends on its neighbour."""
import importlib.util
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM, QuantizedCache

TRANSFORMERS = ">=5.0"
if importlib.util.find_spec("hqq") is None or importlib.util.find_spec("optimum") is None:
    print('cannot show it here: hqq and optimum-quanto are not installed (pip install "kvconform[quantized]")')
    sys.exit(2)

torch.manual_seed(0)
config = AutoConfig.for_model("llama", hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, vocab_size=256)
model = AutoModelForCausalLM.from_config(config).eval()
generator = torch.Generator().manual_seed(0)
a, b, c = (torch.randint(3, 256, (1, 12), generator=generator) for _ in range(3))


def row_a_logits(backend: str, neighbour: torch.Tensor) -> torch.Tensor:
    """Row a's logits at every decode step, batched with ``neighbour`` (residual_length 3: flushed at steps 3 and 6)."""
    ids = torch.cat([a, neighbour])
    cache = QuantizedCache(backend=backend, config=model.config, nbits=4, q_group_size=16, residual_length=3)
    logits = [model(input_ids=ids[:, :6], cache=cache, use_cache=True).logits[0, -1]]
    for position in range(6, 12):
        logits.append(model(input_ids=ids[:, position : position + 1], cache=cache, use_cache=True).logits[0, -1])
    return torch.stack(logits)


with torch.inference_mode():
    for backend in ("quanto", "hqq"):
        delta = (row_a_logits(backend, b) - row_a_logits(backend, c)).abs().amax(dim=-1)
        print(f"{backend}: row a's max |Δlogit| per step, batched with b vs with c:", [f"{d:.2g}" for d in delta.tolist()])
sys.exit(1 if float(delta.max()) > 1e-5 else 0)

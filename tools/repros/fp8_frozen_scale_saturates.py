"""transformers 5.24 QuantizedCache(backend="fp8"): the per-tensor scale is frozen at the first update
(Fp8QuantizedLayer.lazy_initialization -> _quantize(tensor) calibrates on the prefill's amax; later
update() calls _quantize(key_states, scale=key_scale)), so a later token whose |K| or |V| exceeds the
prefill's amax goes beyond float8_e4m3fn's 448 and is stored saturated/out of range, not within rounding.
Run: python fp8_frozen_scale_saturates.py  (no kvconform import); exits 1 while later keys saturate the frozen scale."""
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, QuantizedCache

TRANSFORMERS = ">=5.21"  # QuantizedCache has no fp8 backend before 5.21

torch.manual_seed(0)
config = AutoConfig.for_model("gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=64, initializer_range=0.15)
model = AutoModelForCausalLM.from_config(config).eval()
ids = torch.randint(3, 256, (2, 14), generator=torch.Generator().manual_seed(0))
with torch.inference_mode():
    cache = QuantizedCache(backend="fp8", config=model.config)
    model(input_ids=ids[:, :6], cache=cache, use_cache=True)
    for p in range(6, 14):
        model(input_ids=ids[:, p : p + 1], cache=cache, use_cache=True)
    fresh = DynamicCache(config=model.config)
    model(input_ids=ids, cache=fresh, use_cache=True)
    q, scale = cache.layers[0]._quantized_keys
    want = fresh.layers[0].keys.float()
    got = q.float() * scale
    bound = 2**-4 * want.abs() + 2**-9 * scale
    ratio = float(want.abs().max() / scale)
    print("max |K| / frozen scale:", ratio, "(float8_e4m3fn max 448)")
    print("worst error / fp8 rounding bound:", float(((got - want).abs() / bound).max()))
sys.exit(1 if ratio > 448 else 0)

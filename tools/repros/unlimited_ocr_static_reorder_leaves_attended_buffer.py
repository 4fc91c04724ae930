"""UnlimitedOcr: reorder_cache on its static reference sliding window layer leaves the buffer attention reads unmoved.

transformers 5.24.0: UnlimitedOcrStaticReferenceSlidingWindowLayer keeps the prompt and the window in one buffer,
``all_keys`` / ``all_values``, of which ``prefill_keys`` and ``keys`` are views (modeling_unlimited_ocr.py:1443-1447), and
``update`` returns the whole buffer to attention. It defines no ``reorder_cache``: the inherited CacheLayerMixin.reorder_cache
rebinds ``self.keys`` / ``self.values`` to index_select copies (cache_utils.py:97-101), so ``all_keys`` keeps the old row
order, and the window's later writes go to the detached copy. Beam search reorders the cache every step
(generate(num_beams=..., cache_implementation="static")), so its static beams read other beams' keys. The dynamic layer
defines its own reorder_cache (modeling_unlimited_ocr.py:1367) and agrees.
Exit 1 when the static reorder differs from a prefill of the reordered rows while the dynamic one agrees.
Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import DynamicCache, StaticCache, UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

torch.manual_seed(0)
text = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "n_shared_experts": 1, "sliding_window": 4, "initializer_range": 0.15}
model = UnlimitedOcrForConditionalGeneration(UnlimitedOcrConfig(text_config=text)).eval()
prompt = torch.randint(3, 200, (2, 6), generator=torch.Generator().manual_seed(0))
steps = torch.tensor([[11, 12, 13], [21, 22, 23]])  # three tokens per row after the prompt, past nothing of the window
order = torch.tensor([1, 0])


def cache(kind: str) -> object:
    made = StaticCache(config=model.config, max_cache_len=12) if kind == "static" else DynamicCache(config=model.config)
    for layer in made.layers:  # where the prompt ends, as generate() declares it (generation_unlimited_ocr.py:63-77)
        layer.set_prefill_length(prompt.shape[1])
    return made


def decoded(kind: str, rows: torch.Tensor, reorder: bool) -> torch.Tensor:
    """Prefill ``rows``, reorder_cache(order) if asked, then decode ``steps`` (in the final row order) one by one."""
    made = cache(kind)
    with torch.no_grad():
        model(input_ids=rows, cache=made, use_cache=True)
        if reorder:
            made.reorder_cache(order)
        return torch.stack([model(input_ids=steps[:, k : k + 1], cache=made, use_cache=True).logits[:, -1]
                            for k in range(steps.shape[1])])


gaps = {}
for kind in ("dynamic", "static"):
    gaps[kind] = float((decoded(kind, prompt, True) - decoded(kind, prompt[order], False)).abs().max())
    print(f"{kind}: prefill, reorder_cache({order.tolist()}), decode vs a prefill of the reordered rows: max |Δlogit| {gaps[kind]:.2e}")
with torch.no_grad():
    kwargs = {"max_new_tokens": 4, "min_new_tokens": 4, "num_beams": 2, "do_sample": False, "output_scores": True,
              "return_dict_in_generate": True}
    beams = {kind: model.generate(prompt[:1], cache_implementation=kind, **kwargs) for kind in ("dynamic", "static")}
print("generate(num_beams=2): static beams", beams["static"].sequences[0, 6:].tolist(), "dynamic",
      beams["dynamic"].sequences[0, 6:].tolist())
sys.exit(1 if gaps["static"] > 1e-4 and gaps["dynamic"] < 1e-4 else 0)

"""UnlimitedOcr: assisted generate() declares no prompt length on its cache, so the first forward's drafts join the
prompt every later token attends to, and the assisted tokens part from greedy's once the window has passed them.

transformers 5.24.0: its text layers are reference sliding window attention (R-SWA): every token attends to the prompt
and the last `sliding_window` tokens. generate() declares the prompt's length on the cache before the prefill
(UnlimitedOcrGenerationMixin._prefill, generation_unlimited_ocr.py:63-77); _assisted_decoding calls the model's forward
directly (generation/utils.py:4072-4076), without _prefill, and the R-SWA layer then takes its first update's length for
the prompt (modeling_unlimited_ocr.py:1301-1305): the prompt plus the first drafts. crop() of rejected drafts shortens the
kept prompt keys but not that length (:1402-1406), so the next tokens are kept as prompt too, attended beyond the window.
kvconform sees it as the assisted check's logits leaving the uncached reference (the mask generate() uses) once the
window has passed. Here the assisted logits are compared with greedy generate()'s own, token by token up to where the
tokens part. Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

TRANSFORMERS = ">=5.20"

torch.manual_seed(0)
text = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "n_shared_experts": 1, "sliding_window": 4, "initializer_range": 0.15}
model = UnlimitedOcrForConditionalGeneration(UnlimitedOcrConfig(text_config=text)).eval()
model.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant")
prompt = torch.randint(3, 200, (1, 3), generator=torch.Generator().manual_seed(0))
steps = 12
with torch.no_grad():
    kwargs = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": steps, "do_sample": False,
              "output_logits": True, "return_dict_in_generate": True}
    greedy = model.generate(prompt, **kwargs)
    assisted = model.generate(prompt, assistant_model=model, **kwargs)
new_greedy, new_assisted = greedy.sequences[0, prompt.shape[1]:].tolist(), assisted.sequences[0, prompt.shape[1]:].tolist()
part = next((k for k, (a, b) in enumerate(zip(new_greedy, new_assisted, strict=False)) if a != b), len(new_greedy) - 1)
gaps = [float((a[0] - b[0]).abs().max()) for a, b in zip(assisted.logits[: part + 1], greedy.logits[: part + 1], strict=False)]
print(f"generate(assistant_model=model) against greedy generate(): tokens part at generated token {part} of {steps}; "
      "per-token |Δlogit| up to there " + ", ".join(f"{g:.1e}" for g in gaps))
sys.exit(1 if part < steps - 1 and max(gaps) > 1e-3 else 0)

#!/usr/bin/env python3
"""transformers 5.0-5.12: a second ``generate(cache_implementation="static")`` raises AttributeError when the static cache
the first call left on the model holds a layer no forward wrote.

kvconform check between_calls, the static cells of the T5 family (t5, mt5, umt5, longt5, switch_transformers, udop) and
of Mllama. generate() keeps its StaticCache on the model (``self._cache``) and, on the next call, asks it for
``max_batch_size`` to decide whether it can be reused (generation/utils.py:1756 in 5.3.0, :1799 in 5.12.1).
``Cache.max_batch_size`` reads ``layer.max_batch_size`` of every layer (cache_utils.py:866-868 in 5.3.0), an attribute a
StaticLayer sets only in its lazy_initialization, at its first update() (cache_utils.py:286). A layer that is never written
has none, so the second call raises. Two real paths leave such a layer:
- Mllama on a text-only prompt: the text model skips its cross-attention layers (modeling_mllama.py:1175-1184 in 5.3.0),
  while the StaticCache is sized by num_hidden_layers, those included;
- a T5-style config whose decoder is shallower than its encoder (num_decoder_layers < num_layers; published
  google/t5-efficient-*-dl* checkpoints): generate() sizes the cache by num_layers (the encoder's count);
- RecurrentGemma from 5.4 (its forward takes a cache from then): only its attention blocks write the StaticCache
  sized by num_hidden_layers, so the recurrent blocks' layers stay unwritten ('StaticSlidingWindowLayer' in the message).
5.13 asks the cache for ``batch_size``, which skips layers that have not been initialised (``hasattr(layer,
"batch_size")``, cache_utils.py:1437-1447 in 5.13.1; generation/utils.py:1833).
Exit 1 when a second static generate() with the same arguments raises that AttributeError (for either model), else 0.
"""
import sys

import torch
import transformers
from transformers import MllamaForCausalLM, T5Config, T5ForConditionalGeneration
from transformers.models.mllama.configuration_mllama import MllamaTextConfig

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def twice(model: torch.nn.Module, name: str, **inputs: torch.Tensor) -> bool:
    """Whether the second of two identical static generate() calls raises the AttributeError."""
    settings = {"max_new_tokens": 4, "do_sample": False, "cache_implementation": "static", "pad_token_id": 0}
    first = model.generate(**inputs, **settings)
    try:
        second = model.generate(**inputs, **settings)
    except AttributeError as exc:
        print(f"{name}: the second static generate() raised AttributeError: {exc}")
        return "max_batch_size" in str(exc)
    print(f"{name}: the second static generate() runs; same tokens as the first: {torch.equal(first, second)}")
    return False


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    mllama = MllamaForCausalLM(MllamaTextConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, cross_attention_layers=[1], max_position_embeddings=64, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)).eval()
    prompt = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(0))
    found = twice(mllama, "Mllama, text-only prompt", input_ids=prompt, attention_mask=torch.ones_like(prompt))
    torch.manual_seed(0)
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=3,
                                             num_decoder_layers=2, num_heads=4, decoder_start_token_id=0)).eval()
    found |= twice(t5, "T5, 3 encoder and 2 decoder layers", input_ids=prompt, attention_mask=torch.ones_like(prompt))
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("recurrent_gemma", vocab_size=256, hidden_size=64, intermediate_size=128,
                                               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                                               lru_width=64, attention_window_size=4, pad_token_id=0)
    gemma = transformers.AutoModelForCausalLM.from_config(config).eval()
    found |= twice(gemma, "RecurrentGemma (recurrent, recurrent, attention)", input_ids=prompt,
                   attention_mask=torch.ones_like(prompt))
    print(f"transformers {transformers.__version__}: {'bug' if found else 'no bug'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

"""T5 with an encoder deeper than its decoder: assisted generate() (prompt lookup, an assistant) raises TypeError in
transformers 5.14-5.21.

generate() sizes the cache by the encoder's layer count (generation/utils.py `_prepare_cache_for_generation` builds it
from `config.get_text_config(decoder=True)`, whose num_hidden_layers is T5's num_layers: see
t5_generate_cache_sized_by_encoder_layers.py), so a 3-layer encoder and 2-layer decoder leave one cache layer never
written (keys None). Assisted decoding crops the cache after every verification, and `DynamicLayer.crop` slices the
keys of every layer, the unwritten one too (cache_utils.py:179 in 5.20.2: TypeError: 'NoneType' object is not
subscriptable). 5.22 skips layers that hold nothing. Exit 1 when the bug reproduces. Needs only torch and transformers.
"""
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration

TRANSFORMERS = ">=5.14,<5.22"

torch.manual_seed(0)
config = T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_heads=4, num_layers=3, num_decoder_layers=2,
                  decoder_start_token_id=0)
model = T5ForConditionalGeneration(config).eval()
source = torch.randint(3, 200, (1, 5))
decoder_prompt = torch.tensor([[0, 5, 6, 7, 5, 6]])
try:
    model.generate(source, decoder_input_ids=decoder_prompt, max_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=3)
except TypeError as exc:
    print(f"generate(prompt_lookup_num_tokens=3) raises TypeError: {exc}")
    sys.exit(1)
print("generate(prompt_lookup_num_tokens=3) runs")
sys.exit(0)

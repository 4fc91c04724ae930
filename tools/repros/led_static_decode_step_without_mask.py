"""LED: a one-token decode step builds no attention mask, so with a StaticCache it attends to the unwritten slots.

transformers 5.24.0, modeling_led.py:1652-1659 (LEDDecoder.forward): the decoder creates its causal mask only when the
step has more than one token ("only create a causal mask when we go over a single token"). A DynamicCache hands
attention exactly the keys seen so far, so no mask is needed; a StaticCache hands it all max_cache_len preallocated
slots, the ones not written yet included (zeros), and nothing masks them. generate(cache_implementation="static")
then leaves a teacher-forced pass over its own tokens from the first decode step on; the dynamic cache agrees.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import LEDConfig, LEDForConditionalGeneration

torch.manual_seed(0)
config = LEDConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, attention_window=512,
                   max_encoder_position_embeddings=1024, max_decoder_position_embeddings=1024, init_std=0.15)
model = LEDForConditionalGeneration(config).eval()
source = torch.randint(3, 200, (2, 5))
decoder_prompt = torch.cat([torch.full((2, 1), config.decoder_start_token_id), torch.randint(3, 200, (2, 5))], dim=1)
worst = {}
with torch.no_grad():
    for implementation in (None, "static"):
        out = model.generate(source, decoder_input_ids=decoder_prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                             cache_implementation=implementation, output_logits=True, return_dict_in_generate=True)
        reference = model(input_ids=source, decoder_input_ids=out.sequences, use_cache=False).logits
        start = decoder_prompt.shape[1] - 1
        worst[implementation] = max(float((logits - reference[:, start + k]).abs().max()) for k, logits in enumerate(out.logits))
        print(f"cache_implementation={implementation}: max |Δlogit| to a teacher-forced pass over its tokens {worst[implementation]:.2e}")
sys.exit(1 if worst["static"] > 1e-3 and worst[None] < 1e-4 else 0)

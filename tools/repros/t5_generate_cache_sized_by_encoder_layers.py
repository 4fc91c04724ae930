"""T5: the cache generate() builds has the ENCODER's layer count, not the decoder's (num_layers != num_decoder_layers).

transformers 5.24.0, generation/utils.py:2284 (GenerationMixin._prepare_cache_for_generation): the cache is built from
`self.config.get_text_config(decoder=True)`, which for T5's flat config still reads `num_hidden_layers` as
`num_layers`, the encoder's count (T5Config.attribute_map; only T5Stack's decoder copy has
`num_layers = num_decoder_layers`, modeling_t5.py). So an encoder deeper than the decoder leaves generate()'s cache
holding layers no decoder layer fills (static: allocated and never written), and a decoder deeper than the encoder
(published google/t5-efficient-*-dl* checkpoints) makes generate() raise IndexError in DynamicCache.update
(cache_utils.py:1620) for the dynamic cache and the static one alike. mT5, UMT5, LongT5, SwitchTransformers and
Pop2Piano share the config layout. Exit 1 when the bug reproduces. Needs only torch and transformers (random weights).
"""
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration

source = torch.randint(3, 200, (2, 5))
found = []
for encoder_layers, decoder_layers in ((3, 2), (2, 3)):
    torch.manual_seed(0)
    config = T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_heads=4, num_layers=encoder_layers,
                      num_decoder_layers=decoder_layers, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(config).eval()
    for implementation in (None, "static"):
        try:
            out = model.generate(source, max_new_tokens=4, do_sample=False, cache_implementation=implementation,
                                 return_dict_in_generate=True)
            layers = len(out.past_key_values.self_attention_cache.layers)
            result = f"runs; its cache has {layers} self-attention layers"
            found.append(layers != decoder_layers)
        except IndexError as exc:
            result = f"raises IndexError: {exc}"
            found.append(True)
        print(f"encoder {encoder_layers} layers, decoder {decoder_layers}, cache_implementation={implementation}: {result}")
sys.exit(1 if any(found) else 0)

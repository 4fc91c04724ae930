"""BLIP: generate(cache_implementation="static") writes the image's cross-attention K/V into the self-attention layers.

transformers 5.24.0. BlipForConditionalGeneration.generate hands the prompt and the image's hidden states
(encoder_hidden_states) to self.text_decoder.generate (modeling_blip.py:919-926). The text decoder's config is no
encoder-decoder's (is_encoder_decoder False), so generate() builds one plain StaticCache for it
(generation/utils.py:2192-2199 adds a cross-attention half only for encoder-decoders). BlipTextEncoder.forward makes an
EncoderDecoderCache only of a DynamicCache or of no cache (modeling_blip_text.py:350-356); any other cache goes to every
attention as it is, and BlipTextSelfAttention updates it at the same layer index for its self- and its cross-attention
(modeling_blip_text.py:152-161, 173-174). The image's K/V are then appended to the layer's preallocated self-attention
slots, past max_cache_len: IndexError (index_copy_, cache_utils.py:487) at the prefill. The dynamic cache runs.
generate(cache_implementation="quantized") (QuantizedCache, fp8 backend from 5.21) gets the same plain cache and raises
nothing: every forward appends the image's K/V to the self-attention layers, so the returned cache holds the image's
positions once per call beside the text's (77 positions for a 9-token sequence after 4 forwards: 9 + 4 x 17).
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import BlipConfig, BlipForConditionalGeneration, cache_utils

TRANSFORMERS = ">=5.9"  # 5.0-5.8 raise first on BLIP's own mask (blip_static_cache_legacy_mask.py); tests/test_repros.py skips it there

torch.manual_seed(0)
config = BlipConfig(
    text_config={"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "intermediate_size": 128, "max_position_embeddings": 64, "bos_token_id": 255, "sep_token_id": 102,
                 "pad_token_id": 0},
    vision_config={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                   "image_size": 32, "patch_size": 8},
)
model = BlipForConditionalGeneration(config).eval()
pixel_values = torch.randn(2, 3, 32, 32)
# As BlipProcessor writes a prompt: [CLS] text [SEP]; generate() puts [DEC] (bos) first and drops the [SEP].
prompt = torch.cat([torch.full((2, 1), 101), torch.randint(110, 250, (2, 5)), torch.full((2, 1), 102)], dim=1)


def outcome(cache_implementation: str | None) -> str:
    try:
        with torch.no_grad():
            model.generate(pixel_values=pixel_values, input_ids=prompt, attention_mask=torch.ones_like(prompt),
                           max_new_tokens=4, min_new_tokens=4, do_sample=False, cache_implementation=cache_implementation)
        return "runs"
    except IndexError as exc:
        return f"raises IndexError: {exc}"


def quantized_lengths() -> tuple[int, int] | None:
    """(positions the returned fp8 QuantizedCache holds, positions of the sequence it has seen), or None before 5.21."""
    if not hasattr(cache_utils, "Fp8QuantizedLayer"):
        return None
    with torch.no_grad():
        out = model.generate(pixel_values=pixel_values, input_ids=prompt, attention_mask=torch.ones_like(prompt),
                             max_new_tokens=4, min_new_tokens=4, do_sample=False, cache_implementation="quantized",
                             cache_config={"backend": "fp8"}, return_dict_in_generate=True)
    return out.past_key_values.get_seq_length(), out.sequences.shape[1] - 1


runs = {impl: outcome(impl) for impl in (None, "static")}
for impl, result in runs.items():
    print(f"cache_implementation={impl}: {result}")
quantized = quantized_lengths()
if quantized is not None:
    print(f"cache_implementation=quantized (fp8): the returned cache holds {quantized[0]} positions for a sequence of {quantized[1]}")
broken_quantized = quantized is not None and quantized[0] != quantized[1]
sys.exit(1 if runs[None] == "runs" and (runs["static"] != "runs" or broken_quantized) else 0)

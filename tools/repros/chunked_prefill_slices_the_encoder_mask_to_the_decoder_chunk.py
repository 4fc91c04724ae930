#!/usr/bin/env python3
"""transformers 5.x: an encoder-decoder's generate(prefill_chunk_size=k) cuts the ENCODER's attention mask to the
decoder chunk's length.

Expected (model bug, transformers >= 5.1.0; 5.0.0 refuses chunked prefill for most encoder-decoders): the chunked prefill
pops model_kwargs["attention_mask"] and gives each chunk `attention_mask[:, :current_length]` (generation/utils.py:3840-3845
in 5.1.0, :4362-4392 in 5.24.0); for an encoder-decoder that mask is the encoder's, so each decoder chunk gets the first
2, 4, 6 encoder columns of a 9-position encoder input. On 5.1.0 even an all-ones mask reaches the cross-attention that
short and MVP (any decoder whose attention checks the mask: led, seamless_m4t) raises "Attention mask should be of
size (2, 1, 2, 9)"; from 5.2 an all-ones mask is dropped before it matters, but a batch whose encoder rows are padded
(as a tokenizer pads them) still raises on every release up to 5.25.0, where the unchunked generate() runs.
Pix2Struct (an image encoder-decoder: its encoder mask is the patch mask Pix2StructImageProcessor makes, 0 on the padding
patches of an image that does not fill max_patches, e.g. 2028 of 2048 for an 800x600 image) meets the same cut: up to
5.8 its decoder inverts whatever encoder mask it gets and adds it to the cross-attention scores
(`self.invert_attention_mask(encoder_attention_mask)`, modeling_pix2struct.py:1096 in 5.3.0, :1052 in 5.8.1), so even
an all-ones patch mask cut to the chunk's 2 columns raises RuntimeError "The size of tensor a (32) must match the size
of tensor b (2)"; from 5.9 it builds the mask with create_bidirectional_mask (:1046 in 5.9.0), which drops the cut mask
when its columns are all ones: the all-ones patch mask then runs, and a padded one (its padding patches come last, so
the cut columns are ones) lets the decoder chunks attend the padding patches, so the chunked generate() parts from the
unchunked one (5.9.0 to 5.25.0).
T5Gemma2's decoder concatenates its self-attention mask with the cross-attention mask made from the encoder mask, for
merged attention (modeling_t5gemma2.py:1085-1092 in 5.1.0): the first chunk's mask has 2 + 2 columns for 2 + 9 keys, and
SDPA raises "The size of tensor a (11) must match the size of tensor b (4)" with an all-ones mask too, on every release
from 5.0.0 (T5Gemma2's own _prepare_cache_for_generation puts the cache in model_kwargs before 5.0.0's refusal looks) to
5.25.0 (from 5.23 generate() refuses to chunk a prompt with raw pixel_values; this text-only input still raises).
Exit 1 when the chunked generate() raises or parts from the unchunked one, for either encoder mask of either model;
0 otherwise.
"""
import sys

import torch
import transformers
from transformers import (
    MvpConfig,
    MvpForConditionalGeneration,
    Pix2StructConfig,
    Pix2StructForConditionalGeneration,
    T5Gemma2Config,
    T5Gemma2ForConditionalGeneration,
)

TRANSFORMERS = ">=5.0"  # the releases this bug is in: T5Gemma2 from 5.0.0, the others from 5.1.0


def chunked_fails(model: torch.nn.Module, encoder_inputs: dict[str, torch.Tensor], mask: torch.Tensor, prompt: torch.Tensor,
                  what: str) -> bool:
    settings = {"do_sample": False, "max_new_tokens": 4, "eos_token_id": None, "pad_token_id": model.config.pad_token_id,
                "decoder_input_ids": prompt, "attention_mask": mask, "use_cache": True, **encoder_inputs}
    plain = model.generate(**settings)
    try:
        chunked = model.generate(prefill_chunk_size=2, **settings)
    except (ValueError, RuntimeError) as exc:
        if "Cannot use prefill chunking" in str(exc):  # 5.0.0: no chunked prefill for an encoder-decoder at all
            print(f"{what}: generate(prefill_chunk_size=2) is refused: {exc}")
            return False
        print(f"{what}: generate() runs; generate(prefill_chunk_size=2) raised {type(exc).__name__}: {exc}")
        return True
    same = torch.equal(chunked, plain)
    print(f"{what}: generate(prefill_chunk_size=2) {'gives' if same else 'parts from'} the unchunked generate()'s tokens")
    return not same


@torch.inference_mode()
def main() -> int:
    config = MvpConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                       forced_eos_token_id=None)
    torch.manual_seed(0)
    model = MvpForConditionalGeneration(config).eval()
    encoder_ids = torch.randint(4, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    start = torch.full((2, 1), config.decoder_start_token_id)
    prompt = torch.cat([start, torch.randint(4, 256, (2, 5), generator=torch.Generator().manual_seed(1))], dim=1)
    padded = torch.ones_like(encoder_ids)
    padded[1, -4:] = 0  # row 1 is 5 tokens long, padded on the right as a tokenizer pads a batch
    print(f"transformers {transformers.__version__}")
    failed = [chunked_fails(model, {"input_ids": encoder_ids}, torch.ones_like(encoder_ids), prompt, "MVP, an all-ones encoder mask"),
              chunked_fails(model, {"input_ids": encoder_ids}, padded, prompt, "MVP, a padded encoder row")]
    failed += pix2struct()
    failed += t5gemma2()
    return 1 if any(failed) else 0


def t5gemma2() -> list[bool]:
    """T5Gemma2 (google/t5gemma-2-270m-270m's layout narrowed: sliding and full layers, one KV head) on a text-only
    encoder input, with an all-ones and a padded encoder mask."""
    text = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64, "initializer_range": 0.15,
            "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2}
    vision = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "image_size": 32,
              "patch_size": 16}
    config = T5Gemma2Config(encoder={"text_config": text, "vision_config": vision, "mm_tokens_per_image": 4,
                                     "boi_token_index": 252, "eoi_token_index": 253, "image_token_index": 254},
                            decoder=text, image_token_index=254)
    torch.manual_seed(0)
    model = T5Gemma2ForConditionalGeneration(config).eval()
    encoder_ids = torch.randint(4, 250, (2, 9), generator=torch.Generator().manual_seed(0))
    prompt = torch.cat([torch.full((2, 1), 2), torch.randint(4, 250, (2, 5), generator=torch.Generator().manual_seed(1))], dim=1)
    padded = torch.ones_like(encoder_ids)
    padded[1, -4:] = 0
    return [chunked_fails(model, {"input_ids": encoder_ids}, torch.ones_like(encoder_ids), prompt, "T5Gemma2, an all-ones encoder mask"),
            chunked_fails(model, {"input_ids": encoder_ids}, padded, prompt, "T5Gemma2, a padded encoder row")]


def pix2struct() -> list[bool]:
    """Pix2Struct on 32 patches as Pix2StructImageProcessor lays them out: [row, column, pixels], numbered from 1; an image
    of 4 x 8 patches fills them all (an all-ones mask), one of 4 x 7 leaves 4 padding patches (zeros, mask 0)."""
    config = Pix2StructConfig(
        text_config={"vocab_size": 256, "hidden_size": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_heads": 4},
        vision_config={"hidden_size": 64, "patch_embed_hidden_size": 192, "d_ff": 128, "d_kv": 16, "num_hidden_layers": 2,
                       "num_attention_heads": 4})
    torch.manual_seed(0)
    model = Pix2StructForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(2)
    failed = []
    for rows, columns, what in ((4, 8, "Pix2Struct, an image filling the 32 patches"),
                                (4, 7, "Pix2Struct, an image of 28 patches and 4 padding ones")):
        patches, mask = torch.zeros(2, 32, 2 + 192), torch.zeros(2, 32, dtype=torch.long)
        count = rows * columns
        patches[:, :count, 0] = torch.arange(count).div(columns, rounding_mode="floor").float() + 1
        patches[:, :count, 1] = torch.arange(count).remainder(columns).float() + 1
        patches[:, :count, 2:] = torch.randn(2, count, 192, generator=generator)
        mask[:, :count] = 1
        start = torch.full((2, 1), config.text_config.decoder_start_token_id)
        prompt = torch.cat([start, torch.randint(4, 256, (2, 5), generator=torch.Generator().manual_seed(1))], dim=1)
        failed.append(chunked_fails(model, {"flattened_patches": patches}, mask, prompt, what))
    return failed


if __name__ == "__main__":
    sys.exit(main())

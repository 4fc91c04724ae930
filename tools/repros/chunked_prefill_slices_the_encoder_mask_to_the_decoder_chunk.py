#!/usr/bin/env python3
"""transformers 5.1+: an encoder-decoder's generate(prefill_chunk_size=k) cuts the ENCODER's attention mask to the
decoder chunk's length.

Expected (model bug, transformers >= 5.1.0; 5.0.0 refuses chunked prefill for encoder-decoders): the chunked prefill
pops model_kwargs["attention_mask"] and gives each chunk `attention_mask[:, :current_length]` (generation/utils.py:3840-3845
in 5.1.0, :4362-4392 in 5.24.0); for an encoder-decoder that mask is the encoder's, so each decoder chunk gets the first
2, 4, 6 encoder columns of a 9-position encoder input. On 5.1.0 even an all-ones mask reaches the cross-attention that
short and MVP (any decoder whose attention checks the mask: led, seamless_m4t) raises "Attention mask should be of
size (2, 1, 2, 9)"; from 5.2 an all-ones mask is dropped before it matters, but a batch whose encoder rows are padded
(as a tokenizer pads them) still raises on every release up to 5.25.0, where the unchunked generate() runs.
Exit 1 when the chunked generate() raises or parts from the unchunked one, for either encoder mask; 0 otherwise.
"""
import sys

import torch
import transformers
from transformers import MvpConfig, MvpForConditionalGeneration

TRANSFORMERS = ">=5.1"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def chunked_fails(model: MvpForConditionalGeneration, encoder_ids: torch.Tensor, mask: torch.Tensor, prompt: torch.Tensor,
                  what: str) -> bool:
    settings = {"do_sample": False, "max_new_tokens": 4, "eos_token_id": None, "pad_token_id": 1, "decoder_input_ids": prompt,
                "attention_mask": mask}
    plain = model.generate(encoder_ids, **settings)
    try:
        chunked = model.generate(encoder_ids, prefill_chunk_size=2, **settings)
    except ValueError as exc:
        if "Cannot use prefill chunking" in str(exc):  # 5.0.0: no chunked prefill for an encoder-decoder at all
            print(f"{what}: generate(prefill_chunk_size=2) is refused: {exc}")
            return False
        print(f"{what}: generate() runs; generate(prefill_chunk_size=2) raised ValueError: {exc}")
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
    failed = [chunked_fails(model, encoder_ids, torch.ones_like(encoder_ids), prompt, "an all-ones encoder mask"),
              chunked_fails(model, encoder_ids, padded, prompt, "a padded encoder row")]
    return 1 if any(failed) else 0


if __name__ == "__main__":
    sys.exit(main())

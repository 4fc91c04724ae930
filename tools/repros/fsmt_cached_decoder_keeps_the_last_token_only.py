#!/usr/bin/env python3
"""FSMT's cached decoder embeds every decoded token at position 0 and keeps only the last token of a longer input,
in transformers 5.0-5.17.

FSMT's ``DecoderFSMT.forward`` (modeling_fsmt.py:589-593 in 5.3.0, :578-582 in 5.17.0) was written for callers that
hand it the WHOLE decoder sequence at every step: it numbers the positions of the ids it is given
(``positions = self.embed_positions(input_ids)``, counting from the first of them) and then, with ``use_cache``, keeps
only the last id and its position (``input_ids = input_ids[:, -1:]``). transformers 5's generate() hands a cached
forward only the new token(s) (``prepare_inputs_for_generation``), so:
  - every decode step of generate() embeds its one new token at position 0, the start token's position: from the
    second generated token on, the cached generate() parts from a causal pass over the same tokens (the path every
    user of generate() runs, from the default one-token decoder start);
  - a cached forward of several decoder tokens (a longer decoder prompt, assisted decoding's drafts, a chunked
    prefill) keeps one token in the cache and returns logits for one position.
5.18 numbers the positions from the cache length (``embed_positions(input_ids, past_key_values_length=...)``,
modeling_fsmt.py:576-577 in 5.18.0) and keeps every token.
Exit 1 while the bug is there (generate()'s logits leave the teacher-forced pass, or a multi-token cached forward
keeps fewer tokens than it was given), 0 when both agree.
"""
import sys

import torch
import transformers
from transformers import FSMTConfig, FSMTForConditionalGeneration

TRANSFORMERS = "<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = FSMTConfig(
        src_vocab_size=256, tgt_vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_position_embeddings=64, init_std=0.15, langs=["en", "de"],
    )
    torch.manual_seed(0)
    model = FSMTForConditionalGeneration(config).eval()
    source = torch.randint(3, 200, (2, 5), generator=torch.Generator().manual_seed(0))
    # generate() as a translation runs it: the encoder input, the default one-token decoder start, the cache
    out = model.generate(source, max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=1,
                         output_logits=True, return_dict_in_generate=True)
    # a causal pass over the same tokens (use_cache=False with input_ids builds the decoder's causal mask)
    reference = model(input_ids=source, decoder_input_ids=out.sequences[:, :-1], use_cache=False).logits
    per_step = (torch.stack(out.logits, 1) - reference).abs().amax(dim=(0, 2))
    print(f"transformers {transformers.__version__}: generate()'s logits vs a causal pass over its tokens, max |Δ| per "
          f"generated token: {[f'{d:.1e}' for d in per_step.tolist()]}")
    # a cached forward of a 6-token decoder prompt
    decoder_ids = out.sequences[:, :6]
    cached = model(input_ids=source, decoder_input_ids=decoder_ids, use_cache=True)
    kept = cached.past_key_values.self_attention_cache.get_seq_length()
    print(f"a cached forward of {decoder_ids.shape[1]} decoder tokens returns logits for {cached.logits.shape[1]} "
          f"positions and leaves {kept} in the cache")
    bad = float(per_step.max()) > 1e-4 or kept != decoder_ids.shape[1]
    print("bug: the cached decoder numbers and keeps only the tokens it is handed" if bad else "fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

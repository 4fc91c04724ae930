#!/usr/bin/env python3
"""transformers 5.3+: an encoder-decoder's generate() continued from the cache a previous generate() returned feeds the
decoder the whole decoder sequence again.

Expected (model bug, transformers >= 5.3.0; 5.0-5.2 slice right): `generate(input_ids, decoder_input_ids=out.sequences,
past_key_values=out.past_key_values)`, the continuation of transformers' own test_generate_continue_from_past_key_values
(its testers add a decoder_attention_mask where they have one), must feed the decoder only the tokens the cache lacks.
The prefill slices the ids only when a mask as long as the ids is there (`_prefill`, generation/utils.py:3758-3763 in
5.3.0, :4313-4323 in 5.24.0); the length a decoder-only model records when it drops its all-ones mask (`_mask_length`,
:2899-2906 in 5.24.0) is never set for an encoder-decoder, so without a decoder_attention_mask all of
decoder_input_ids is fed again on top of the cache that holds it: the continued call's logits leave the one long
call's (BART here; every encoder-decoder whose generate() is GenerationMixin's). With a decoder_attention_mask of ones
(the control) the ids are sliced and the logits agree.
Exit 1 when the continued call feeds the decoder more tokens than the cache lacks and its logits differ; 0 otherwise.
"""
import sys

import torch
import transformers
from transformers import BartConfig, BartForConditionalGeneration

TRANSFORMERS = ">=5.3"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = BartConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                        forced_eos_token_id=None)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(config).eval()
    encoder_ids = torch.randint(4, 256, (1, 7), generator=torch.Generator().manual_seed(0))
    settings = {"do_sample": False, "return_dict_in_generate": True, "output_logits": True, "eos_token_id": None}
    long = model.generate(encoder_ids, max_new_tokens=8, **settings)
    fed: list[int] = []
    model.get_decoder().register_forward_pre_hook(lambda module, args, kwargs: fed.append(kwargs["input_ids"].shape[1]),
                                                  with_kwargs=True)

    def continued(**mask: torch.Tensor) -> tuple[float, int, int]:
        short = model.generate(encoder_ids, max_new_tokens=4, **settings)
        cache, sequences = short.past_key_values, short.sequences
        held = cache.get_seq_length()
        fed.clear()
        rest = model.generate(encoder_ids, decoder_input_ids=sequences, past_key_values=cache, max_new_tokens=4,
                              **{k: v(sequences) for k, v in mask.items()}, **settings)
        delta = max(float((rest.logits[k] - long.logits[4 + k]).abs().max()) for k in range(4))
        return delta, fed[0], sequences.shape[1] - held

    delta, got, missing = continued()
    print(f"transformers {transformers.__version__}: continued without a decoder_attention_mask: the decoder got {got} "
          f"token(s), the cache lacked {missing}; max |Δlogit| against one long generate(): {delta:.3g}")
    control, control_got, _ = continued(decoder_attention_mask=torch.ones_like)
    print(f"control, with decoder_attention_mask of ones: the decoder got {control_got} token(s), max |Δlogit| {control:.3g}")
    return 1 if got > missing and delta > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())

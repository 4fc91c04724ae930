#!/usr/bin/env python3
"""transformers 5.3+: in assisted generate() of an encoder-decoder, the encoder-decoder assistant's decoder is fed its
whole decoder sequence again on top of the cache that holds it, every round after the first.

Expected (model bug, transformers >= 5.3.0; 5.0-5.2 slice right): the candidate generator calls the assistant's
generate() with decoder_input_ids, the whole decoder sequence, and the assistant's cache, which it cropped to the
positions both models agree on (AssistedCandidateGenerator, candidate_generator.py:150-153 and :293-302 in 5.24.0), so the
assistant's prefill must feed only the tokens that cache lacks. The prefill slices the ids only when a mask as long as
the ids is there (`_prefill`, generation/utils.py:3758-3763 in 5.3.0, :4313-4323 in 5.24.0), and the length a
decoder-only model records when it drops its all-ones mask (`_mask_length`, :2899-2906 in 5.24.0) is never set for an
encoder-decoder: without a decoder_attention_mask the assistant's decoder gets the whole sequence at the positions after
its cache, so its cache holds more positions than the sequence and its drafts are computed at the wrong positions. The
main model verifies every draft, so the tokens stay greedy's; what is lost is the drafts. (The same slicing as
generate() continued from a returned cache: encoder_decoder_continued_generate_refeeds_the_decoder_prompt.py.) With a
decoder_attention_mask of ones (the control) the candidate generator carries the mask and the assistant is fed right.
Whisper's own generate() records the ids' length for the prefill (generation_config._mask_length) when handed a cache
without a mask, from 5.22 (generation_whisper.py:1027-1031 in 5.22.2): its row shows the same rounds on 5.3-5.21, none
after. Exit 1 when a BART assistant decoder forward is fed more tokens than its cache lacked; 0 otherwise.
"""
import sys

import torch
import transformers
from transformers import BartConfig, BartForConditionalGeneration, WhisperConfig, WhisperForConditionalGeneration

TRANSFORMERS = ">=5.3"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


Rounds = list[tuple[int, int, int]]  # (decoder sequence handed over, cached before, fed by the first decoder forward)


def refed_rounds(model: torch.nn.Module, assistant: torch.nn.Module, inputs: dict, **extra: torch.Tensor) -> tuple[Rounds, bool]:
    """The assistant's rounds fed more than its cache lacked, and whether assisted generate() returns greedy's tokens."""
    rounds: Rounds = []

    def handed(module, args, kwargs):
        if rounds and rounds[-1][2] < 0:
            rounds[-1] = (rounds[-1][0], rounds[-1][1], kwargs["input_ids"].shape[1])

    generate = assistant.generate

    def recorded(*args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        rounds.append((kwargs["decoder_input_ids"].shape[1], cache.get_seq_length() if cache is not None else 0, -1))
        return generate(*args, **kwargs)

    assistant.generate = recorded
    hook = assistant.get_decoder().register_forward_pre_hook(handed, with_kwargs=True)
    try:
        greedy = model.generate(**inputs, max_new_tokens=12, do_sample=False, eos_token_id=None)
        assisted = model.generate(**inputs, assistant_model=assistant, **extra, max_new_tokens=12, do_sample=False,
                                  eos_token_id=None)
    finally:
        hook.remove()
        del assistant.generate
    return [r for r in rounds if r[1] > 0 and r[2] > r[0] - r[1]], torch.equal(greedy, assisted)


def drafting(assistant: torch.nn.Module) -> torch.nn.Module:
    assistant.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
                                       assistant_confidence_threshold=0.0)
    return assistant.eval()


def whisper_rounds() -> Rounds:
    """Whisper and a 1-layer Whisper assistant on random input features (its generate() takes the encoder input only)."""
    config = WhisperConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=8,
                           max_source_positions=16, max_target_positions=64, decoder_start_token_id=1, eos_token_id=2,
                           pad_token_id=0, bos_token_id=1, suppress_tokens=None, begin_suppress_tokens=None)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    torch.manual_seed(1)
    assistant = drafting(WhisperForConditionalGeneration(WhisperConfig(**{**config.to_dict(), "decoder_layers": 1})))
    features = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(0))
    return refed_rounds(model, assistant, {"input_features": features})[0]


@torch.inference_mode()
def main() -> int:
    config = BartConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                        forced_eos_token_id=None)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(config).eval()
    torch.manual_seed(1)
    assistant = drafting(BartForConditionalGeneration(BartConfig(**{**config.to_dict(), "decoder_layers": 1})))
    encoder_ids = {"input_ids": torch.randint(4, 256, (1, 7), generator=torch.Generator().manual_seed(0))}
    faults, same = refed_rounds(model, assistant, encoder_ids)
    print(f"transformers {transformers.__version__}: assisted generate() returns greedy's tokens: {same}; assistant rounds "
          "fed more than their cache lacked (decoder sequence, cached, fed): " + (", ".join(map(str, faults)) or "none"))
    start = torch.full((1, 1), model.generation_config.decoder_start_token_id)
    control, _ = refed_rounds(model, assistant, encoder_ids, decoder_input_ids=start, decoder_attention_mask=torch.ones_like(start))
    print("control, with a decoder_attention_mask of ones: " + (", ".join(map(str, control)) or "none"))
    print("Whisper, whose generate() records the ids' length for the prefill from 5.22: " + (", ".join(map(str, whisper_rounds())) or "none"))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())

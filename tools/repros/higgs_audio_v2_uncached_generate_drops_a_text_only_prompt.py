#!/usr/bin/env python3
"""Higgs Audio v2's generate(use_cache=False) on a prompt without audio feeds its first decode step one frame alone.

Expected (model bug, measured on 5.24.0; earlier releases with the model not checked): after the prefill of a text-only
prompt (the zero-shot TTS prompt, ending in <|audio_out_bos|>), `audio_input_ids_mask` holds the one generated frame,
so `(~audio_input_ids_mask[:, :-1]).all()` is True for an empty slice and `prepare_inputs_for_generation` takes its
"decoding mode" (modeling_higgs_audio_v2.py:619-623 in 5.24.0): it drops `input_ids` and keeps the last frame only. With
a cache that is right (the text is in it); without one the forward gets one frame and the position ids of the whole
sequence, and raises in the attention output projection (RuntimeError: mat1 and mat2 shapes cannot be multiplied): the
text prompt is lost. A prompt with a reference audio (voice cloning) keeps two or more mask entries and is not
affected. The cached run is the consistent one: one uncached forward over the text and the cached frames gives the
cached run's logits at every step (the control).
Exit 1 when the uncached run's second forward gets no input_ids and raises or decodes other codes while the control
agrees; 0 when the two runs agree; 2 when the control disagrees (then this script shows nothing).
"""
import sys

import torch
from transformers import HiggsAudioV2Config, HiggsAudioV2ForConditionalGeneration

TRANSFORMERS = ">=5.4"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SEED, BATCH, TEXT, FRAMES = 0, 2, 8, 4
# Small widths, the published codebook layout (8 codebooks of 1024 codes + stream bos/eos: convert_higgs_audio_v2_to_hf.py
# builds HiggsAudioV2Config(codebook_size=1026)), special ids inside a 256-id vocabulary.
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "num_hidden_layers": 2, "vocab_size": 256, "codebook_size": 1026, "audio_token_id": 253, "audio_bos_token_id": 252,
         "audio_delay_token_id": 251, "eos_token_id": 254, "pad_token_id": 255}


def generate(model, text, use_cache):
    """Greedy generate(); its codes, raw logits, and which inputs every forward got."""
    seen = []

    def recording(module, args, kwargs):  # a hook, not a wrapper: generate() reads the forward's signature
        seen.append(sorted(name for name in ("input_ids", "audio_input_ids") if kwargs.get(name) is not None))

    hook = model.register_forward_pre_hook(recording, with_kwargs=True)
    try:
        out = model.generate(input_ids=text, use_cache=use_cache, do_sample=False, max_new_tokens=FRAMES,
                             return_dict_in_generate=True, output_logits=True)
    except Exception as exc:  # the frame-only forward raises (returned as the error)
        return None, f"{type(exc).__name__}: {exc}", seen
    finally:
        hook.remove()
    return out.audio_sequences, torch.stack(out.logits, dim=1), seen


@torch.inference_mode()
def main():
    torch.manual_seed(SEED)
    config = HiggsAudioV2Config(**SMALL)
    model = HiggsAudioV2ForConditionalGeneration(config).float().eval()
    text = torch.randint(3, 250, (BATCH, TEXT), generator=torch.Generator().manual_seed(SEED))
    text = torch.cat([text, torch.full((BATCH, 1), config.audio_bos_token_id)], dim=1)  # the generation prompt's bos
    cached, cached_logits, _ = generate(model, text, True)
    uncached, uncached_logits, seen = generate(model, text, False)
    print(f"cached codes [B, frames, K] {list(cached.shape)}; uncached forwards' inputs: {seen}")
    text_lost = len(seen) > 1 and seen[1] == ["audio_input_ids"]
    placeholders = torch.full((BATCH, FRAMES - 1), config.audio_token_id)
    control = model(input_ids=torch.cat([text, placeholders], dim=1), audio_input_ids=cached[:, :-1],
                    audio_input_ids_mask=torch.ones(BATCH, FRAMES - 1, dtype=torch.bool), use_cache=False).logits
    control = control[:, text.shape[1] - 1:].float()
    control_delta = float((control - cached_logits).abs().max())
    print(f"control: one uncached pass over the text and the cached frames vs the cached logits: max |Δ| {control_delta:.3g}")
    if control_delta > 1e-4 * max(1.0, float(control.abs().max())):
        print("the control disagrees: this script shows nothing here")
        return 2
    if uncached is None:
        if text_lost:
            print(f"BUG: the uncached run's second forward gets {seen[1]} only (one frame, no text) and raises {uncached_logits}")
            return 1
        print(f"the uncached run raised before losing the text: {uncached_logits}; this script shows nothing here")
        return 2
    if not torch.equal(cached, uncached) and text_lost:
        print(f"BUG: the uncached run's second forward gets {seen[1]} only (one frame, no text): its codes leave the cached run's")
        return 1
    print("cached and uncached generate() agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())

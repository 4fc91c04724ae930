#!/usr/bin/env python3
"""CSM's generate(use_cache=False) forgets the text prompt after the first frame: its codes leave the cached run's.

Expected (model bug, every 5.x release): CsmGenerationMixin._sample replaces the 2-D text `input_ids` by the first
generated frame (`if input_ids.ndim == 2: input_ids = next_tokens[:, None, :]`, generation_csm.py:293-294 in 5.24.0),
because the text is embedded once at the prefill and is then in the cache. Without a cache every later forward
recomputes the sequence from `input_ids` alone, which no longer holds the text: from the second frame on the uncached
run decodes speech for no prompt. The cached run is the consistent one: one uncached forward over the text's and every
cached frame's embeddings gives the cached run's scores at every step (the control).
Run with `--published` for CsmConfig's defaults (the 1B sesame/csm-1b shapes, about 5 GB in float32); the default is
the same model with small widths (the bug is in the control flow, not in the weights).
Before 5.18 that frames-only forward raises instead (5.3-5.17: the attention mask generate() grew for the text and
the frames does not fit the frames alone, RuntimeError in sdpa; 5.0-5.2: in the backbone attention's o_proj): the
same lost text, shown by the shape of the input it was given.
Exit 1 when the uncached run's second forward sees no text and its codes differ (or it raises) while the control
agrees; 0 when the two runs agree; 2 when the control disagrees (then this script shows nothing).
"""
import sys

import torch
from transformers import CsmConfig, CsmForConditionalGeneration

SEED, BATCH, TEXT, FRAMES = 0, 2, 5, 8
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "num_hidden_layers": 2, "text_vocab_size": 256, "vocab_size": 256, "codebook_pad_token_id": 254,
         "bos_token_id": 253, "pad_token_id": 255, "audio_token_id": 252, "audio_eos_token_id": 251,
         "depth_decoder_config": {"model_type": "csm_depth_decoder_model", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 256,
                                  "backbone_hidden_size": 64},
         "codec_config": {"model_type": "mimi", "hidden_size": 64, "upsample_groups": 64, "num_hidden_layers": 2, "intermediate_size": 128,
                          "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "codebook_dim": 64}}


def build(published):
    config = CsmConfig() if published else CsmConfig(**SMALL)
    torch.manual_seed(SEED)
    return CsmForConditionalGeneration(config).float().eval()


def generate(model, text, use_cache):
    """Greedy generate() (backbone and depth decoder); its codes, scores, and the shape of every backbone forward's input."""
    seen = []

    def recording(module, args, kwargs):  # a hook, not a wrapper: generate() reads the forward's signature
        ids, embeds = kwargs.get("input_ids"), kwargs.get("inputs_embeds")
        seen.append(tuple((ids if ids is not None else embeds).shape))

    hook = model.register_forward_pre_hook(recording, with_kwargs=True)
    try:
        out = model.generate(input_ids=text, use_cache=use_cache, do_sample=False, depth_decoder_do_sample=False,
                             max_new_tokens=FRAMES, return_dict_in_generate=True, output_scores=True)
    except Exception as exc:  # some releases raise on the frames-only forward instead (returned as the error)
        return None, f"{type(exc).__name__}: {exc}", seen
    finally:
        hook.remove()
    return out.sequences, torch.stack(out.scores, dim=1), seen


@torch.inference_mode()
def main():
    model = build("--published" in sys.argv)
    text = torch.randint(3, 250, (BATCH, TEXT), generator=torch.Generator().manual_seed(SEED))
    cached, cached_scores, _ = generate(model, text, True)
    uncached, uncached_scores, seen = generate(model, text, False)
    print(f"cached codes [B, frames, K] {list(cached.shape)}; uncached forwards' inputs: {seen}")
    text_lost = len(seen) > 1 and len(seen[1]) == 3 and seen[1][1] < TEXT + 1
    embeds = torch.cat([model.embed_text_tokens(text), model.backbone_model.embed_tokens(cached[:, :-1])], dim=1)
    control = model(inputs_embeds=embeds, use_cache=False).logits[:, TEXT - 1:].float()
    scale = float(control.abs().max())
    control_delta = float((control - cached_scores).abs().max())
    print(f"control: one uncached pass over the text and the cached frames vs the cached scores: max |Δ| {control_delta:.3g}")
    if control_delta > 1e-4 * max(1.0, scale):
        print("the control disagrees: this script shows nothing here")
        return 2
    if uncached is None:
        if text_lost:
            print(f"BUG: the uncached run's second forward gets {seen[1]} (frames only, no text) and raises {uncached_scores}")
            return 1
        print(f"the uncached run raised before losing the text: {uncached_scores}; this script shows nothing here")
        return 2
    differ = (cached != uncached).any(-1)
    for frame in range(FRAMES):
        delta = float((cached_scores[:, frame] - uncached_scores[:, frame]).abs().max())
        print(f"frame {frame}: codebook-0 scores max |cached - uncached| = {delta:.3g}; codes differ in rows "
              f"{differ[:, frame].nonzero().flatten().tolist()}")
    if differ.any() and text_lost:
        print(f"BUG: the uncached run's second forward sees {seen[1]} (frames only, no text): its codes leave the cached run's")
        return 1
    print("cached and uncached generate() agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())

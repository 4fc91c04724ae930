#!/usr/bin/env python3
"""Beam search on Mamba, FalconMamba, Mamba2 and xLSTM continues every beam from another beam's state in transformers 5.0-5.12.

Their state travels in ``model_kwargs["cache_params"]``, but ``GenerationMixin._beam_search`` reorders only
``model_kwargs["past_key_values"]`` between steps (generation/utils.py:3398-3400 in 5.12.1, 3472-3475 in 5.0.0), so
after the first beam shuffle each beam decodes from the wrong row's state. 5.13 reorders
``model_kwargs[cache_key]`` (generation/utils.py:3460-3462 in 5.13.1). xLSTM's cache (``xLSTMCache``) has no
``reorder_cache`` in any release, so from 5.13 generate() refuses its cached beam search in so many words
(generation/utils.py:3463-3466 in 5.13.1: "cannot use beam search with a cache currently"), which is not the silent
wrong result: the script counts that refusal as fixed. Exit 1 while the bug is there (cached and uncached beam search
return different beams), 0 when they agree or the cached beam search is refused.
"""
import sys

import torch
import transformers

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
MAMBA = {"vocab_size": 256, "hidden_size": 64, "state_size": 16, "num_hidden_layers": 2, "intermediate_size": 128,
         "conv_kernel": 4, "time_step_rank": 8}
CONFIGS = {"Mamba2": {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 8, "head_dim": 16,
                      "state_size": 8, "n_groups": 2, "conv_kernel": 4, "expand": 2, "chunk_size": 4},
           "xLSTM": {"vocab_size": 256, "hidden_size": 128, "num_hidden_layers": 2, "num_heads": 4}}
REFUSAL = "cannot use beam search with a cache currently"


def beams(model, prompt, use_cache):
    out = model.generate(prompt, num_beams=3, num_return_sequences=3, max_new_tokens=8, do_sample=False,
                         use_cache=use_cache, output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences.tolist(), out.sequences_scores


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    bad = False
    for name in ("Mamba", "FalconMamba", "Mamba2", "xLSTM"):
        config = getattr(transformers, f"{name}Config")(**CONFIGS.get(name, MAMBA))
        torch.manual_seed(0)
        model = getattr(transformers, f"{name}ForCausalLM")(config).eval()
        with torch.no_grad():
            for parameter in model.parameters():  # spread the logits so beams are not decided by ties
                parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.15)
        prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            try:
                cached, cached_scores = beams(model, prompt, True)
            except ValueError as exc:  # 5.13+: a cache without reorder_cache is refused, not silently left unordered
                if REFUSAL not in str(exc):
                    raise
                print(f"{name}: cached beam search refused ({exc})")
                continue
            uncached, uncached_scores = beams(model, prompt, False)
        delta = float((cached_scores - uncached_scores).abs().max())
        same = cached == uncached and delta < 1e-4
        print(f"{name}: same beams {cached == uncached}, max |score delta| {delta:.3g}")
        bad = bad or not same
    print("BUG: cached beam search leaves the uncached one" if bad else "ok: cached and uncached beams agree (or the cached one is refused)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

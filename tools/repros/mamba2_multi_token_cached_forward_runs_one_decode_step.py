#!/usr/bin/env python3
"""Up to transformers 5.12 a Mamba2 mixer computes a multi-token forward on a filled cache as one decode step.

Expected (model bug, transformers 5.0-5.12): Mamba2Mixer.torch_forward decides `is_decoding = cache_params is not None
and cache_params.has_previous_state(self.layer_idx)` (modeling_mamba2.py:416 in 5.12.1; NemotronH's and Zamba2's
mixers the same, modeling_nemotron_h.py:399, modeling_zamba2.py:687) and then takes the single-step recurrence for
the whole input, whatever its length: a chunked prefill, a prefix extended by several tokens, or assisted decoding's
verification of several drafts leaves one prefill over the same tokens. 5.13 adds `and seq_len == 1`
(modeling_mamba2.py:434 and :439 in 5.13.1). One prefill of 6 tokens against 3 cached forwards of 2 tokens each.
Exit 1 when the chunked forwards' logits leave the one prefill's; 0 when they agree.
"""
import inspect
import sys

import torch
import transformers

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

CONFIG = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 8, "head_dim": 16, "state_size": 8,
          "n_groups": 2, "conv_kernel": 4, "expand": 2, "chunk_size": 4, "initializer_range": 0.15}
LIMIT = 1e-4


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**CONFIG)).float().eval()
    prompt = torch.randint(3, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    one = model(input_ids=prompt, use_cache=True).logits
    params = inspect.signature(model.forward).parameters
    keyword = next(k for k in ("cache", "past_key_values", "cache_params") if k in params)  # the release's cache keyword
    cache, chunks = None, []
    for start in range(0, 6, 2):
        given = {keyword: cache} if cache is not None else {}
        if "cache_position" in params:  # the positions generate() passes (5.0-5.3 need them with a cache)
            given["cache_position"] = torch.arange(start, start + 2)
        output = model(input_ids=prompt[:, start : start + 2], use_cache=True, **given)
        cache, chunks = getattr(output, keyword), chunks + [output.logits]
    for k, chunk in enumerate(chunks):
        delta = float((chunk - one[:, 2 * k : 2 * k + 2]).abs().max())
        print(f"transformers {transformers.__version__}: chunk {k + 1} (tokens {2 * k}-{2 * k + 1}) vs one prefill: max |Δlogit| {delta:.3g}")
    worst = float((torch.cat(chunks, dim=1) - one).abs().max())
    return 1 if worst > LIMIT else 0


if __name__ == "__main__":
    sys.exit(main())

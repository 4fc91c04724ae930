#!/usr/bin/env python3
"""``generate(prompt_lookup_num_tokens=...)`` returns one token more than ``max_new_tokens`` up to transformers 5.13.

kvconform check assisted, the seq2seq sweep's T5-style cells [float32-cpu-dynamic] (t5, umt5, longt5, ...). Prompt
lookup caps its drafts at ``max_length`` (``end_idx = min(end_idx, input_length, self.max_length)``,
generation/candidate_generator.py:1101 in 5.13.1) although its own comment says ``max_length - 1``: "the target model
generates one extra token". When every draft of the last burst is accepted, ``_assisted_decoding`` appends that
bonus token too (``valid_tokens = selected_tokens[:, : n_matches + 1]``, generation/utils.py:3738) and the sequence
ends one past ``max_length``. 5.14 cuts the accepted tokens to the length budget (``tokens_budget``,
generation/utils.py:3796 in 5.14.1). The tokens up to max_new_tokens equal greedy's: the cache is right.

Exit 1 when prompt lookup returns more tokens than greedy generate() (or others), else 0.
"""
import sys
from typing import Any

import torch
import transformers

TRANSFORMERS = "<5.14"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

CONFIG: dict[str, Any] = {"vocab_size": 256, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4,
          "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
NEW_TOKENS = 6


@torch.inference_mode()
def overshoot(seed: int) -> tuple[list[int], list[int]]:
    """Greedy's and prompt lookup's new tokens for the model and inputs of one seed."""
    torch.manual_seed(seed)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**CONFIG)).eval()
    encoder_ids = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(seed))
    half = torch.randint(3, 256, (1, 3), generator=torch.Generator().manual_seed(seed + 1))
    decoder_ids = torch.cat([torch.zeros((1, 1), dtype=torch.long), half, half], dim=1)[:, :6]  # a repetition to look up
    # eos_token_id -1 (no token): fixed length, as transformers' own assisted-decoding tests run it
    settings = {"decoder_input_ids": decoder_ids, "max_new_tokens": NEW_TOKENS, "do_sample": False, "eos_token_id": -1}
    greedy = model.generate(encoder_ids, **settings)[0, decoder_ids.shape[1] :].tolist()
    looked_up = model.generate(encoder_ids, prompt_lookup_num_tokens=3, **settings)[0, decoder_ids.shape[1] :].tolist()
    return greedy, looked_up


def main() -> int:
    """Whether the overshoot happens depends on how many drafts the last burst accepts: 10 seeded models."""
    found = 0
    for seed in range(10):
        greedy, looked_up = overshoot(seed)
        if looked_up != greedy:
            found += 1
            print(f"seed {seed}: prompt lookup returns {len(looked_up)} new tokens {looked_up}, greedy {len(greedy)} "
                  f"{greedy} (max_new_tokens={NEW_TOKENS})")
    print(f"transformers {transformers.__version__}: {found} of 10 seeds return other tokens than greedy generate()")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

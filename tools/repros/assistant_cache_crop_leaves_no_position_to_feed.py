#!/usr/bin/env python3
"""transformers 5.15: after a round with rejected drafts, assisted generate() crops the assistant's cache one position
too few, so the assistant's next generate() finds every position of its sequence cached and feeds the whole sequence
again on top of the cache.

Expected (model bug, transformers 5.15 only): after each verification, AssistedCandidateGenerator._update_past_and_masks
must crop the assistant's cache below the new sequence's last token, which the assistant has not seen. 5.15.1 crops
remove_from_pkv + num_added_tokens positions from the cache's end (candidate_generator.py:294-296), counted from the
length the assistant's own generate() left, which holds its drafts but not the last one: after rejected drafts the cache
then holds as many positions as the new sequence. The assistant's prefill finds nothing to feed, next_sequence_length 0,
and input_ids[:, -0:] is the whole sequence (generation/utils.py:552 in 5.15.1): it is fed at the positions after the
cache, which then holds about twice the sequence. The main model verifies every draft, so plain causal LMs return
greedy's tokens; Kosmos-2's own mask builder raises on the doubled length ("The size of tensor a (71) must match the size
of tensor b (142)", modeling_kosmos2.py:934), and so do BLOOM's and Falcon's ALiBi
(assistant_cache_keeps_rejected_drafts_alibi.py, which exits 1 on that raise; this one on the cache itself). 5.14 crops to an absolute length (candidate_generator.py:298-299 in
5.14.1); 5.16 crops to input_ids.shape[-1] - 1 - remove_from_pkv - num_added_tokens (:297-301 in 5.16.1).
Exit 1 when an assistant round is handed a sequence no longer than its cache; 0 otherwise.
"""
import sys

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

TRANSFORMERS = ">=5.15,<5.16"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    torch.manual_seed(1)
    assistant = LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "num_hidden_layers": 1})).eval()
    assistant.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
                                       assistant_confidence_threshold=0.0)
    prompt = torch.randint(4, 256, (1, 8), generator=torch.Generator().manual_seed(0))
    settings = {"attention_mask": torch.ones_like(prompt), "max_new_tokens": 12, "do_sample": False, "eos_token_id": None}
    rounds: list[tuple[int, int]] = []  # (sequence handed over, cached before)
    generate = assistant.generate

    def recorded(*args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        rounds.append((kwargs["input_ids"].shape[1], cache.get_seq_length() if cache is not None else 0))
        return generate(*args, **kwargs)

    assistant.generate = recorded
    greedy = model.generate(prompt, **settings)
    assisted = model.generate(prompt, assistant_model=assistant, **settings)
    faults = [(length, held) for length, held in rounds if held >= length]
    print(f"transformers {transformers.__version__}: assisted generate() returns greedy's tokens: "
          f"{torch.equal(greedy, assisted)}; assistant rounds (sequence, cached): {rounds}; handed a sequence no longer "
          f"than its cache: {faults or 'none'}")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())

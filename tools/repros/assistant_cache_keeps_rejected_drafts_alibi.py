#!/usr/bin/env python3
"""Assisted decoding with an assistant model raises on BLOOM in transformers 5.15: the assistant's cache keeps the
drafts the main model rejected, and BLOOM's ALiBi bias, built from the 2-D attention mask, is then narrower than the keys.

Expected (model bug, transformers 5.15.x; 5.14.1 and 5.16.1 return greedy's tokens):
- After each verification AssistedCandidateGenerator._update_past_and_masks rolls the assistant's cache back. 5.14 crops
  it to an absolute length, `crop(input_ids.shape[-1] - 1 - remove_from_pkv - num_added_tokens)`
  (generation/candidate_generator.py:298-299 in 5.14.1); 5.15 removes a fixed count instead,
  `tokens_to_remove = remove_from_pkv + num_added_tokens; ...crop(-tokens_to_remove)` (:295-296 in 5.15.1), one token
  whatever was accepted. After a burst of k drafts the assistant's cache holds prompt + k - 1 tokens; with n of them
  accepted it should keep prompt + n - 1, so when n < k - 1 it keeps rejected drafts.
- When the cache then holds as many tokens as the new input_ids (n = k - 3: all 3 drafts rejected here), the
  assistant's next generate() prefill computes `next_sequence_length = input_ids.shape[1] - past_length` = 0
  (generation/utils.py:3936-3938 in 5.15.1) and slices `input_ids[:, -0:]` (:552), i.e. feeds the whole sequence
  again over the filled cache: 2x the keys. Models whose mask comes from the cache's sizes run on (wrong drafts only,
  the main model still verifies them); BLOOM builds its ALiBi bias from the 2-D attention_mask
  (build_alibi_tensor, modeling_bloom.py:505-510 in 5.15.1) and `alibi.baddbmm` (:270) raises "The expanded size of
  the tensor (14) must match the existing size (7)". Falcon with `alibi=True` (falcon-rw checkpoints) raises the same
  way (`attention_scores + alibi.view(...)`, modeling_falcon.py:405 in 5.15.1: "The size of tensor a (14) must match
  the size of tensor b (7)"); MPT, Falcon with rotary and Llama return greedy's tokens.
5.16 crops to `input_ids.shape[-1] - 1 - remove_from_pkv - num_added_tokens` from the cache's own length
(candidate_generator.py:297-301 in 5.16.1).
The main model has bigscience/bloom-560m's config shape (24 layers, width 1024, 16 heads, its vocabulary), the assistant
the same with 2 layers, both random. Their output head is untied: a random model with tied embeddings predicts its last
token again, so both would agree and every draft be accepted (a trained pair rejects some). The assistant drafts 3
tokens a burst without a confidence stop (num_assistant_tokens=3, constant schedule, assistant_confidence_threshold=0,
settings users pass; a random 250,880-way head is never 0.4 confident, which would stop every burst after 1 draft, the
one case the fixed count crops right). Exit 1 when assisted generate() raises that size mismatch; 0 when it returns greedy's tokens.
"""
import sys

import torch
import transformers
from transformers import BloomConfig, BloomForCausalLM

TRANSFORMERS = ">=5.15,<5.16"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

# bigscience/bloom-560m's config.json (shape and ids)
BLOOM_560M = {"vocab_size": 250880, "hidden_size": 1024, "n_layer": 24, "n_head": 16, "layer_norm_epsilon": 1e-5,
              "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
              "apply_residual_connection_post_layernorm": False, "use_cache": True, "tie_word_embeddings": False}


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(**BLOOM_560M)).eval()
    torch.manual_seed(1)
    assistant = BloomForCausalLM(BloomConfig(**{**BLOOM_560M, "n_layer": 2})).eval()
    assistant.generation_config.update(num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
                                       assistant_confidence_threshold=0.0)
    prompt = torch.randint(5, 250880, (1, 6), generator=torch.Generator().manual_seed(0))
    settings = {"max_new_tokens": 8, "do_sample": False, "attention_mask": torch.ones_like(prompt)}
    greedy = model.generate(prompt, **settings)
    try:
        assisted = model.generate(prompt, assistant_model=assistant, **settings)
    except RuntimeError as exc:
        print(f"transformers {transformers.__version__}: assisted generate() raised RuntimeError: {exc}")
        return 1 if "must match the existing size" in str(exc) else 2
    same = torch.equal(assisted, greedy)
    print(f"transformers {transformers.__version__}: assisted generate() {'returns' if same else 'does not return'} "
          "greedy's tokens")
    return 0 if same else 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""transformers 5.25: a linear-attention (SSM) cache cropped by as many tokens as it keeps states for restores the wrong
recurrent state, so assisted decoding on Mamba-style and hybrid models parts from greedy decoding.

5.25 makes linear-attention layers croppable: ``activate_past_recording(recurrent_states_to_keep=K)`` asks the mixers for
the recurrent states after each of a forward's last K tokens (``modeling_mamba2.py:455-523``), and
``LinearAttentionLayer.update_recurrent_state`` files them behind the state from *before* the forward
(``cache_utils.py:1331-1337``: ``history = [self.recurrent_states[state_idx].clone()] + history``, the last returned
state becoming the current one). ``crop(-k)`` then restores ``history[-k]`` (``cache_utils.py:1204``). For k < K that is
the state after token L-k, as it should be; for k = K it is the state from before the forward, which is right only when
the forward had exactly K tokens. Assisted decoding records K = the drafts per burst for the main model
(``generation/utils.py:4002``: ``recurrent_states_to_keep=candidate_generator.num_drafting_tokens``)
while each verification forward feeds 1 + K tokens (the last accepted token and K drafts), so when every draft is
rejected the cache goes back one token too far: the next token is computed from a state that lacks the accepted token.
5.24 marks these caches not croppable, and assisted decoding does not run on them.

Part 1 shows it on the cache: a 9-token prefill recording K = 3 states, ``crop(-k)`` for k = 1, 2, 3, then the next
token against one uncached pass. Part 2 on the path users run: ``generate(assistant_model=...)`` with a differently
seeded assistant of the same architecture against plain greedy ``generate()``.
Exit 1 while the bug is there, else 0. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

TRANSFORMERS = ">=5.25"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
KEEP = 3


def build(seed: int) -> AutoModelForCausalLM:
    config = AutoConfig.for_model("mamba2", vocab_size=256, hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16,
                                  state_size=16, n_groups=2, expand=2, chunk_size=8, initializer_range=0.15)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def crop_deltas(model: AutoModelForCausalLM, ids: torch.Tensor) -> list[float]:
    """|Δlogit| of the token after a 9-token prefill cropped by k = 1 … KEEP, against one uncached pass."""
    reference = model(input_ids=ids, use_cache=False).logits
    deltas = []
    for k in range(1, KEEP + 1):
        cache = DynamicCache(config=model.config)
        cache.activate_past_recording(recurrent_states_to_keep=KEEP)
        model(input_ids=ids[:, :9], cache=cache, use_cache=True)
        cache.crop(-k)
        kept = 9 - k
        step = model(input_ids=ids[:, kept : kept + 1], cache=cache, use_cache=True).logits[:, -1]
        deltas.append(float((step - reference[:, kept]).abs().max()))
    return deltas


def main() -> int:
    model, assistant = build(0), build(1)
    ids = torch.randint(3, 256, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        deltas = crop_deltas(model, ids)
        prompt = ids[:, :6]
        settings = {"max_new_tokens": 12, "min_new_tokens": 12, "do_sample": False, "output_logits": True,
                    "return_dict_in_generate": True}
        greedy = model.generate(prompt, **settings)
        assistant.generation_config.num_assistant_tokens = KEEP
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        # A trained assistant drafts all K tokens when it is confident; this random one is not (its default threshold
        # 0.4 stops most bursts after one draft, and crop(-1) is right), so it is told to draft every burst in full.
        assistant.generation_config.assistant_confidence_threshold = 0.0
        assisted = model.generate(prompt, assistant_model=assistant, **settings)
    steps = [float((a - g).abs().max()) for a, g in zip(assisted.logits, greedy.logits, strict=True)]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print("the next token after crop(-k) of a prefill recording", KEEP, "states, |Δlogit| vs one uncached pass:",
          ", ".join(f"k={k}: {d:.3g}" for k, d in enumerate(deltas, 1)))
    print(f"greedy generate():   {greedy.sequences[0, 6:].tolist()}\nassisted generate(): {assisted.sequences[0, 6:].tolist()}")
    print("per generated token, |Δlogit| of assisted against greedy:", ", ".join(f"{d:.2g}" for d in steps))
    bad_crop = deltas[-1] > 1e-3 and max(deltas[:-1]) < 1e-4
    bad_generate = max(steps) > 1e-3
    if bad_crop or bad_generate:
        print(f"BUG: crop(-{KEEP}) restores the wrong recurrent state" * bad_crop + ("; " if bad_crop and bad_generate else "")
              + f"assisted decoding's logits leave greedy's (max |Δ| {max(steps):.3g})" * bad_generate)
        return 1
    print("ok: crop(-k) restores the state after token L-k for every k, and assisted decoding equals greedy")
    return 0


if __name__ == "__main__":
    sys.exit(main())

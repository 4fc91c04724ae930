#!/usr/bin/env python3
"""RecurrentGemma lets left-padding tokens leak into the real tokens of a padded row: batched generate() (or any
forward with an attention_mask) gives a left-padded row other logits than the same row alone.

kvconform check ragged, cells recurrent_gemma[float32-cpu-dynamic] and -static; hidden there by kvconform's random
build, whose padding_idx embedding row is zero (_init_weights zeroes it) with zero biases, so a pad position's
hidden state is exactly 0 in every layer and adds nothing. A trained checkpoint has a non-zero pad row (and
non-zero biases), and then:

RecurrentGemmaRecurrentBlock.forward runs its temporal Conv1d (kernel conv1d_width=4, ``padding=conv1d_width-1``,
modeling_recurrent_gemma.py:403-409 in 5.24.0) over the whole left-padded sequence, ``x_branch =
self.conv_1d(x_branch)[..., :seq_len]`` (:446 in 5.24.0 and 5.25.0; :432 in 5.12.1; :480 in 5.0.0), and never
reads its ``attention_mask`` argument (:419), so the first conv1d_width-1 real tokens of a padded row convolve
the pads' x_branch. The RG-LRU resets its state at position 0 (``reset = position_ids[:, :, None] == 0``, :307,
and ``recurrent_gate * ~reset``, :364), which generate() puts on the first real token, but the conv output it
resets to already holds the pads, and the recurrence carries that into every later token and the decoded ones.
With conv1d_width=1 (no temporal mixing) the padded and unpadded rows agree to float rounding, so the conv is the
only leak; zeroing x_branch at the masked positions before the conv (a patched copy of 5.24.0) makes this script
exit 0 and kvconform's ragged cells pass with a non-zero pad row.

Shape: recurrentgemma-2b's block pattern (recurrent, recurrent, attention), conv width 4, lru_width = hidden_size,
one KV head, pad_token_id 0, shrunk (hidden 256, 3 layers, vocab 1024); the pad row is drawn like every other embedding row (as a checkpoint has it).
Exit 1 when the left-padded row's logits leave the unpadded row's, both in an uncached forward (no cache involved)
and in greedy generate(), 0 when not (2 when the conv-less control leaks too). On 5.18-5.22 the control's generate()
leaves its row as well (recurrent_gemma_config_cache_length_zero.py, another bug); its uncached forward does not.
"""
import sys

import torch
import transformers

TRANSFORMERS = ">=5.0"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

CONFIG = {"vocab_size": 1024, "hidden_size": 256, "intermediate_size": 1536, "num_hidden_layers": 3,
          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128, "lru_width": 256,
          "attention_window_size": 2048, "conv1d_width": 4, "block_types": ["recurrent", "recurrent", "attention"],
          "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1}
NEW_TOKENS = 8
ATOL, RTOL = 1e-5, 3e-5


def build(conv1d_width: int) -> transformers.RecurrentGemmaForCausalLM:
    torch.manual_seed(0)
    model = transformers.RecurrentGemmaForCausalLM(transformers.RecurrentGemmaConfig(**{**CONFIG, "conv1d_width": conv1d_width}))
    embed = model.get_input_embeddings()
    with torch.no_grad():  # a trained checkpoint's pad row is an ordinary, non-zero row
        embed.weight[embed.padding_idx] = torch.randn(embed.weight.shape[1], generator=torch.Generator().manual_seed(1)) * embed.weight[1:].std()
    return model.eval()


def generate(model, ids, mask):
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                         do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits, dim=1)


@torch.inference_mode()
def leak(conv1d_width: int) -> dict:
    """Max |Δlogit| of the left-padded rows against each row alone: uncached forward over the prompt (real positions)
    and greedy generate(); the limit; whether the greedy tokens agree."""
    model = build(conv1d_width)
    width, lengths = 6, [6, 4]
    prompts = torch.randint(3, CONFIG["vocab_size"], (2, width), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros_like(prompts)
    for row, length in enumerate(lengths):
        mask[row, width - length:] = 1
    padded = torch.where(mask.bool(), prompts, torch.zeros_like(prompts))
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as generate() makes them
    forward = model(input_ids=padded, attention_mask=mask, position_ids=positions, use_cache=False).logits
    tokens, logits = generate(model, padded, mask)
    result = {"forward": 0.0, "generate": 0.0, "limit": 0.0, "same": True}
    for row, length in enumerate(lengths):
        own = prompts[row:row + 1, width - length:]
        own_forward = model(input_ids=own, use_cache=False).logits
        own_tokens, own_logits = generate(model, own, torch.ones_like(own))
        result["forward"] = max(result["forward"], float((forward[row, width - length:] - own_forward[0]).abs().max()))
        result["generate"] = max(result["generate"], float((logits[row] - own_logits[0]).abs().max()))
        result["limit"] = max(result["limit"], ATOL + RTOL * float(own_logits.abs().max()), ATOL + RTOL * float(own_forward.abs().max()))
        result["same"] = result["same"] and torch.equal(tokens[row], own_tokens[0])
    return result


def main() -> int:
    print(f"transformers {transformers.__version__}")
    bug, control = leak(CONFIG["conv1d_width"]), leak(1)
    for name, r in (("conv1d_width=4", bug), ("control, conv1d_width=1 (no temporal conv)", control)):
        print(f"{name}: left-padded rows (6 and 4 tokens) vs each row alone, max |Δlogit|: uncached forward over the "
              f"prompt {r['forward']:.3g}, greedy generate() of {NEW_TOKENS} tokens {r['generate']:.3g} (limit "
              f"{r['limit']:.2g}); greedy tokens {'equal' if r['same'] else 'differ'}")
    if control["forward"] > control["limit"]:
        print("the control's uncached forward leaves the unpadded row too: cannot isolate the conv here")
        return 2
    return int(bug["forward"] > bug["limit"] and bug["generate"] > bug["limit"])


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Up to transformers 5.14 NemotronH's and Zamba2's Mamba2 scan carries the state between scan chunks wrongly.

Expected (model bug, transformers 5.0-5.14; NemotronH from its first release, 5.3): the torch_forward of
NemotronHMamba2Mixer and Zamba2MambaMixer computes the inter-chunk recurrence as
`(decay_chunk[..., None, None] * states_permuted[:, :, None, ...]).sum(dim=2)` (modeling_nemotron_h.py:555,
modeling_zamba2.py:843 in 5.13.1; :530, :818 in 5.12.1), which sums over the TARGET chunk of decay_chunk [b, h, target,
source] instead of the source chunk (Mamba2Mixer transposes it first and sums over the source: modeling_mamba2.py:581-582).
The state a scan chunk hands on is then its own contribution without the decayed earlier state, and the earlier state
enters scaled by (1 + decay). So a prompt longer than the config's chunk_size (128 or 256 in published checkpoints)
computes other logits than the same prompt scanned in one chunk, and from 5.13, whose multi-token cached forward starts
the scan from the cached state (`previous_states` from recurrent_states), every chunked prefill and every cached prefix
extended by several tokens leaves one prefill (|Δ| about 1e-2 on a tiny model: kvconform's chunked_prefill and
prefix_reuse on 5.13-5.14). 5.15 moves both to a shared scan that transposes decay_chunk and sums over the source
(modeling_nemotron_h.py:320-321, modeling_zamba2.py:610-611 in 5.15.1).
One uncached forward of 8 tokens with chunk_size=2 (a prompt 4 times the scan chunk, as a 512-token prompt is for a
published chunk_size of 128) against the same weights with chunk_size=64 (one scan chunk). Exit 1 when the scan's chunking changes the logits; 0 when not.
"""
import inspect
import sys

import torch
import transformers

TRANSFORMERS = "<5.15"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
SMALL = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 1, "initializer_range": 0.15, "max_position_embeddings": 64}
LIMIT = 1e-4


def nemotron_h(chunk_size):
    parameters = inspect.signature(transformers.NemotronHConfig.__init__).parameters
    layout = {"layers_block_type": ["mamba"]} if "layers_block_type" in parameters else {"hybrid_override_pattern": "M"}
    return transformers.NemotronHConfig(**SMALL, **layout, mamba_num_heads=8, mamba_head_dim=16, n_groups=2,
                                        ssm_state_size=8, conv_kernel=4, expand=2, chunk_size=chunk_size,
                                        use_mamba_kernels=False)


def zamba2(chunk_size):  # use_mem_rope: 5.0-5.3 call a rotary embedding they build only then (another bug)
    return transformers.Zamba2Config(**SMALL, layers_block_type=["mamba"], n_mamba_heads=8, mamba_headdim=16,
                                     mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1,
                                     use_mem_rope=True, chunk_size=chunk_size)


def build(name, make, chunk_size):
    torch.manual_seed(0)
    return getattr(transformers, f"{name}ForCausalLM")(make(chunk_size)).float().eval()


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    prompt = torch.randint(3, 256, (2, 8), generator=torch.Generator().manual_seed(0))
    bad = False
    for name, make in (("NemotronH", nemotron_h), ("Zamba2", zamba2)):
        if not hasattr(transformers, f"{name}ForCausalLM"):
            print(f"{name}: not in this release")
            continue
        one_chunk = build(name, make, 64)
        logits = one_chunk(input_ids=prompt, use_cache=False).logits
        delta = float((build(name, make, 2)(input_ids=prompt, use_cache=False).logits - logits).abs().max())
        print(f"{name}: the uncached forward scanned in chunks of 2 against one chunk: max |Δlogit| {delta:.3g}")
        bad = bad or delta > LIMIT
    print("BUG: the scan's chunking changes the logits" if bad else "ok: the scan's chunking leaves the logits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

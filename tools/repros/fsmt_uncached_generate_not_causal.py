"""FSMT: generate(use_cache=False) decodes without a causal mask, so its greedy tokens leave the model's own.

transformers 5.24.0, modeling_fsmt.py:857-866 (FSMTModel.forward): the decoder's causal mask is built only when
`not use_cache and input_ids is not None`. generate() runs the encoder once and passes `encoder_outputs` (no
`input_ids`) to every decoder call, so an uncached generate() feeds the whole decoder sequence each step with
`causal_mask = None`: in layer 1 the earlier positions attend to later tokens, and the last position's logits in
layer 2 read those. The cached generate() (one token per step) is right: its logits equal a teacher-forced uncached
pass that is given `input_ids`. The same condition as fsmt_cached_prefill_not_causal.py, reached by the uncached path.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import FSMTConfig, FSMTForConditionalGeneration

torch.manual_seed(0)
config = FSMTConfig(
    src_vocab_size=256, tgt_vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2,
    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
    max_position_embeddings=64, init_std=0.15, langs=["en", "de"],
)
model = FSMTForConditionalGeneration(config).eval()
source = torch.randint(3, 200, (2, 5))
settings = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": False, "num_beams": 1, "output_logits": True,
            "return_dict_in_generate": True, "decoder_start_token_id": config.decoder_start_token_id or 2}
with torch.no_grad():
    runs = {use_cache: model.generate(input_ids=source, use_cache=use_cache, **settings) for use_cache in (True, False)}
    worst = {}
    for use_cache, run in runs.items():  # each run's logits against one teacher-forced pass over its own tokens
        reference = model(input_ids=source, decoder_input_ids=run.sequences, use_cache=False).logits
        worst[use_cache] = max(float((logits - reference[:, k]).abs().max()) for k, logits in enumerate(run.logits))
print(f"generate(use_cache=True): max |Δlogit| to the teacher-forced pass {worst[True]:.2e}")
print(f"generate(use_cache=False): max |Δlogit| to the teacher-forced pass {worst[False]:.2e}")
print("tokens equal:", torch.equal(runs[True].sequences, runs[False].sequences))
sys.exit(1 if worst[False] > 1e-3 and worst[True] < 1e-4 else 0)

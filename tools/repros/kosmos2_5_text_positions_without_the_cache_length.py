"""Kosmos-2.5 (transformers 5.0-5.9): the text model numbers a cached forward's tokens from 0, and text-only generate()
prefills at positions without Kosmos-2.5's offset.

transformers 5.3.0, modeling_kosmos2_5.py. Kosmos2_5TextTransformer.forward embeds positions with
`past_key_values_length=0` (:957-962; :976 in 5.9.0, :1105 in 5.0.0) whatever the cache holds, so a forward over the
tokens after a cache, without position_ids (a hand-written decode loop, a prefix cache extended), places them at the
first positions again (create_position_ids_from_input_ids counts from padding_idx + 1, :694-707). generate() passes
position_ids, and Kosmos2_5ForConditionalGeneration.prepare_inputs_for_generation (:1463-1518) shifts them by
`1 + pad_token_id` only once the cache holds tokens (:1499-1502), and drops them at the prefill only when an image mask
is given (:1515-1516): a text-only prompt is prefilled at positions 0.. instead of pad_token_id + 1.., while its decode
steps sit at the offset ones, so generate()'s logits leave one forward over the same sequence (from 5.1; 5.0's
generate() hands no position_ids). 5.10 embeds from the cache length (`past_key_values_length=past_key_values_length`,
modeling_kosmos2_5.py:973-977 in 5.10.4) and always lets the embedding number the tokens.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
import transformers
from transformers import DynamicCache, Kosmos2_5Config, Kosmos2_5ForConditionalGeneration

TRANSFORMERS = "<5.10"  # 5.10 numbers from the cache length (tests/test_repros.py skips it elsewhere)

torch.manual_seed(0)
config = Kosmos2_5Config(
    text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "ffn_dim": 128, "attention_heads": 4,
                 "max_position_embeddings": 64},
    vision_config={"hidden_size": 64, "patch_embed_hidden_size": 192, "intermediate_size": 128, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "head_dim": 16},
    latent_query_num=16,
)
model = Kosmos2_5ForConditionalGeneration(config).eval()
prompt = torch.randint(3, 250, (2, 6), generator=torch.Generator().manual_seed(0))
LIMIT = 1e-4


def uncached(ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


with torch.no_grad():
    out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, min_new_tokens=4,
                         do_sample=False, return_dict_in_generate=True, output_logits=True)
    sequence = out.sequences
    reference = uncached(sequence)[:, prompt.shape[1] - 1 : -1]
    generate_gaps = [float((step - reference[:, k]).abs().max()) for k, step in enumerate(out.logits)]
    # The same tokens decoded by hand over a DynamicCache, as generate() feeds them but without position_ids.
    output = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), past_key_values=DynamicCache(), use_cache=True)
    loop_gaps = []
    for k in range(prompt.shape[1], sequence.shape[1]):
        output = model(input_ids=sequence[:, k : k + 1], attention_mask=torch.ones_like(sequence[:, : k + 1]),
                       past_key_values=output.past_key_values, use_cache=True)
        loop_gaps.append(float((output.logits[:, -1] - uncached(sequence[:, : k + 1])[:, -1]).abs().max()))

print(f"transformers {transformers.__version__}")
print("text-only generate(), each step's logits against one forward over the sequence, max |Δ|:", [f"{g:.2g}" for g in generate_gaps])
print("cached decode loop without position_ids against one forward, max |Δ|:", [f"{g:.2g}" for g in loop_gaps])
sys.exit(1 if max(generate_gaps + loop_gaps) > LIMIT else 0)

"""transformers 5.0-5.1: Kosmos-2.5's text model sizes its causal mask past + new + 1 keys without an attention_mask, so
a cached forward of several tokens raises under SDPA.

Kosmos2_5TextTransformer._update_causal_mask takes target_length = past_seen_tokens + sequence_length + 1 when no 2-D
attention_mask is given (modeling_kosmos2_5.py:969-974 in 5.0.0, :957-962 in 5.1.0), one column more than the keys a
DynamicCache returns. The eager attention cuts the mask to the keys (`attention_mask[:, :, :, : key.shape[-2]]`, :445),
5.0-5.1's SDPA attention does not, so a forward of several tokens over a filled cache (a copied prefix cache extended
by 2 tokens at once, a prompt prefilled in chunks) raises RuntimeError "The size of tensor a (N) must match the size of
tensor b (N+1)"; a one-token decode takes SDPA's is_causal / no-mask shortcut and runs. Mllama (and Bamba, FalconH1)
built their masks the same way (mllama_multi_token_cached_forward_mask_one_column_wide.py). 5.2 builds the mask with
masking_utils.create_causal_mask (modeling_kosmos2_5.py:992-998 in 5.2.0), sized by the cache, and this exits 0.
generate() always hands a 2-D attention_mask (then target_length is the mask's width): the raise is a direct forward's.

The extend is given its position_ids (padding_idx + 1 + position, as the embedding numbers a prompt from the start), so
Kosmos-2.5's other 5.0-5.9 finding, the cached forward numbered from 0 without them
(kosmos2_5_text_positions_without_the_cache_length.py), stays out of this one.
Exit 1 when the extend raises or its logits leave one uncached forward, else 0. Needs only torch and transformers.
"""
import copy
import sys

import torch
import transformers
from transformers import DynamicCache, Kosmos2_5Config, Kosmos2_5ForConditionalGeneration

TRANSFORMERS = "<5.2"  # 5.2 builds the mask with create_causal_mask (tests/test_repros.py skips it elsewhere)

torch.manual_seed(0)
config = Kosmos2_5Config(
    text_config={"vocab_size": 256, "embed_dim": 64, "layers": 2, "ffn_dim": 128, "attention_heads": 4,
                 "max_position_embeddings": 64},
    vision_config={"hidden_size": 64, "patch_embed_hidden_size": 192, "intermediate_size": 128, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "head_dim": 16},
    latent_query_num=16,
)
config._attn_implementation = "sdpa"  # the default where torch has SDPA; eager cuts the mask and runs
model = Kosmos2_5ForConditionalGeneration(config).eval()
ids = torch.randint(3, 250, (2, 6), generator=torch.Generator().manual_seed(0))
PREFIX, LIMIT = 4, 1e-4
offset = config.text_config.pad_token_id + 1  # the embedding numbers a sequence's first token padding_idx + 1


def extend(stored: DynamicCache, **mask: torch.Tensor) -> torch.Tensor:
    """The copied prefix cache extended by the last 2 tokens at once, at their positions; their logits."""
    positions = offset + torch.arange(PREFIX, ids.shape[1]).expand(ids.shape[0], -1)
    return model(input_ids=ids[:, PREFIX:], position_ids=positions, past_key_values=copy.deepcopy(stored),
                 use_cache=True, **mask).logits


print(f"torch {torch.__version__}, transformers {transformers.__version__}, {model.config.text_config._attn_implementation}")
with torch.no_grad():
    reference = model(input_ids=ids).logits[:, PREFIX:]
    stored = model(input_ids=ids[:, :PREFIX], past_key_values=DynamicCache(), use_cache=True).past_key_values
    with_mask = float((extend(stored, attention_mask=torch.ones_like(ids)) - reference).abs().max())
    print(f"extend with a 2-D attention_mask: max |cached - uncached| = {with_mask:.3g}")
    try:
        gap = float((extend(stored) - reference).abs().max())
    except RuntimeError as exc:  # the finding
        print(f"extend without an attention_mask raised RuntimeError: {exc}")
        sys.exit(1)
print(f"extend without an attention_mask: max |cached - uncached| = {gap:.3g} (limit {LIMIT:g})")
sys.exit(1 if max(gap, with_mask) > LIMIT else 0)

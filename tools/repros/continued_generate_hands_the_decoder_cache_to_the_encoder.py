#!/usr/bin/env python3
"""transformers 5.0-5.3: generate() continued from a returned cache hands that cache to the encoder, whose
self-attention layers write the encoder's positions into the decoder's self-attention cache.

Expected (model bug, transformers < 5.4; 5.4 fixes it): `generate(inputs, decoder_input_ids=out.sequences,
past_key_values=out.past_key_values)` runs the encoder on the input again; the encoder must not touch the decoder's
cache. `_prepare_encoder_decoder_kwargs_for_generation` drops only the `decoder_`, `cross_attn` and `use_cache`
arguments (`irrelevant_prefix`, generation/utils.py:919 in 5.2.0, :766 in 5.3.0) and passes everything else,
`past_key_values` too, to the encoder. An encoder that takes the cache (BERT's, as EncoderDecoderModel's encoder:
BertModel.forward -> BertEncoder -> BertSelfAttention, modeling_bert.py:697-702, :452-457, :184-196 in 5.2.0) or
forwards **kwargs to its layers (Moonshine's, modeling_moonshine.py:603-610 in 5.2.0; NLLB-MoE's,
modeling_nllb_moe.py:745, :544 in 5.2.0) updates `past_key_values.self_attention_cache` at the decoder's layer indices
(modeling_moonshine.py:300-308, :335; modeling_nllb_moe.py:491). The cache that held 4 decoder positions holds 4 + the
encoder length, so the continued prefill's `cache_position` is empty and generate() raises IndexError
(`_cache_dependant_input_preparation`, generation/utils.py:521 in 5.2.0); on 5.3 the continuation runs on the
corrupted cache. An encoder with other head counts than the decoder raises at the concatenation instead (RuntimeError
"Sizes of tensors must match except in dimension 2"). 5.4 adds `past_key_values` and `cache_params` to
`irrelevant_prefix` (generation/utils.py:774 in 5.4.0).
Exit 1 when the encoder call of a continued generate() changes the decoder cache's length; 0 otherwise (2 when no
model could be built: 5.4.0's configs refuse EncoderDecoderModel's booleans, config_bool_fields_typed_int.py).
"""
import sys

import torch
import transformers

TRANSFORMERS = "<5.4"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


def moonshine():
    from transformers import MoonshineConfig, MoonshineForConditionalGeneration

    config = MoonshineConfig(vocab_size=256, hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2,
                             decoder_num_hidden_layers=2, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
                             encoder_num_key_value_heads=4, decoder_num_key_value_heads=4)
    torch.manual_seed(0)
    return MoonshineForConditionalGeneration(config).eval(), {"input_values": torch.randn(1, 4000, generator=torch.Generator().manual_seed(0))}


def bert2bert():
    # EncoderDecoderModel of two BERTs, as from_encoder_decoder_pretrained("bert-base-uncased", ...) builds it
    from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

    shape = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    config = EncoderDecoderConfig.from_encoder_decoder_configs(
        BertConfig(**shape), BertConfig(**shape, is_decoder=True, add_cross_attention=True))
    config.decoder_start_token_id, config.pad_token_id = 101 % 256, 0
    torch.manual_seed(0)
    return EncoderDecoderModel(config=config).eval(), {"input_ids": torch.randint(4, 256, (1, 7), generator=torch.Generator().manual_seed(0))}


def nllb_moe():
    from transformers import NllbMoeConfig, NllbMoeForConditionalGeneration

    config = NllbMoeConfig(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_experts=4,
                           expert_capacity=8, max_position_embeddings=64)
    torch.manual_seed(0)
    return NllbMoeForConditionalGeneration(config).eval(), {"input_ids": torch.randint(4, 256, (1, 7), generator=torch.Generator().manual_seed(0))}


@torch.inference_mode()
def continued(build) -> bool | None:
    """Whether the continued generate()'s encoder call changed the decoder cache (None: the model was not built)."""
    try:
        model, given = build()
    except Exception as exc:  # a release whose config refuses the model (5.4.0's typed booleans)
        print(f"  {build.__name__}: not built on this release ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})")
        return None
    settings = {"do_sample": False, "return_dict_in_generate": True, "eos_token_id": None}
    short = model.generate(**given, max_new_tokens=4, **settings)
    cache = short.past_key_values
    held = cache.self_attention_cache.get_seq_length()
    after_encoder: list[int] = []
    model.get_encoder().register_forward_hook(
        lambda module, args, out: after_encoder.append(cache.self_attention_cache.get_seq_length()))
    try:
        model.generate(**given, decoder_input_ids=short.sequences, past_key_values=cache, max_new_tokens=4, **settings)
        outcome = "ran"
    except (IndexError, RuntimeError) as exc:
        outcome = f"raised {type(exc).__name__}: {exc}"
    print(f"  {type(model).__name__}: the decoder cache held {held} position(s); after the continued generate()'s "
          f"encoder call {after_encoder}; the continued generate() {outcome}")
    return bool(after_encoder) and after_encoder[0] != held


def main() -> int:
    print(f"transformers {transformers.__version__}")
    found = [continued(build) for build in (moonshine, bert2bert, nllb_moe)]
    if all(f is None for f in found):
        return 2
    return 1 if any(found) else 0


if __name__ == "__main__":
    sys.exit(main())

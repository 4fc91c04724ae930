#!/usr/bin/env python3
"""transformers 5.5-5.14 crop() leaves the conv layers of LFM2's cache as they are: after assisted decoding's rollback of
rejected drafts the conv window still holds the dropped tokens, and every next decode step leaves the uncached logits.

Expected (model bug, transformers 5.5.4-5.13.1 where assisted decoding reaches it; kvconform labels crop of lfm2, lfm2_moe
(5.5-5.12) and lfm2_vl (5.5-5.13), float32 dynamic cells):
- From 5.5 generate() builds LFM2 (and LFM2-MoE, and LFM2-VL's LFM2 language model) a DynamicCache whose conv layers are
  LinearAttentionLayers (before 5.5 it builds none: _supports_default_dynamic_cache is False, and the crop path of a
  cache generate() built does not apply).
- Assisted decoding rolls the rejected drafts back with past_key_values.crop (generation/utils.py:3624 in 5.5.4, :3686 in
  5.12.1, :3752 in 5.13.1), and LinearAttentionCacheLayerMixin.crop does nothing ("We don't crop the linear attention
  cache, so simply do nothing here", cache_utils.py:729-730 in 5.5.4, :912-913 in 5.12.1, :923-924 in 5.13.1).
- generate() refuses assisted decoding for a class declared stateful: Lfm2ForCausalLM and Lfm2MoeForCausalLM from 5.13
  (modeling_lfm2.py:484, modeling_lfm2_moe.py:573 in 5.13.1), Lfm2VlForConditionalGeneration only from 5.14
  (modeling_lfm2_vl.py:89 in 5.14.1). 5.15 records the conv states (Cache.activate_past_recording, which assisted
  decoding calls) and crops them: the decode after the crop is the uncached one's.
Here: a prefill of P + 3 tokens on the cache the model's forward builds (the DynamicCache generate() builds), crop(P) as
assisted decoding calls it before 5.14 (crop(-3) from 5.14; past recording started first where the release has it), and
the same 6 tokens decoded again one by one against one uncached forward. Control: the conv states of a P-token prefill
put back after the crop give the uncached logits (|Δ| ~5e-6), so the conv window is the whole cause.
Exit 1 when, for a class generate() runs assisted decoding on, the decode after the crop leaves the uncached logits;
0 when it does not (or generate() builds such a class no cache, or refuses it).
"""
import inspect
import sys

import torch
import transformers

TRANSFORMERS = ">=5.5,<5.14"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
COMMON = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 64, "conv_L_cache": 3, "initializer_range": 0.15,
          "pad_token_id": 0, "layer_types": ["conv", "conv", "full_attention", "conv"], "num_hidden_layers": 4}
CONFIGS = {
    "lfm2": {"full_attn_idxs": [2]},
    "lfm2_moe": {"num_dense_layers": 1, "moe_intermediate_size": 64, "num_experts_per_tok": 2, "num_experts": 4},
}
LIMIT = 1e-3  # float32 logits of these models agree with the uncached ones to about 1e-5
PROMPT, CROPPED, TOTAL = 6, 3, 12


def build(model_type: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if model_type == "lfm2_vl":  # LFM2-VL's language model is an LFM2 (a text-only prompt reaches it alone)
        vision = {"model_type": "siglip2_vision_model", "hidden_size": 32, "intermediate_size": 64,
                  "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": 8, "num_patches": 16}
        config = transformers.AutoConfig.for_model("lfm2_vl", vision_config=vision, projector_hidden_size=64,
                                                   text_config={"model_type": "lfm2", **COMMON, **CONFIGS["lfm2"]},
                                                   image_token_id=250)
        return transformers.AutoModelForImageTextToText.from_config(config).float().eval()
    config = transformers.AutoConfig.for_model(model_type, **COMMON, **CONFIGS[model_type])
    return transformers.AutoModelForCausalLM.from_config(config).float().eval()


def crop_off(cache, tokens: int) -> None:
    """The call this release's assisted decoding makes: crop(-tokens) from 5.14, crop(length - tokens) before."""
    source = inspect.getsource(transformers.generation.utils.GenerationMixin._assisted_decoding)
    cache.crop(cache.get_seq_length() - tokens if ".crop(new_cur_len" in source else -tokens)


def record_past(cache) -> bool:
    """Start recording the past as assisted decoding does where the release has it (5.15+; from 5.25 it keeps the
    states of the last recurrent_states_to_keep tokens, generation/utils.py:4002 in 5.25.0)."""
    start = getattr(cache, "activate_past_recording", None)
    if start is None:
        return False
    parameters = inspect.signature(start).parameters.values()
    if any(p.name == "recurrent_states_to_keep" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        start(recurrent_states_to_keep=CROPPED)
    else:
        start()
    return True


def conv_layers(cache) -> dict:
    return {i: layer for i, layer in enumerate(getattr(cache, "layers", [])) if getattr(layer, "conv_states", None) is not None}


@torch.inference_mode()
def reproduces(model_type: str) -> bool:
    model = build(model_type)
    cls = type(model)
    if not cls._supports_default_dynamic_cache():
        print(f"{model_type}: generate() builds {cls.__name__} no Cache (it keeps its own): not reached")
        return False
    if getattr(cls, "_is_stateful", False):
        print(f"{model_type}: generate() refuses assisted decoding for {cls.__name__} (_is_stateful): not reached")
        return False
    sequence = torch.randint(3, 250, (1, TOTAL), generator=torch.Generator().manual_seed(0))
    reference = model(sequence, use_cache=False).logits[0]

    def decode(restore: bool) -> float:
        cache = transformers.DynamicCache(config=model.config)  # what generate() builds (generation/utils.py)
        recording = record_past(cache)
        model(sequence[:, : PROMPT + CROPPED], past_key_values=cache, use_cache=True)
        crop_off(cache, CROPPED)
        if restore and not recording:  # the control (5.5-5.14): the conv window a prefill of the kept tokens leaves
            kept = model(sequence[:, :PROMPT], use_cache=True).past_key_values
            for i, layer in conv_layers(kept).items():
                cache.layers[i].conv_states = layer.conv_states.clone()
        worst = 0.0
        source = inspect.getsource(transformers.generation.utils.GenerationMixin._assisted_decoding)
        every_step = "if number_of_tokens_to_crop > 0" not in source  # 5.14 crops only rejected drafts
        for position in range(PROMPT, TOTAL):
            logits = model(sequence[:, position : position + 1], past_key_values=cache, use_cache=True).logits[0, -1]
            worst = max(worst, float((logits - reference[position]).abs().max()))
            if recording and every_step:  # 5.15+ crops after every forward (crop(0): the recording back to its size)
                cache.crop(0)
        return worst

    worst, control = decode(False), decode(True)
    print(f"{model_type}: after crop back {CROPPED} tokens, max |Δlogit| {worst:.3g} (control, the conv states of a "
          f"{PROMPT}-token prefill put back where the release records no past: {control:.3g})")
    if control > LIMIT:
        print(f"{model_type}: the control leaves the uncached logits too: cannot show it")
        raise SystemExit(2)
    return worst > LIMIT


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    bad = [model_type for model_type in [*CONFIGS, "lfm2_vl"] if reproduces(model_type)]
    print(f"crop() leaves the conv state: {bad}" if bad else "the decode after crop() is the uncached one's (or not reached)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""transformers 5.0.0: several config classes define no pad_token_id while their models read config.pad_token_id.

In 5.0.0 PhiConfig, JetMoeConfig, StableLmConfig and Exaone4Config have no ``pad_token_id`` attribute (the 5.0 config
classes declare their fields; these omit it, configuration_phi.py in 5.0.0), while their models' __init__ read it
(``self.padding_idx = config.pad_token_id``, modeling_phi.py:348 in 5.0.0), so building the model from its config, as
``from_config`` does for any config.json without a pad_token_id key, raises AttributeError. 5.1.0 declares the field
(configuration_phi.py:141, ``pad_token_id: int | None = None``). Qwen2_5OmniTalkerConfig alike (its model reads it at
modeling_qwen2_5_omni.py:2205 in 5.0.0; 5.1.0 declares it).
Exit 1 while the bug is there (a model of these types cannot be built), 0 when every one builds and runs a cached step.
"""
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

TRANSFORMERS = "<5.1"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SHRINK = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 64}


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    broken = []
    for model_type in ("phi", "jetmoe", "stablelm", "exaone4"):
        config = AutoConfig.for_model(model_type, **{k: v for k, v in SHRINK.items() if hasattr(AutoConfig.for_model(model_type), k)})
        try:
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config).eval()
            with torch.no_grad():
                out = model(input_ids=torch.tensor([[5, 6, 7]]), use_cache=True)
                model(input_ids=torch.tensor([[8]]), use_cache=True, past_key_values=out.past_key_values)
            print(f"{model_type}: builds and runs a cached step")
        except AttributeError as exc:
            if "pad_token_id" not in str(exc):
                raise
            print(f"BUG {model_type}: {type(config).__name__} has pad_token_id: {hasattr(config, 'pad_token_id')}; building raised {exc}")
            broken.append(model_type)
    try:
        from transformers import Qwen2_5OmniTalkerConfig, Qwen2_5OmniTalkerForConditionalGeneration

        Qwen2_5OmniTalkerForConditionalGeneration(Qwen2_5OmniTalkerConfig(**{k: v for k, v in SHRINK.items() if k != "vocab_size"}))
        print("qwen2_5_omni talker: builds")
    except AttributeError as exc:
        if "pad_token_id" not in str(exc):
            raise
        print(f"BUG qwen2_5_omni talker: Qwen2_5OmniTalkerConfig declares no pad_token_id; building raised {exc}")
        broken.append("qwen2_5_omni")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

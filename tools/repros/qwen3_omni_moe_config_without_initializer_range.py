#!/usr/bin/env python3
"""transformers 5.4.0: no Qwen3-Omni-MoE model builds: its weight init reads config.initializer_range, a field 5.4's
Qwen3OmniMoeConfig does not have.

Expected (model bug, transformers 5.4 only; 5.5 adds the field, defaulting to the thinker's): building
Qwen3OmniMoeForConditionalGeneration runs Qwen3OmniMoePreTrainedModel._init_weights on every module, which reads
``std = self.config.initializer_range`` (modeling_qwen3_omni_moe.py:125 in 5.4.0); Qwen3OmniMoeConfig has no such
attribute in 5.4.0 (configuration_qwen3_omni_moe.py declares it on its sub-configs only; 5.5.4 adds
``initializer_range: float | None = None`` to the top-level config, set from thinker_config), so the build raises
AttributeError. Shown on the top-level model with its sub-models shrunk to a few layers.
Exit 1 when the build raises that AttributeError; 0 when it builds.
"""
import sys

import transformers
from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

TRANSFORMERS = ">=5.4,<5.5"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 256}


def main() -> int:
    config = Qwen3OmniMoeConfig()
    print(f"transformers {transformers.__version__}: Qwen3OmniMoeConfig has initializer_range: "
          f"{hasattr(config, 'initializer_range')}")
    for sub in (config.thinker_config.text_config, config.talker_config.text_config,
                config.talker_config.code_predictor_config):
        for key, value in SMALL.items():
            if hasattr(sub, key):
                setattr(sub, key, value)
    # fields published configs set that the talker's config classes do not declare (the suite's families.yaml)
    config.talker_config.text_config.shared_expert_intermediate_size = 128
    config.talker_config.spatial_merge_size = 2
    towers = {"audio_config": {"d_model": 64, "encoder_layers": 1, "encoder_attention_heads": 4, "encoder_ffn_dim": 128,
                               "output_dim": 64},
              "vision_config": {"depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
                                "out_hidden_size": 64, "deepstack_visual_indexes": [0]}}
    for name, values in towers.items():
        for key, value in values.items():
            setattr(getattr(config.thinker_config, name), key, value)
    for key, value in {"decoder_dim": 64, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "intermediate_size": 128}.items():
        setattr(config.code2wav_config, key, value)
    try:
        Qwen3OmniMoeForConditionalGeneration(config)
    except AttributeError as exc:
        if "initializer_range" not in str(exc):
            raise
        print(f"building the model raised AttributeError: {exc}")
        return 1
    except Exception as exc:  # another failure of the shrunk build is not this bug
        print(f"the shrunk build failed otherwise ({type(exc).__name__}: {exc}); initializer_range present: "
              f"{hasattr(config, 'initializer_range')}")
        return 2 if hasattr(config, "initializer_range") else 1
    print("the model builds")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""transformers 5.1-5.14: Qwen2.5-Omni's generate() refuses a batch of more than one row when it returns audio.

Expected (model limitation, transformers < 5.15; 5.15 generates batches): generate() on two text rows with audio output
(the default return_audio) runs the thinker and the talker per row. 5.1-5.14 raise NotImplementedError
("Qwen2.5-Omni currently does not support batched inference with audio output", modeling_qwen2_5_omni.py:3857 in 5.14.1;
Qwen3-Omni-MoE alike, modeling_qwen3_omni_moe.py:3887), so a cell of batch 2 runs none of its talker checks there.
The tiny model is the one of qwen2_5_omni_uncached_generate_feeds_the_talker_whole_sequences.py (its CONFIG).
Exit 1 when generate() on a batch of 2 raises that NotImplementedError; 0 when it runs.
"""
import runpy
import sys
from pathlib import Path

import torch
import transformers
from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

TRANSFORMERS = ">=5.1,<5.15"  # the releases this limitation is in (tests/test_repros.py skips it elsewhere)

CONFIG = runpy.run_path(str(Path(__file__).with_name("qwen2_5_omni_uncached_generate_feeds_the_talker_whole_sequences.py")))["CONFIG"]


@torch.inference_mode()
def main() -> int:
    torch.manual_seed(0)
    model = Qwen2_5OmniForConditionalGeneration(Qwen2_5OmniConfig(**CONFIG)).float().eval()
    talker = model.config.talker_config
    model.speaker_map["Chelsie"] = {"bos_token": talker.tts_text_start_token_id, "cond": torch.zeros(1, 192),
                                    "ref_mel": torch.zeros(1, 30, 80)}
    text = torch.randint(4, 240, (2, 6), generator=torch.Generator().manual_seed(0))
    try:
        model.generate(input_ids=text, attention_mask=torch.ones_like(text), speaker="Chelsie", thinker_max_new_tokens=4,
                       thinker_do_sample=False, talker_max_new_tokens=4, talker_do_sample=False)
    except NotImplementedError as exc:
        print(f"transformers {transformers.__version__}: generate() on 2 rows with audio output raised NotImplementedError: {exc}")
        return 1
    print(f"transformers {transformers.__version__}: generate() on 2 rows with audio output runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

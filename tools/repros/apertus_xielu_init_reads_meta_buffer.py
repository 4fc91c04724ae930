#!/usr/bin/env python3
"""transformers 5.0.0: no Apertus checkpoint loads with ``from_pretrained``: the xIELU activation reads a buffer's
value while the model is being built on the meta device.

``XIELUActivation.__init__`` (``activations.py:249-250`` in 5.0.0) takes ``float(self.beta.detach().cpu().float().item())``
of the buffer it has just registered; ``from_pretrained`` builds the model under the meta device, where that buffer
has no data, so every load raises ``NotImplementedError: Cannot copy out of meta tensor; no data!`` (from
``ApertusMLP.__init__``, ``modeling_apertus.py:50``), whatever the dtype. A model built from its config on the CPU
(``from_config``) is not affected. 5.1.0 takes the scalars from the constructor's arguments (``float(beta)``).

Shown on a tiny random Apertus saved and loaded back (float32, bfloat16, float16), the way users load a checkpoint.
Exit 1 while the bug is there (a load raises), else 0. Needs only torch and transformers (random weights, no download).
"""
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

TRANSFORMERS = "<5.1"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)

CONFIG = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def main() -> int:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("apertus", **CONFIG)).eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 6))
    failed = []
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            try:
                loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
                loaded(input_ids=ids)
                print(f"{dtype}: loads and runs")
            except Exception as exc:  # the load's failure is the finding
                failed.append(dtype)
                print(f"{dtype}: from_pretrained raised {type(exc).__name__}: {exc}")
    print(f"transformers {transformers.__version__}: {'BUG' if failed else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

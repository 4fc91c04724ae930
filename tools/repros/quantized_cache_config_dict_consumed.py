#!/usr/bin/env python3
"""``generate(cache_implementation="quantized", cache_config=d)`` consumes the user's own dict in transformers 5.0-5.18.

``_prepare_cache_for_generation`` takes ``generation_config.cache_config`` (the very dict the user passed: ``update``
stores it as given) without a copy, sets ``config`` in it and pops ``backend`` (generation/utils.py:2019-2036 in
5.0.0, :1991-1994 in 5.13.1). The user's dict comes back without ``backend`` and with the model's config, and the next
``generate()`` with it builds the default ``quanto`` backend: an HQQ cache's second call quantizes with quanto and its
tokens change. 5.19 copies the dict first ("Copied, as `generate` may be called several times with the same
`cache_config`", generation/utils.py:2297-2300 in 5.19.0). Needs optimum-quanto and hqq (pip install
"kvconform[quantized]"). Exit 1 while the dict changes, 0 when it comes back as given.
"""
import copy
import importlib.util
import sys

import torch
import transformers

TRANSFORMERS = "<5.19"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)
if importlib.util.find_spec("hqq") is None or importlib.util.find_spec("optimum") is None:
    print('cannot show it here: hqq and optimum-quanto are not installed (pip install "kvconform[quantized]")')
    sys.exit(2)


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llama", hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(3, 256, (2, 8), generator=torch.Generator().manual_seed(0))
    user = {"backend": "hqq", "nbits": 4, "residual_length": 3, "q_group_size": 16, "axis_key": 0, "axis_value": 0}
    given = copy.deepcopy(user)
    runs = [model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, pad_token_id=0,
                           cache_implementation="quantized", cache_config=user)[:, 8:].tolist() for _ in range(2)]
    shown = {key: value if isinstance(value, (str, int)) else f"<{type(value).__name__}>" for key, value in user.items()}
    print(f"cache_config given: {given}\ncame back as:       {shown}")
    print(f"first call: {runs[0]}\nsecond call: {runs[1]}")
    return 1 if user != given else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Beam search with ``cache_implementation="quantized"`` raises IndexError in transformers 5.0-5.18, on either backend.

Up to 5.18 ``QuantizedLayer`` has no ``reorder_cache`` of its own and inherits the plain layer's
(cache_utils.py:101-104 in 5.18.0, :77-80 in 5.0.0): ``if self.get_seq_length() > 0: self.keys =
self.keys.index_select(0, beam_idx)``. Its ``update`` quantizes the whole prefill at once and leaves the residual
``self.keys`` / ``self.values`` the 1-D empty tensor of ``lazy_initialization`` (cache_utils.py:123-125, :763, and the
flush at :774 in 5.18.0; :92-94, :539, :550 in 5.0.0), while ``get_seq_length`` counts the quantized tokens, so the first
reorder indexes dim 0 of an empty tensor: ``IndexError: index out of range in self`` (and the quantized states would not
be reordered at all). 5.19 gives ``QuantizedLayer`` its own ``reorder_cache``, deferred to the next dequantization
(``_pending_beam_idx``, cache_utils.py:794-816 in 5.19.0). Needs optimum-quanto and hqq (pip install "kvconform[quantized]").
Exit 1 while beam search with the quantized cache raises, 0 when it runs.
"""
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
    raised = []
    for backend in ("quanto", "hqq"):
        try:
            out = model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=3, max_new_tokens=4, do_sample=False,
                                 pad_token_id=0, cache_implementation="quantized",
                                 cache_config={"backend": backend, "nbits": 4, "residual_length": 2})
            print(f"{backend}: beam search ran: {out[:, 8:].tolist()}")
        except IndexError as exc:  # the raise is the finding
            print(f"{backend}: generate(num_beams=3, cache_implementation='quantized') raised IndexError: {exc}")
            raised.append(backend)
    return 1 if raised else 0


if __name__ == "__main__":
    sys.exit(main())

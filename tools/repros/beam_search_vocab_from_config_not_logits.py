#!/usr/bin/env python3
"""transformers 5.0-5.17: beam search takes the vocabulary width from config.vocab_size, not from the logits.

Expected (model bug, transformers 5.0.0-5.17.0): GenerationMixin._beam_search sets
``vocab_size = self.config.get_text_config().vocab_size`` (generation/utils.py:3290 in 5.14.1, :3438 in 5.17.0) and
reshapes the step's log-probabilities to ``(batch_size, num_beams * vocab_size)`` (:3433 in 5.14.1). IDEFICS' output
layer (IdeficsDecoupledLinear, modeling_idefics.py:1091-1097 in 5.14.1) emits ``vocab_size + additional_vocab_size``
logits, the image tokens included: the published IDEFICS checkpoints set ``additional_vocab_size: 2`` (their
``<fake_token_around_image>`` and ``<image>``), so every beam search over them raises RuntimeError on that reshape.
5.18 reads the width from the scores (``vocab_size = accumulated_log_probs.shape[-1] // num_beams``,
generation/utils.py:3450 in 5.18.0). Exit 1 when generate(num_beams=3) raises that reshape error, 0 when it runs.
"""
import sys

import torch
import transformers
from transformers import IdeficsConfig, IdeficsForVisionText2Text

TRANSFORMERS = "<5.18"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    vocab = 256
    config = IdeficsConfig(
        vocab_size=vocab, additional_vocab_size=2, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, cross_layer_interval=1, alpha_initializer="ones",
        vision_config={"embed_dim": 32, "image_size": 32, "patch_size": 16, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "intermediate_size": 64},
        perceiver_config={"use_resampler": False}, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(0)
    model = IdeficsForVisionText2Text(config).eval()
    print(f"logits width {model.lm_head(torch.zeros(1, 64)).shape[-1]}, config.vocab_size {config.vocab_size}")
    # one image per prompt: <fake><image><fake> then text; ids vocab and vocab + 1 are the additional tokens
    fake, image = vocab, vocab + 1
    ids = torch.tensor([[1, fake, image, fake, 10, 11, 12], [1, fake, image, fake, 20, 21, 22]])
    image_attention_mask = (torch.arange(7) >= 2).long()[None, :, None].expand(2, 7, 1).contiguous()
    pixel_values = torch.randn(2, 1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    try:
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixel_values,
                             image_attention_mask=image_attention_mask, num_beams=3, max_new_tokens=4,
                             do_sample=False, early_stopping=False)
    except RuntimeError as exc:
        if "is invalid for input of size" not in str(exc):
            raise
        print(f"BUG: beam search raised RuntimeError: {exc}")
        return 1
    print(f"beam search ran: {out[:, 7:].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

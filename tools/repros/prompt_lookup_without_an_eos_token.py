#!/usr/bin/env python3
"""transformers 5.0-5.12: ``generate(prompt_lookup_num_tokens=...)`` raises TypeError when the model's generation config
has no eos_token_id.

kvconform check assisted, the composite encoder-decoder cells [float32-cpu-dynamic] (encoder-decoder,
vision-encoder-decoder, speech-encoder-decoder: a BERT decoder, whose config has no EOS, as
``EncoderDecoderModel.from_encoder_decoder_pretrained("bert-base-uncased", "bert-base-uncased")`` builds it).
PromptLookupCandidateGenerator is given ``generation_config._eos_token_tensor`` (generation/utils.py:969-970 in 5.3.0),
None when no EOS is set, and once it finds an n-gram match it drops the drafts after an EOS with
``torch.isin(chosen_ids, self.eos_token_id)`` (generation/candidate_generator.py:1131 in 5.3.0; ``isin_mps_friendly`` at
:1168 in 5.0.0), which rejects None: "isin() received an invalid combination of arguments - got (Tensor, NoneType)".
5.13 guards it (``if self.eos_token_id is not None:``, candidate_generator.py:1138 in 5.13.1).
Exit 1 when prompt lookup raises that TypeError, else 0 (then its tokens are compared with greedy's and printed).
"""
import sys

import torch
import transformers
from transformers import BertConfig, EncoderDecoderConfig, EncoderDecoderModel

TRANSFORMERS = "<5.13"  # the releases this bug is in (tests/test_repros.py skips it elsewhere)


@torch.inference_mode()
def main() -> int:
    bert = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
    config = EncoderDecoderConfig.from_encoder_decoder_configs(
        BertConfig(**bert), BertConfig(**bert, is_decoder=True, add_cross_attention=True))
    config.decoder_start_token_id, config.pad_token_id = 2, 0  # as the EncoderDecoderModel docs set them (no EOS)
    torch.manual_seed(0)
    model = EncoderDecoderModel(config=config).eval()
    print(f"generation_config.eos_token_id: {model.generation_config.eos_token_id}")
    encoder_ids = torch.randint(3, 256, (1, 6), generator=torch.Generator().manual_seed(0))
    decoder_ids = torch.tensor([[2, 17, 33, 17, 33, 17]])  # a repeated 2-gram: prompt lookup finds a match
    settings = {"decoder_input_ids": decoder_ids, "max_new_tokens": 6, "do_sample": False}
    greedy = model.generate(encoder_ids, **settings)[0, 6:].tolist()
    try:
        looked_up = model.generate(encoder_ids, prompt_lookup_num_tokens=3, **settings)[0, 6:].tolist()
    except TypeError as exc:
        print(f"transformers {transformers.__version__}: prompt lookup raised TypeError: {str(exc).splitlines()[0]}")
        return 1 if "isin()" in str(exc) else 2
    print(f"transformers {transformers.__version__}: prompt lookup runs: {looked_up}; greedy {greedy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

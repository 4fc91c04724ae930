"""PP-FormulaNet: generate(cache_implementation="static") sizes the cross-attention cache by the wrong encoder output.

transformers 5.24.0: the decoder cross-attends to the projector's tokens, encoder_outputs.pooler_output [B, S, d_model]
(PPFormulaNetModel.forward, modeling_pp_formulanet.py:1013), while encoder_outputs[0] is the vision neck's feature map
[B, output_channels, H, W] (PPFormulaNetVisionModel.forward, :485-490). generate()'s static cache sizes its cross half by
encoder_outputs[0].shape[1] (generation/utils.py:2196), the neck's 256 channels, not the S tokens: the cross-attention
layers write S slots of a 256-slot StaticCache and attend to all of them, the unwritten zeros too. Static generate() so
leaves a teacher-forced pass over its own tokens; the dynamic cache agrees with it.
Exit 1 when the bug reproduces. Needs only torch and transformers (random weights, no download).
"""
import sys

import torch
from transformers import PPFormulaNetConfig, PPFormulaNetForConditionalGeneration

torch.manual_seed(0)
# The default widths shrunk: a 64-pixel image in 8-pixel patches is an 8 x 8 grid, which the projector's two stride-2
# convolutions take to 2 x 2 = 4 tokens (published: 512 / 16 = 32 -> 8 x 8 = 64 tokens, and the same 256 neck channels).
vision = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 8,
          "window_size": 4, "global_attn_indexes": [1], "mlp_dim": 128, "decoder_hidden_size": 64, "initializer_range": 0.15}
text = {"vocab_size": 256, "d_model": 64, "decoder_layers": 2, "decoder_attention_heads": 4, "decoder_ffn_dim": 128,
        "max_position_embeddings": 64, "init_std": 0.15}
model = PPFormulaNetForConditionalGeneration(PPFormulaNetConfig(vision_config=vision, text_config=text)).eval()
pixel_values = torch.randn(2, 3, 64, 64)
encoded = model.get_encoder()(pixel_values=pixel_values)
print(f"encoder_outputs[0] {list(encoded[0].shape)}, pooler_output (what the decoder attends to) {list(encoded.pooler_output.shape)}")
worst = {}
with torch.no_grad():
    for implementation in (None, "static"):
        out = model.generate(pixel_values=pixel_values, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                             cache_implementation=implementation, output_logits=True, return_dict_in_generate=True)
        reference = model(pixel_values=pixel_values, decoder_input_ids=out.sequences, use_cache=False).logits
        worst[implementation] = max(float((logits - reference[:, k]).abs().max()) for k, logits in enumerate(out.logits))
        print(f"cache_implementation={implementation}: max |Δlogit| to a teacher-forced pass over its tokens {worst[implementation]:.2e}")
sys.exit(1 if worst["static"] > 1e-3 and worst[None] < 1e-4 else 0)

"""Where a vision-language model's own ``generate()`` hands the prompt, and how that decoder reads the image.

Read from the class (its ``generate`` source, its decoder's forward signature), not from a list of model types:

- placeholders merged into the embeddings of an inner decoder (BLIP-2, InstructBLIP: ``self.language_model.generate``;
  Kosmos-2: ``self.text_model.generate``), or into the model's own embeddings (every other type);
- cross-attention over the image's hidden states (BLIP: ``self.text_decoder.generate(..., encoder_hidden_states=...)``):
  the prompt holds no placeholder, every decode step reads the image again, and the cache has a cross-attention half.
"""

from __future__ import annotations

import inspect

from kvconform.build.models import Model

#: The attributes a model's own ``generate()`` may hand its prompt to, in the order they are looked for.
INNER_DECODERS = ("language_model", "text_model", "text_decoder")


def _inner_generate_call(model: Model) -> tuple[Model, str] | None:
    """The decoder a model's own ``generate()`` calls ``generate`` on, and that call's argument text."""
    from transformers import GenerationMixin

    generate = getattr(type(model), "generate", None)
    if generate is None or generate is GenerationMixin.generate:
        return None
    source = inspect.getsource(generate)
    for name in INNER_DECODERS:
        start = source.find(f"self.{name}.generate(")
        if start >= 0 and getattr(model, name, None) is not None:
            depth, end = 0, start
            for end in range(source.index("(", start), len(source)):
                depth += {"(": 1, ")": -1}.get(source[end], 0)
                if depth == 0:
                    break
            return getattr(model, name), source[start:end + 1]
    return None


def inner_language_model(model: Model) -> Model | None:
    """The decoder a model's own ``generate()`` hands the prompt to, with the image merged into its embeddings or given
    to its cross-attention.

    BLIP-2 and InstructBLIP call ``self.language_model.generate`` (``modeling_blip_2.py``:
    ``Blip2ForConditionalGeneration.generate``), Kosmos-2 ``self.text_model.generate``, BLIP
    ``self.text_decoder.generate`` (``modeling_blip.py:919``): every decode step runs that decoder alone (the outer
    forward needs the image), and the prefill passes the cache through the outer forward to it.
    """
    found = _inner_generate_call(model)
    return found[0] if found is not None else None


def image_cross_attention(model: Model) -> Model | None:
    """The inner decoder that reads the image through cross-attention: the model's ``generate()`` hands it the image's
    hidden states as ``encoder_hidden_states`` (BLIP, ``modeling_blip.py:919-926``), else ``None``."""
    found = _inner_generate_call(model)
    return found[0] if found is not None and "encoder_hidden_states=" in found[1] else None

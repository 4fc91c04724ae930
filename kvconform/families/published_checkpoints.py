"""A built family model saved as its type's checkpoints are published, so that loading it back in another dtype gives
what ``from_pretrained(..., dtype=...)`` gives users: the class a checkpoint holds the model in (``published_in`` in
families.yaml) and the files it ships beside its weights (Qwen2.5-Omni's speakers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import transformers
from transformers import PreTrainedModel

from kvconform.families.registry import published_in

#: The speaker registered where the model has none (``from_pretrained`` loads them from the checkpoint's spk_dict.pt,
#: modeling_qwen2_5_omni.py:3784-3800; a model built from a config has no speaker, and generate() refuses).
SPEAKER = "Chelsie"
#: Frames of the speaker's reference mel (only token2wav reads it).
REFERENCE_FRAMES = 30
#: The file Qwen2.5-Omni checkpoints keep their speakers in (read with ``torch.load(weights_only=True)``, :3743-3746).
SPEAKER_FILE = "spk_dict.pt"


def published_speaker(model: PreTrainedModel) -> str:
    """A speaker ``generate()`` accepts: the checkpoint's first, else one registered with the talker config's text-start
    id as its text bos (spk_dict.pt's own ids are the checkpoint's) and a silent conditioning for token2wav."""
    if model.speaker_map:
        return str(next(iter(model.speaker_map)))
    dit = model.config.token2wav_config.dit_config
    model.speaker_map[SPEAKER] = {"bos_token": int(model.config.talker_config.tts_text_start_token_id),
                                  "cond": torch.zeros(1, int(dit.enc_emb_dim)),
                                  "ref_mel": torch.zeros(1, REFERENCE_FRAMES, int(dit.mel_dim))}
    return SPEAKER


def save_as_published(model: PreTrainedModel, folder: Path) -> Callable[[torch.dtype], PreTrainedModel]:
    """Save ``model`` into ``folder`` as its type's checkpoints are published; the loader that reads it back in a dtype.

    A type published inside another class (ShieldGemma 2: ``ShieldGemma2ForImageClassification.model``) is saved and
    loaded through that class, whose key layout the type's weight conversion expects; the model is its attribute.
    """
    holder = published_in(model.config.model_type)
    saved = model
    if holder is not None:
        saved = getattr(transformers, holder.class_name)(model.config)
        setattr(saved, holder.attribute, model)
    saved.save_pretrained(folder, safe_serialization=True)
    if hasattr(model, "load_speakers"):
        published_speaker(model)
        torch.save(dict(model.speaker_map), folder / SPEAKER_FILE)

    def load(dtype: torch.dtype) -> PreTrainedModel:
        loaded = type(saved).from_pretrained(folder, dtype=dtype)
        loaded = getattr(loaded, holder.attribute) if holder is not None else loaded
        differing = _differing_parameters(model, loaded)
        if differing:
            raise RuntimeError(f"saved {type(saved).__name__} did not load back whole ({', '.join(differing[:3])} differ)")
        return loaded

    return load


def _differing_parameters(master: PreTrainedModel, loaded: PreTrainedModel) -> list[str]:
    """The parameters of ``loaded`` that are not ``master``'s cast to their dtype (absent or newly initialized)."""
    expected = dict(master.named_parameters())
    return [name for name, value in loaded.named_parameters()
            if name not in expected or not torch.equal(value, expected[name].to(value.dtype))]

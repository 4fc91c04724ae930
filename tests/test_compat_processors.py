"""The image processor tables of every release, read the same way (kvconform.compat)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kvconform.compat import _backends, image_processor_backends


def test_a_slow_fast_pair_is_the_pil_and_torchvision_backends() -> None:
    """5.0-5.3 map (slow, fast) pairs; the slow class is the PIL/numpy one (before, every type read as unmapped)."""
    assert _backends(("LlavaNextImageProcessor", "LlavaNextImageProcessorFast")) == {
        "pil": "LlavaNextImageProcessor", "torchvision": "LlavaNextImageProcessorFast"}
    assert _backends(("ChameleonImageProcessor", None)) == {"pil": "ChameleonImageProcessor", "torchvision": None}
    assert _backends({"pil": "A", "torchvision": "B"}) == {"pil": "A", "torchvision": "B"}
    assert _backends("Qwen2VLVideoProcessor", single="torchvision") == {"torchvision": "Qwen2VLVideoProcessor"}
    assert _backends(None) is None


def test_the_installed_release_maps_its_processors() -> None:
    assert image_processor_backends("llava_next") == {"torchvision": "LlavaNextImageProcessor", "pil": "LlavaNextImageProcessorPil"}


def test_the_stand_in_leaves_a_release_without_a_torchvision_backend_module_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before 5.4 transformers has no image_processing_backends: the slow processors need no torchvision stand-in."""
    import transformers

    from kvconform.families import torchvision_kernels

    monkeypatch.setattr(torchvision_kernels, "torchvision_importable", lambda: False)
    monkeypatch.delattr(transformers, "image_processing_backends", raising=False)
    monkeypatch.setitem(sys.modules, "transformers.image_processing_backends", None)  # import raises ImportError
    before = {name: sys.modules.get(name) for name in ("torchvision", "torchvision.transforms.v2.functional")}
    with torchvision_kernels.torchvision_stand_in():
        assert {name: sys.modules.get(name) for name in before} == before


def test_a_tower_without_a_feature_getter_counts_its_latent_queries() -> None:
    """Kosmos-2 before its get_image_features: each image becomes latent_query_num tokens (its projection's queries)."""
    from kvconform.families.inputs import count_features

    model = types.SimpleNamespace(config=types.SimpleNamespace(latent_query_num=64))
    assert count_features(model, {"pixel_values": torch.zeros(2, 3, 32, 32)}) == 128  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no get_image_features"):
        count_features(types.SimpleNamespace(config=types.SimpleNamespace()), {"pixel_values": torch.zeros(2, 3, 4, 4)})  # type: ignore[arg-type]


def test_a_pil_class_that_imports_only_as_a_placeholder_falls_back_to_the_torchvision_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """5.4-5.5 hand out a dummy for some PIL classes (Idefics2ImageProcessorPil) where torchvision is missing."""
    from transformers.models.auto import image_processing_auto

    from kvconform.families import processors

    monkeypatch.setattr(processors, "image_processor_backends", lambda _: {"pil": "SomePil", "torchvision": "SomeTorchvision"})
    monkeypatch.setattr(image_processing_auto, "get_image_processor_class_from_name", lambda _: type("SomePil", (), {"is_dummy": True}))
    monkeypatch.setattr(processors, "_torchvision_class", lambda name: name)
    assert processors.image_processor_class("anything") == "SomeTorchvision"


@pytest.mark.parametrize("model_type", ["pix2struct", "kosmos-2.5"])
def test_a_flattened_patch_processor_leaves_padding_patches_as_a_users_image_does(model_type: str) -> None:
    """Pix2Struct-style processors keep the aspect ratio and pad to max_patches with zero rows of mask 0; the cell's
    1:2 image under half a row more than its 4 x 8 grid leaves 4 of them (filling every patch hid the chunked-prefill
    finding from 5.9 on, model_matrix.yaml)."""
    from types import SimpleNamespace

    from kvconform.families.processors import image_processor_class, processor_kwargs, synthetic_images

    cls = image_processor_class(model_type)
    config = SimpleNamespace(model_type=model_type, vision_config=SimpleNamespace(patch_size=8, image_size=32))
    kwargs, side = processor_kwargs(cls, config)
    assert kwargs["max_patches"] == 2 * 4 * 4 + 4
    out = cls(**kwargs)(images=synthetic_images(2, side, 2 * side, seed=0), return_tensors="pt")
    mask = out["attention_mask"]
    assert mask.shape == (2, 36) and mask[:, :32].all() and not mask[:, 32:].any()
    assert not out["flattened_patches"][:, 32:].any()

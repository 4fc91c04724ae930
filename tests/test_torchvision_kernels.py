"""The torch stand-ins of torchvision's kernels that run torchvision-only image processors (families/torchvision_kernels.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from kvconform.families import torchvision_kernels as kernels
from kvconform.families.processors import image_processor_class, processor_kwargs, synthetic_images

needs_stand_in = pytest.mark.skipif(kernels.torchvision_importable(), reason="torchvision imports here: no stand-in is used")


def test_bilinear_resize_matches_pil_as_torchvision_documents() -> None:
    """torchvision's antialiased bilinear resize of uint8 images agrees with PIL's to 1 grey level; so does the stand-in."""
    from PIL import Image

    pixels = torch.randint(0, 256, (40, 70, 3), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    for height, width in ((20, 35), (64, 100)):
        ours = kernels.resize(pixels.permute(2, 0, 1), [height, width], kernels.InterpolationMode.BILINEAR)
        pil = np.array(Image.fromarray(pixels.numpy()).resize((width, height), Image.BILINEAR))
        assert ours.dtype == torch.uint8
        assert (ours.permute(1, 2, 0).int() - torch.from_numpy(pil).int()).abs().max() <= 1


def test_pad_and_crop_take_torchvision_argument_order() -> None:
    image = torch.arange(12.0).reshape(1, 3, 4)
    padded = kernels.pad(image, [1, 2, 3, 4], fill=-1.0)  # left, top, right, bottom
    assert padded.shape == (1, 3 + 2 + 4, 4 + 1 + 3)
    assert torch.equal(padded[:, 2:5, 1:5], image) and padded[0, 0, 0] == -1.0
    assert torch.equal(kernels.crop(image, 1, 2, 2, 2), image[:, 1:3, 2:4])
    assert kernels.crop(image, 2, 3, 2, 2).shape == (1, 2, 2)  # past the edge: zero-padded as torchvision does
    scaled = kernels.to_dtype(torch.tensor([0, 255], dtype=torch.uint8), torch.float32, scale=True)
    assert torch.equal(scaled, torch.tensor([0.0, 1.0]))


@needs_stand_in
def test_the_stand_in_is_in_place_only_inside_the_context() -> None:
    from transformers import image_processing_backends as backends

    before = getattr(backends, "tvF", None)
    with kernels.torchvision_stand_in():
        assert sys.modules["torchvision"].transforms.v2.functional.resize is kernels.resize
        assert backends.tvF.resize is kernels.resize
        assert not kernels.torchvision_importable()
    assert "torchvision" not in sys.modules
    assert getattr(backends, "tvF", None) is before


@needs_stand_in
def test_a_torchvision_only_processor_makes_its_own_layout() -> None:
    """Inkling2's processor (torchvision only) cuts one token per 16-pixel square of the shrunk tower: a 32 x 64 image is
    a 2 x 4 grid, each square normalised to [-1, 1] from the image's own bytes."""
    from types import SimpleNamespace

    cls = image_processor_class("inkling2")
    config = SimpleNamespace(model_type="inkling2", vision_config=SimpleNamespace(patch_size=8, image_size=None))
    kwargs, side = processor_kwargs(cls, config)
    assert kwargs["size"] == {"height": 16, "width": 16}  # families.yaml image_processor
    image = synthetic_images(1, side, 2 * side, seed=0)
    with kernels.torchvision_stand_in():
        out = cls(**kwargs)(images=image, return_tensors="pt")
    assert out["image_grid_thw"].tolist() == [[1, 2, 4]]
    assert tuple(out["pixel_values"].shape) == (8, 16, 16, 3)
    raw = torch.from_numpy(np.array(image[0])).float()
    expected = (raw[16:32, 48:64] / 255 - 0.5) / 0.5  # token (row 1, column 3)
    assert torch.allclose(out["pixel_values"][7], expected, atol=1e-6)


@needs_stand_in
def test_a_processor_module_whose_guarded_import_skipped_the_kernels_gets_them_inside_the_context() -> None:
    """5.4's LlavaNextImageProcessor module imports tvF only ``if is_torchvision_available()`` (False under the stand-in)
    and calls tvF.pad itself: its processor got NameError and the cell config-shaped pixels its anyres forward refused.
    The processor's own modules get the kernels while the context is open, and lose them after."""
    import types

    module = types.ModuleType("transformers.models.kvconform_fake.image_processing_kvconform_fake")
    exec("def pad_it(image):\n    return tvF.pad(image, padding=[1, 0, 0, 0])\n"
         "class FakeImageProcessor:\n    def __call__(self, image):\n        return pad_it(image)\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        processor = module.FakeImageProcessor
        with pytest.raises(NameError):
            processor()(torch.zeros(1, 2, 2))
        with kernels.torchvision_stand_in(processor):
            assert processor()(torch.zeros(1, 2, 2)).shape == (1, 2, 3)
        assert not hasattr(module, "tvF")
        with kernels.torchvision_stand_in():  # without the class its module is left alone, as before
            with pytest.raises(NameError):
                processor()(torch.zeros(1, 2, 2))
    finally:
        del sys.modules[module.__name__]


def test_pad_fills_each_channel_with_its_own_value() -> None:
    """torchvision pads a tensor with one fill per channel (5.4's Llama4ImageProcessor pads with its background colour)."""
    image = torch.arange(6.0).reshape(2, 1, 3)
    padded = kernels.pad(image, [1, 0, 0, 1], fill=[7.0, 9.0])
    assert padded.shape == (2, 2, 4)
    assert torch.equal(padded[:, :1, 1:], image)
    assert torch.equal(padded[0, :, 0], torch.tensor([7.0, 7.0])) and torch.equal(padded[1, 1], torch.full((4,), 9.0))
    assert torch.equal(kernels.pad(image, [1, 0, 0, 0], fill=[5.0]), kernels.pad(image, [1, 0, 0, 0], fill=5.0))

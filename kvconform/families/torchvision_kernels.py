"""The few ``torchvision.transforms.v2.functional`` kernels transformers' torchvision-backend image processors call,
written in torch, for image processors that have no PIL backend where torchvision cannot be imported.

torchvision has no build for the CPU torch this project pins (``docs/families.md``, Dependencies); a model whose
only image processor is its torchvision class (Molmo2, Kimi-K2.5, Inkling) would otherwise get pixels shaped from
its config, without the crops, grids and pooling indices its processor makes. On tensors these kernels are plain
torch in torchvision too (``resize`` is ``torch.nn.functional.interpolate``, ``pad`` is ``torch.nn.functional.pad``,
``normalize`` is ``(x - mean) / std``), so the processor's own code runs unchanged: tiling, grids, patch layouts and
masks come out as users get them. The stand-in is in place only while the processor is imported and called
(:func:`torchvision_stand_in`); ``is_torchvision_available()`` stays False and nothing else sees it.
"""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F


class InterpolationMode(enum.Enum):
    """torchvision's interpolation modes (``torchvision.transforms.InterpolationMode``), by the same values."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def resize(image: torch.Tensor, size: Sequence[int], interpolation: InterpolationMode = InterpolationMode.BILINEAR,
           max_size: int | None = None, antialias: bool | None = True) -> torch.Tensor:
    """``[..., C, H, W]`` resized to ``size`` (height, width), as torchvision's tensor resize: ``interpolate`` in float
    (antialias for bilinear and bicubic), integer images rounded and clamped back to their dtype."""
    if interpolation not in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT, InterpolationMode.BILINEAR,
                             InterpolationMode.BICUBIC):
        raise ValueError(f"torchvision resizes tensors with nearest, bilinear or bicubic, not {interpolation}")
    height, width = int(size[0]), int(size[1])
    shape, dtype = image.shape, image.dtype
    if tuple(shape[-2:]) == (height, width):
        return image
    batch = image.reshape(-1, *shape[-3:]).float()
    smooth = interpolation in (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)
    out = F.interpolate(batch, size=(height, width), mode=interpolation.value, align_corners=False if smooth else None,
                        antialias=bool(antialias) and smooth)
    if not dtype.is_floating_point:
        out = out.round().clamp(torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    return out.to(dtype).reshape(*shape[:-2], height, width)


def normalize(image: torch.Tensor, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> torch.Tensor:
    """``(image - mean) / std`` per channel of ``[..., C, H, W]``."""
    mean_t = torch.as_tensor(mean, dtype=image.dtype, device=image.device).reshape(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=image.dtype, device=image.device).reshape(-1, 1, 1)
    return image.sub_(mean_t).div_(std_t) if inplace else (image - mean_t) / std_t


def _ltrb(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """torchvision's padding (one value, [left/right, top/bottom] or [left, top, right, bottom]) as (l, t, r, b)."""
    values = [int(padding)] if isinstance(padding, int) else [int(p) for p in padding]
    if len(values) == 1:
        return values[0], values[0], values[0], values[0]
    if len(values) == 2:
        return values[0], values[1], values[0], values[1]
    left, top, right, bottom = values
    return left, top, right, bottom


def pad(image: torch.Tensor, padding: int | Sequence[int], fill: float | Sequence[float] | None = 0,
        padding_mode: str = "constant") -> torch.Tensor:
    """``[..., C, H, W]`` padded by torchvision's ``padding`` (left, top, right, bottom); a constant ``fill`` is one
    value or one per channel (5.4's Llama4ImageProcessor pads with its background colour, image_processing_llama4.py:178)."""
    left, top, right, bottom = _ltrb(padding)
    shape = image.shape
    batch = image.reshape(-1, *shape[-3:])
    if padding_mode == "constant" and isinstance(fill, (list, tuple)) and len(fill) > 1:
        out = torch.empty(*batch.shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right, dtype=image.dtype,
                          device=image.device)
        out[:] = torch.as_tensor(fill, dtype=image.dtype, device=image.device).reshape(-1, 1, 1)
        out[..., top:top + shape[-2], left:left + shape[-1]] = batch
    elif padding_mode == "constant":
        value: Any = fill[0] if isinstance(fill, (list, tuple)) else fill
        out = F.pad(batch, (left, right, top, bottom), mode="constant", value=float(value or 0))
    else:
        mode = {"edge": "replicate", "reflect": "reflect"}.get(padding_mode, padding_mode)
        out = F.pad(batch.float(), (left, right, top, bottom), mode=mode).to(image.dtype)
    return out.reshape(*shape[:-2], *out.shape[-2:])


def crop(image: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """The ``height`` x ``width`` window at (``top``, ``left``), zero-padded where it leaves the image (as torchvision)."""
    image_height, image_width = image.shape[-2:]
    right, bottom = left + width, top + height
    if left < 0 or top < 0 or right > image_width or bottom > image_height:
        inside = image[..., max(top, 0):min(bottom, image_height), max(left, 0):min(right, image_width)]
        return pad(inside, [max(-left, 0), max(-top, 0), max(right - image_width, 0), max(bottom - image_height, 0)])
    return image[..., top:bottom, left:right]


def to_dtype(image: torch.Tensor, dtype: torch.dtype = torch.float32, scale: bool = False) -> torch.Tensor:
    """``image`` in ``dtype``; with ``scale``, integer values mapped to [0, 1] and back (torchvision's value ranges)."""
    if not scale or image.dtype == dtype:
        return image.to(dtype)
    if image.dtype.is_floating_point and dtype.is_floating_point:
        return image.to(dtype)
    if not image.dtype.is_floating_point and dtype.is_floating_point:
        return image.to(dtype).mul_(1.0 / torch.iinfo(image.dtype).max)
    if image.dtype.is_floating_point:  # float to integer: torchvision scales by max + 1 - eps, then truncates
        return image.mul(torch.iinfo(dtype).max + 1.0 - 1e-3).to(dtype)
    return image.to(dtype)  # integer to integer: not used by the image processors


def grayscale_to_rgb(image: torch.Tensor) -> torch.Tensor:
    """A one-channel ``[..., 1, H, W]`` image repeated to three channels; others unchanged."""
    return image if image.shape[-3] >= 3 else image.repeat_interleave(3, dim=-3)


def pil_to_tensor(picture: Any) -> torch.Tensor:
    """A PIL image as a ``[C, H, W]`` tensor of its own dtype (uint8 for RGB)."""
    import numpy as np

    array = np.array(picture, copy=True)
    array = array[:, :, None] if array.ndim == 2 else array
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def _functional() -> types.ModuleType:
    module = types.ModuleType("torchvision.transforms.v2.functional",
                              "kvconform's torch stand-in for the kernels transformers' image processors call")
    for function in (resize, normalize, pad, crop, to_dtype, grayscale_to_rgb, pil_to_tensor):
        setattr(module, function.__name__, function)
    module.InterpolationMode = InterpolationMode  # type: ignore[attr-defined]
    return module


#: Marks the stand-in package while it is in ``sys.modules``.
STAND_IN = "_kvconform_stand_in"


def torchvision_importable() -> bool:
    """Whether the real torchvision imports (not the stand-in, while it is in place)."""
    try:
        import torchvision
    except Exception:  # noqa: BLE001 - absent, or a build for another torch (RuntimeError at import)
        return False
    return not getattr(torchvision, STAND_IN, False)


def _processor_modules(processor: type | None) -> list[types.ModuleType]:
    """The transformers modules that define ``processor``'s class hierarchy (each once)."""
    if processor is None:
        return []
    names = dict.fromkeys(c.__module__ for c in processor.__mro__ if c.__module__.startswith("transformers."))
    return [sys.modules[name] for name in names if name in sys.modules]


@contextmanager
def torchvision_stand_in(processor: type | None = None) -> Iterator[None]:
    """While open: ``torchvision.transforms.v2.functional`` importable as the kernels above, and transformers'
    torchvision backend using them. Restores everything it changed on exit; a no-op where torchvision imports.

    ``processor``: a torchvision-backend image processor class about to be called. Modules of its class hierarchy that
    import the kernels only ``if is_torchvision_available()`` (5.4's LlavaNextImageProcessor, AriaImageProcessor:
    ``from torchvision.transforms.v2 import functional as tvF``, image_processing_llava_next.py:41-42 in 5.4.0) were
    imported without them and get them, as the backend module does, while the context is open.
    """
    try:
        from transformers import image_processing_backends as backends
    except ImportError:  # before 5.4: no backend module, and the slow (PIL/numpy) processors need no torchvision
        backends = None
    if backends is None or torchvision_importable():
        yield
        return
    from transformers.image_utils import PILImageResampling

    functional = _functional()
    v2 = types.ModuleType("torchvision.transforms.v2")
    v2.functional = functional  # type: ignore[attr-defined]
    transforms = types.ModuleType("torchvision.transforms")
    transforms.v2 = v2  # type: ignore[attr-defined]
    transforms.InterpolationMode = InterpolationMode  # type: ignore[attr-defined]
    package = types.ModuleType("torchvision")
    package.transforms = transforms  # type: ignore[attr-defined]
    setattr(package, STAND_IN, True)
    modules = {"torchvision": package, "torchvision.transforms": transforms, "torchvision.transforms.v2": v2,
               "torchvision.transforms.v2.functional": functional}
    # transformers' own table (image_utils.py, built only where torchvision imports): PIL resampling to torchvision's mode.
    mapping = {PILImageResampling.NEAREST: InterpolationMode.NEAREST_EXACT, PILImageResampling.BOX: InterpolationMode.BOX,
               PILImageResampling.BILINEAR: InterpolationMode.BILINEAR, PILImageResampling.HAMMING: InterpolationMode.HAMMING,
               PILImageResampling.BICUBIC: InterpolationMode.BICUBIC, PILImageResampling.LANCZOS: InterpolationMode.LANCZOS}
    saved_modules = {name: sys.modules.get(name) for name in modules}
    stand_ins = {"tvF": functional, "pil_torch_interpolation_mapping": mapping,
                 "torch_pil_interpolation_mapping": {mode: resample for resample, mode in mapping.items()}}
    missing = object()
    saved = {name: getattr(backends, name, missing) for name in stand_ins}
    # the processor's own modules that lack a stand-in name (their guarded import skipped it): theirs until exit
    lacking = [(owner, name) for owner in _processor_modules(processor) if owner is not backends
               for name in stand_ins if not hasattr(owner, name)]
    sys.modules.update(modules)
    for name, value in stand_ins.items():
        setattr(backends, name, value)
    for owner, name in lacking:
        setattr(owner, name, stand_ins[name])
    try:
        yield
    finally:
        for owner, name in lacking:
            delattr(owner, name)
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for name, value in saved.items():
            if value is missing:
                delattr(backends, name)
            else:
                setattr(backends, name, value)

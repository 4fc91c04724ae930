"""Image inputs as the model's own image processor makes them: its PIL backend, sized to the shrunk tower.

The processor class is the one ``AutoImageProcessor`` maps for the model type, constructed with its
defaults (no download) and every spatial field scaled from its native size to the tower's: tiles,
anyres grids, patch layouts, pixel masks and grid sizes come out as users get them, only smaller.
The synthetic image is seeded noise, twice as wide as high, so tiling and unpadding paths run.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from kvconform.compat import image_processor_backends, video_processor_backends
from kvconform.families.registry import image_processor_overrides
from kvconform.families.torchvision_kernels import torchvision_importable, torchvision_stand_in

#: Fields of an image processor that hold a pixel length (or lists/dicts of them), scaled with the tower.
SPATIAL_FIELDS = ("size", "crop_size", "max_image_size", "min_image_size", "image_grid_pinpoints", "split_resolutions",
                  "scale_resolution", "image_size", "min_size")
#: Dict keys of ``size`` that count pixels (Qwen-VL style ``min_pixels``/``max_pixels``) when the processor merges patches.
PIXEL_COUNT_KEYS = ("shortest_edge", "longest_edge")


class NoImageProcessor(Exception):
    """The model type has no image processor usable here (none mapped, or only a torchvision backend)."""


def image_processor_class(model_type: str) -> type:
    """The PIL-backend image processor class transformers maps for ``model_type``, else its torchvision class (run with
    :func:`torchvision_stand_in` where torchvision does not import)."""
    from transformers.models.auto.image_processing_auto import get_image_processor_class_from_name

    backends = image_processor_backends(model_type)
    if not backends:
        raise NoImageProcessor(f"this transformers release maps no image processor backends for {model_type!r}")
    name = backends.get("pil")
    if name is None and backends.get("torchvision"):
        return _torchvision_class(backends["torchvision"])
    cls = get_image_processor_class_from_name(name) if name else None
    if (cls is None or getattr(cls, "is_dummy", False)) and backends.get("torchvision"):
        # 5.4-5.5 import some PIL classes only where torchvision does (a dummy placeholder here): the torchvision one
        return _torchvision_class(backends["torchvision"])
    if cls is None or getattr(cls, "is_dummy", False):
        raise NoImageProcessor(f"{name} cannot be imported (pillow missing?)")
    return cls


def video_processor_class(model_type: str) -> type:
    """The PIL-backend video processor of ``model_type``; transformers 5 video processors have only a torchvision backend
    (``BaseVideoProcessor``), so this raises ``NoImageProcessor`` with what it maps."""
    backends = video_processor_backends(model_type) or {}
    if "pil" not in backends:  # transformers sets the torchvision name to None where torchvision is missing
        named = f" {backends['torchvision']}" if backends.get("torchvision") else ""
        raise NoImageProcessor(f"its video processor{named} has only a torchvision backend" if "torchvision" in backends
                               else f"this transformers release maps no video processor for {model_type!r}")
    raise NoImageProcessor(f"{backends['pil']}: video processors are not driven here")


def _torchvision_class(name: str) -> type:
    """A torchvision-backend image processor class, imported from its own module (transformers' lazy module hands out a
    placeholder that raises where torchvision is missing); its module imports torchvision's functional kernels."""
    import importlib

    import transformers

    if torchvision_importable():
        from transformers.models.auto.image_processing_auto import get_image_processor_class_from_name

        return get_image_processor_class_from_name(name)
    module = getattr(transformers, "_class_to_module", {}).get(name)
    if module is None:
        raise NoImageProcessor(f"its image processor {name} (torchvision only) is not in transformers' class table")
    with torchvision_stand_in():
        return getattr(importlib.import_module(f"transformers.{module}"), name)


def _native_size(defaults: dict[str, Any]) -> int | None:
    """The processor's own output side length its other sizes relate to."""
    for key, sub in (("crop_size", "height"), ("size", "height"), ("size", "shortest_edge"), ("max_image_size", "longest_edge"),
                     ("size", "longest_edge")):
        value = defaults.get(key)
        if isinstance(value, dict) and isinstance(value.get(sub), int):
            return int(value[sub])
    for key in ("scale_resolution", "image_size", "max_image_size"):
        if isinstance(defaults.get(key), int):
            return int(defaults[key])
    return None


def _scaled(value: Any, ratio: float, floor: int) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return max(floor, round(value * ratio))
    if isinstance(value, dict):
        return {k: _scaled(v, ratio, floor) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scaled(v, ratio, floor) for v in value]
    return value


def _get(config: Any, name: str) -> Any:
    value = getattr(config, name, None)
    return value[0] if isinstance(value, (list, tuple)) and value and isinstance(value[0], int) else value


def processor_kwargs(cls: type, config: Any) -> tuple[dict[str, Any], int]:
    """Constructor overrides that size ``cls`` to the tower of ``config``, and the side of the synthetic image."""
    vision = getattr(config, "vision_config", None) or config
    tower = int(_get(vision, "image_size") or 32)
    patch = int(_get(vision, "patch_size") or 8)
    defaults = cls().to_dict()
    out: dict[str, Any] = {}
    size = defaults.get("size")
    if "merge_size" in defaults and not (isinstance(size, dict) and {"max_height", "max_width"} & set(size)):
        # Qwen-VL style: size bounds count pixels; patches merge spatial_merge_size² (Kimi-K2.5's per-side bounds count
        # patches and are no such bound: its max_patches is, below)
        merge = int(getattr(vision, "spatial_merge_size", None) or defaults["merge_size"])
        out["merge_size"] = merge
        side = patch * merge * 2  # a 4 × 4 grid of patches (2 × 2 merged tokens), doubled in width below
        out["size"] = {"shortest_edge": side * side, "longest_edge": 2 * side * side}
        # A constructor whose bounds default to numbers writes them over `size` (PaddleOCR-VL up to 5.3:
        # min_pixels=384*384, max_pixels=1536*1536, image_processing_paddleocr_vl.py:159-178 in 5.3.0): give it ours
        named = inspect.signature(cls).parameters
        for key, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
            if key in named and named[key].default not in (None, inspect.Parameter.empty):
                out[key] = out["size"][edge]
        if "temporal_patch_size" in defaults and getattr(vision, "temporal_patch_size", None):
            out["temporal_patch_size"] = int(vision.temporal_patch_size)
        tower = side
    else:
        native = _native_size(defaults)
        if native:
            ratio = tower / native
            for key in SPATIAL_FIELDS:
                if key in defaults and defaults[key] is not None:
                    out[key] = _scaled(defaults[key], ratio, 1)
    high = getattr(config, "high_res_vision_config", None)  # DeepSeek-VL hybrid: a second, high-resolution tower
    if isinstance(defaults.get("high_res_size"), dict) and high is not None:
        out["high_res_size"] = {"height": int(_get(high, "image_size")), "width": int(_get(high, "image_size"))}
    if defaults.get("apply_ocr"):  # the prompt is the harness's own ids, as when users pass words and boxes (UDOP)
        out["apply_ocr"] = False
    if isinstance(defaults.get("max_patches"), int):  # Pix2Struct resizes the image to at most this many patches
        grid = tower // patch
        out["max_patches"] = 2 * grid**2
        if hasattr(cls, "extract_flattened_patches"):
            # A flattened-patch processor (Pix2Struct, Kosmos-2.5) keeps the image's aspect ratio and pads the patches
            # to max_patches with zero rows of mask 0 (extract_flattened_patches, image_processing_pil_pix2struct.py:
            # 278-315 in 5.24.0), so a user's image almost always leaves some (800x600 under the default 2048: 2028
            # patches). Half a row more than the 1:2 image's grid x 2·grid fills: that image still resizes to
            # grid x 2·grid patches (⌊grid·√(1 + 1/(2·grid))⌋ = grid) and `grid` padding patches follow.
            out["max_patches"] += grid
    if isinstance(defaults.get("patch_size"), dict):
        out["patch_size"] = {"height": patch, "width": patch}
    elif isinstance(defaults.get("patch_size"), int):
        out["patch_size"] = patch
    # A published processor config repeats the model config's own anyres grid.
    if "image_grid_pinpoints" in defaults and getattr(config, "image_grid_pinpoints", None):
        out["image_grid_pinpoints"] = copy.deepcopy(config.image_grid_pinpoints)
    out.update(image_processor_overrides(config.model_type))  # fields in units the scaling above does not know
    return out, tower


def synthetic_images(batch: int, height: int, width: int, seed: int) -> list[Any]:
    """``batch`` seeded-noise RGB PIL images of ``height`` × ``width``."""
    from PIL import Image

    generator = torch.Generator().manual_seed(seed + 3)
    pixels = torch.randint(0, 256, (batch, height, width, 3), generator=generator, dtype=torch.uint8)
    return [Image.fromarray(p.numpy(), mode="RGB") for p in pixels]


def _as_features(out: Any) -> Any:
    """A processor's output as a mapping: IDEFICS' image processor returns the pixel tensor itself
    (image_processing_pil_idefics.py:91)."""
    return {"pixel_values": out} if isinstance(out, torch.Tensor) else out


def is_stand_in_class(cls: type) -> bool:
    """Whether ``cls`` is a torchvision-backend image processor run on the stand-in kernels (torchvision absent)."""
    return "TorchvisionBackend" in {c.__name__ for c in cls.__mro__} and not torchvision_importable()


def run_processor(cls: type, config: Any, batch: int, seed: int) -> tuple[dict[str, Any], int, Any]:
    """``cls`` sized to the tower of ``config`` and its output for one synthetic image per row."""
    with torchvision_stand_in(cls):
        kwargs, side = processor_kwargs(cls, config)
        processor = cls(**kwargs)
        images = synthetic_images(batch, side, 2 * side, seed)
        try:
            out = _as_features(processor(images=images, return_tensors="pt"))
        except (ValueError, TypeError, IndexError):
            out = None
        pixels = out.get("pixel_values") if out is not None else None
        if not isinstance(pixels, torch.Tensor) or (pixels.dim() == 5 and pixels.shape[0] != batch):
            out = _as_features(processor(images=[[image] for image in images], return_tensors="pt"))  # a list per row (Idefics2)
    return kwargs, side, out


def processed_images(model: Any, batch: int, seed: int) -> tuple[dict[str, torch.Tensor], str]:
    """What the model's image processor makes of one synthetic image per row, and how it was configured."""
    config = model.config
    cls = image_processor_class(config.model_type)
    if is_stand_in_class(cls):
        try:
            kwargs, side, out = run_processor(cls, config, batch, seed)
        except Exception as exc:  # a kernel the stand-in lacks, or the processor on the shrunk sizes
            text = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            raise NoImageProcessor(f"its torchvision-only image processor {cls.__name__} raised {text} on the torch "
                                   "stand-ins of torchvision's kernels") from exc
    else:
        kwargs, side, out = run_processor(cls, config, batch, seed)
    accepted = set(inspect.signature(model.forward).parameters)
    for owner in (model, getattr(model, "model", None)):  # what the tower reads beside the pixels (image_merge_sizes)
        getter = getattr(owner, "get_image_features", None)
        accepted |= set(inspect.signature(getter).parameters) if getter is not None else set()
    if "pixel_values_images" in out and "pixel_values_images" not in accepted:  # Video-LLaVA's forward renamed it
        out["pixel_values"] = out.pop("pixel_values_images")
    tensors = {k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k in accepted}
    if not {"pixel_values", "flattened_patches"} & set(tensors):  # Pix2Struct's patches are its pixels
        raise NoImageProcessor(f"{cls.__name__} makes {sorted(out)}, none of which the forward takes as pixel_values")
    dtype = next(model.parameters()).dtype
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in tensors.items())
    sized = ", ".join(f"{k}={v}" for k, v in kwargs.items() if k != "image_grid_pinpoints")
    kernels = " on torch stand-ins of torchvision's kernels" if is_stand_in_class(cls) else ""
    return tensors, f"{cls.__name__}({sized}){kernels} on a {side}x{2 * side} image: {shapes}"

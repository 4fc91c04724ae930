"""The ids a type's processor writes for one image where they are more than placeholders between two delimiters, and
the ids its ``mm_token_type_ids`` marks as image (``image_layout`` in families.yaml names the types and the ids their
configs do not)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvconform.families.registry import image_layout


@dataclass(frozen=True)
class ImageLayout:
    """One image's ids as the processor writes them, and the ids its ``mm_token_type_ids`` marks 1."""

    ids: list[int]
    marked: frozenset[int]


def _molmo2(config: Any, tensors: dict[str, torch.Tensor], given: dict[str, Any]) -> ImageLayout:
    """Molmo2Processor.replace_image_token (processing_molmo2.py:140-160 in 5.24.0): the low-resolution crop, then the
    high-resolution one, each rows of patches between its start id and ``<im_end>``; ``<im_col>`` closes each
    high-resolution row (image_use_col_tokens) and no low-resolution one (use_single_crop_col_tokens false in the
    published processor_config.json); the grid is the image processor's ``image_grids`` row [low-resolution rows,
    columns, high-resolution rows, columns]. create_mm_token_type_ids marks every id of its image_token_ids 1 (:79-90,
    processing_utils.py:1022): the patches, columns, starts and ends, which the model's prefill mask joins in one
    bidirectional block (modeling_molmo2.py:861-863)."""
    grids = tensors["image_grids"]
    if not bool((grids == grids[:1]).all()):
        raise ValueError(f"molmo2: one image layout per prompt needs one grid, got image_grids {grids.tolist()}")
    low_rows, low_columns, rows, columns = (int(v) for v in grids[0])
    patch, column = int(config.image_patch_id), int(given["image_column_token_id"])
    start, low_start, end = int(config.image_start_token_id), int(config.low_res_image_start_token_id), int(config.image_end_token_id)
    ids = [low_start, *[patch] * low_columns * low_rows, end, start, *([*[patch] * columns, column] * rows), end]
    frames = {int(config.frame_start_token_id), int(config.frame_end_token_id)}
    return ImageLayout(ids, frozenset({*ids, *frames}))


LAYOUTS: dict[str, Callable[[Any, dict[str, torch.Tensor], dict[str, Any]], ImageLayout]] = {"molmo2": _molmo2}


def processor_layout(config: Any, tensors: dict[str, torch.Tensor]) -> ImageLayout | None:
    """The type's layout of one image from its image processor's output, ``None`` for placeholders between delimiters."""
    given = image_layout(getattr(config, "model_type", ""))
    build = LAYOUTS.get(getattr(config, "model_type", ""))
    return build(config, tensors, given) if build is not None and given else None

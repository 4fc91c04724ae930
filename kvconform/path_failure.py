"""A model that loads but raises on one cache path: that path's failure, located in the model's own code."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

#: The transformers class each cache kind of the matrix builds.
CACHE_CLASSES = {"dynamic": "DynamicCache", "static": "StaticCache", "quantized": "QuantizedCache",
                 "quanto-int4": "QuantizedCache", "quanto-int2": "QuantizedCache", "hqq-int4": "QuantizedCache",
                 "hqq-int2": "QuantizedCache"}


def model_frame(error: BaseException, model: Any) -> str | None:
    """``file:line in function`` of the innermost traceback frame in the file that defines ``model``'s class
    (for remote code, the checkpoint's own ``modeling_*.py``), or ``None`` when no frame is there."""
    module = sys.modules.get(type(model).__module__)
    source = getattr(module, "__file__", None)
    if source is None:
        return None
    own = Path(source).resolve()
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if Path(frame.filename).resolve() == own]
    if not frames:
        return None
    frame = frames[-1]
    return f"{own.name}:{frame.lineno} in {frame.name}"


def raising_frame(error: BaseException) -> str | None:
    """``package/file:line`` of the innermost Python frame of ``error``'s traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    path = Path(frames[-1].filename)
    package = next((part for part in reversed(path.parts[:-1]) if part in ("torch", "transformers", "accelerate")), path.parent.name)
    return f"{package}/{path.name}:{frames[-1].lineno}"


def path_failure_message(cell_id: str, cache: str, attn: str, error: BaseException, frame: str | None) -> str:
    """What a maintainer reads: which cache (and attention) path raised, where in their model, and why.

    Only an error raised in the model's own file is called the model's; one raised inside a library the model
    called (a torch kernel, transformers' attention) names both places and blames neither.
    """
    cache_class = CACHE_CLASSES.get(cache, cache)
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())[:500] or repr(error)
    inner = raising_frame(error)
    own = frame is not None and inner is not None and inner.endswith(frame.split(" in ")[0])
    where = f" at {frame}" if own else (f" in {inner}" + (f", called from {frame}" if frame else "") if inner else "")
    if own:
        blame = f"the model's code does not support {cache_class} with {attn} attention"
    elif frame:
        blame = (f"raised inside a library the model's code called on the {cache_class} path with {attn} attention: the "
                 "model may drive it in a way it does not support, or the library fails here")
    else:
        blame = f"raised outside the model's own file, on the {cache_class} path with {attn} attention"
    return (f"{cell_id}: the {cache} cache path ({cache_class}, {attn} attention) raised {type(error).__name__}"
            f"{where}: {text} ({blame}; the model's other cells are judged on their own)")

"""Facts about transformers' classes that cost an import to read, remembered on disk per defining file.

Planning the default matrix reads ``_supports_sdpa`` of about 190 causal-LM classes and ``is_encoder_decoder`` of
about 140 default configs; importing their modules to read them costs 3-4 s in every pytest process (the
controller, each xdist worker, every inner run of the self-tests). The memo keeps each fact beside the size and
modification time of the file that defines the class, so an edited or reinstalled file is read again; a class
whose file cannot be found is always computed. No torch: this module imports transformers' lazy top level only.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from kvconform.cache_root import cache_dir


def remembered(topic: str, class_name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` (a JSON value about ``class_name``), from the ``topic`` memo while the class's file is unchanged."""
    stamp = _file_stamp(class_name)
    if stamp is None:
        return compute()
    memo = _memo(topic)
    known = memo.get(class_name)
    if isinstance(known, list) and len(known) == 3 and known[:2] == stamp:
        return known[2]
    value = compute()
    memo[class_name] = [*stamp, value]
    _save(topic, memo)
    return value


def _file_stamp(class_name: str) -> list[int] | None:
    """The size and modification time of the file that defines ``class_name`` in transformers (``None``: unknown)."""
    import transformers

    module = getattr(transformers, "_class_to_module", {}).get(class_name)
    if not module:
        return None
    try:
        spec = importlib.util.find_spec(f"transformers.{module}")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    stat = os.stat(spec.origin)
    return [stat.st_size, stat.st_mtime_ns]


def _memo_path(topic: str) -> Path:
    from importlib import metadata

    return cache_dir() / "memo" / f"{topic}-transformers-{metadata.version('transformers')}.json"


@cache
def _memo(topic: str) -> dict[str, Any]:
    """This process's copy of a memo (an unreadable file is an empty memo)."""
    try:
        loaded = json.loads(_memo_path(topic).read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _save(topic: str, memo: dict[str, Any]) -> None:
    """Write a memo atomically (xdist workers may write at once); a read-only cache folder keeps it in memory only."""
    path = _memo_path(topic)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(memo, sort_keys=True))
        os.replace(partial, path)
    except OSError:
        pass

"""Facts about transformers' classes that cost an import to read, remembered on disk per defining file.

Planning the default matrix reads ``_supports_sdpa`` of about 190 causal-LM classes and ``is_encoder_decoder`` of
about 140 default configs; importing their modules to read them costs 3-4 s in every pytest process (the
controller, each xdist worker, every inner run of the self-tests). The memo keeps each fact beside the size and
modification time of the file that defines the class, so an edited or reinstalled file is read again; a class
whose file cannot be found is always computed. A lookup only stats the remembered file: a controller that plans
from the memo imports neither transformers nor torch.
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
    return _remember(topic, class_name, lambda: _class_file(class_name), compute)


def auto_mapping(module: str, name: str) -> dict[str, str]:
    """``transformers.models.auto.<module>.<name>`` (model type -> class or config name), remembered while no file of
    ``models/auto/`` changed: reading it imports transformers' configuration machinery, and with it torch."""
    def compute() -> dict[str, str]:
        import importlib

        return dict(getattr(importlib.import_module(f"transformers.models.auto.{module}"), name))

    return dict(_remember("auto-mappings", f"{module}.{name}", lambda: _package_file("models/auto"), compute))


def _remember(topic: str, key: str, find_file: Callable[[], str | None], compute: Callable[[], Any]) -> Any:
    """The memo entry of ``key`` is ``[file, size, mtime_ns, value]``: a lookup stats the file, and imports nothing."""
    memo = _memo(topic)
    known = memo.get(key)
    if isinstance(known, list) and len(known) == 4 and isinstance(known[0], str) and _stamp(known[0]) == known[1:3]:
        return known[3]
    path = find_file()
    stamp = _stamp(path) if path else None
    if stamp is None:
        return compute()
    value = compute()
    memo[key] = [path, *stamp, value]
    _save(topic, memo)
    return value


def _stamp(path: str) -> list[int] | None:
    """Size and modification time of a file; for a folder, of its newest file and the sum of its files' sizes."""
    try:
        if not os.path.isdir(path):
            stat = os.stat(path)
            return [stat.st_size, stat.st_mtime_ns]
        stats = [entry.stat() for entry in os.scandir(path) if entry.is_file()]
    except OSError:
        return None
    return [sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)]


def _package_file(relative: str) -> str | None:
    """A path inside the installed transformers package, found without importing it."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), relative)


def _class_file(class_name: str) -> str | None:
    """The file that defines ``class_name`` in transformers (``None``: unknown); imports transformers' lazy top level."""
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
    return spec.origin


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

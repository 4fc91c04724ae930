"""Build or load the float32 master model of a matrix entry, safely (no pytest).

Remote code and pickle weights are refused unless the entry opts in; GGUF files are dequantized
once and cached on disk keyed by the file's content.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kvconform.build.checkpoint_files import ModelUnavailable as ModelUnavailable
from kvconform.build.checkpoint_files import check_safetensors_files, read_config
from kvconform.build.gguf_files import file_digest, resolve_gguf
from kvconform.build.split_gguf import check_joined, join_parts, joined_name, missing_parts, part_paths
from kvconform.cache_root import CACHE_DIR_ENV as CACHE_DIR_ENV
from kvconform.cache_root import cache_dir as cache_dir
from kvconform.compat import feed_cache_position
from kvconform.matrix import ModelSpec

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")

#: A transformers model (a ``PreTrainedModel``): typed ``Any`` because its attributes are dynamic
#: (``nn.Module.__getattr__``) and its API is only partly annotated.
Model = Any


class ModelRefused(RuntimeError):
    """Loading would run code or unpickle data the entry did not opt in to."""


def load_master(spec: ModelSpec) -> Model:
    """The model in float32, eval mode; other dtypes come from ``model_in_dtype``."""
    loaders = {"synthetic": _build_synthetic, "checkpoint": _load_folder, "gguf": _load_gguf, "hub": _load_hub}
    try:
        model = loaders[spec.source](spec)
    except BaseException:
        _release_offload_folders(None)
        raise
    _release_offload_folders(model)
    return model.eval()


#: How to load each master's weights again in another dtype (keyed weakly by the float32 master).
_RELOADERS: weakref.WeakKeyDictionary[Model, Callable[[torch.dtype], Model]] = weakref.WeakKeyDictionary()


def model_in_dtype(master: Model, dtype: str, device: str) -> Model:
    """``master``'s weights in ``dtype`` on ``device``, made the way users make them.

    float32 is the master itself (a copy off the CPU). Other dtypes come from
    ``from_pretrained(..., dtype=...)`` on the same weights, so modules a model keeps in float32
    (``_keep_in_fp32_modules``: routers, gates) and float32 buffers stay float32, unlike ``.to(dtype)``.
    Forwards that take ``cache_position`` get it fed as ``generate()`` did (``compat.feed_cache_position``).
    """
    if dtype == "float32":
        model = master if device == "cpu" else copy.deepcopy(master).to(device)
    else:
        reload = _RELOADERS.get(master) or _reload_from_saved(master)
        model = reload(getattr(torch, dtype)).eval().to(device)
        if getattr(master, "_kvconform_forward_defaults", False):  # a family type's forward keywords (families.yaml)
            from kvconform.families.build import keep_forward_defaults

            keep_forward_defaults(model)
    feed_cache_position(model)
    return model


def _reload_from_saved(master: Model) -> Callable[[torch.dtype], Model]:
    """Save a built (random-weight) master once, as its type's checkpoints are published, and load it back per dtype."""
    from kvconform.families.published_checkpoints import save_as_published

    root = cache_dir() / "built"
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="model-", dir=root))
    reload = save_as_published(master, folder)
    weakref.finalize(master, shutil.rmtree, folder, True)
    _RELOADERS[master] = reload
    return reload


def _build_synthetic(spec: ModelSpec) -> Model:
    from kvconform.families import CAUSAL_LM

    if spec.family != CAUSAL_LM:
        from kvconform.families.build import build_family, shrink_family_config

        return build_family(shrink_family_config(spec.location, spec.family, spec.config), spec.family, seed=spec.settings.seed)
    from kvconform.build.synthetic import build_synthetic, shrink_config

    return build_synthetic(shrink_config(spec.location, spec.config), seed=spec.settings.seed)


def check_config_safety(config: dict[str, Any], spec: ModelSpec, where: str) -> None:
    """Refuse ``auto_map`` (remote code) unless opted in; hub ids also need a pinned revision."""
    if "auto_map" not in config:
        return
    if not spec.trust_remote_code:
        raise ModelRefused(
            f"{spec.id}: {where} declares auto_map (custom Python code); refused. "
            "Set 'trust_remote_code: true' on the matrix entry (or pass --trust-remote-code) if you trust it"
        )
    if spec.source == "hub" and not spec.revision:
        raise ModelRefused(
            f"{spec.id}: remote code from the hub needs a pinned revision; add 'revision: <commit>' (or --revision)"
        )


def check_weight_safety(files: list[str], spec: ModelSpec, where: str) -> None:
    """Refuse pickle-only checkpoints unless ``allow_pickle`` is set."""
    safe = [f for f in files if f.endswith((".safetensors", ".gguf"))]
    pickled = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
    if pickled and not safe and not spec.allow_pickle:
        raise ModelRefused(
            f"{spec.id}: {where} has only pickle weights ({', '.join(sorted(pickled)[:3])}); unpickling can run code. "
            "Convert to safetensors, or if you trust the files set 'allow_pickle: true' on the matrix entry "
            "(or pass --allow-pickle with --model)"
        )


def _load_folder(spec: ModelSpec) -> Model:
    folder = Path(spec.location).expanduser()
    if not folder.is_dir():
        raise ModelUnavailable(f"{spec.id}: checkpoint folder {folder} does not exist (fix the path in the matrix or --model)")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelUnavailable(f"{spec.id}: {folder} has no config.json; is it a transformers checkpoint folder?")
    check_config_safety(read_config(folder), spec, str(config_file))
    check_weight_safety([p.name for p in folder.iterdir()], spec, str(folder))
    check_safetensors_files(folder)
    options = {"trust_remote_code": spec.trust_remote_code, "use_safetensors": None if spec.allow_pickle else True}
    return _with_reloader(folder, options, spec)


def _with_reloader(where: str | Path, options: dict[str, Any], spec: ModelSpec) -> Model:
    """Load ``where`` in float32 and remember how to load it again in another dtype (one device, no offloading)."""
    from kvconform.families.build import auto_class

    auto = auto_class(spec.family, spec.model_type)
    master = auto.from_pretrained(where, dtype=torch.float32, **options, **_placement(spec))
    _RELOADERS[master] = lambda dtype: auto.from_pretrained(where, dtype=dtype, **options)
    return master


def _placement(spec: ModelSpec) -> dict[str, Any]:
    if spec.device_map is None:
        return {}
    placement: dict[str, Any] = {"device_map": spec.device_map, "offload_folder": _offload_folder(spec)}
    if spec.max_memory:
        placement["max_memory"] = {(int(k) if str(k).isdigit() else k): v for k, v in spec.max_memory.items()}
    return placement


#: Offload folders made by the load in progress; ``load_master`` ties them to the loaded model's life.
_PENDING_OFFLOAD: list[str] = []


def _offload_folder(spec: ModelSpec) -> str:
    """A fresh folder under the cache dir for the weights accelerate re-saves when it offloads them to disk
    (MoE experts, pickle weights): without one, from_pretrained refuses such a device_map."""
    root = cache_dir() / "offload"
    root.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f"{spec.id}-", dir=root)
    _PENDING_OFFLOAD.append(folder)
    return folder


def _release_offload_folders(model: Model | None) -> None:
    """Remove the offload folders when ``model`` is garbage-collected (or at exit); at once if the load failed."""
    while _PENDING_OFFLOAD:
        folder = _PENDING_OFFLOAD.pop()
        if model is None:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            weakref.finalize(model, shutil.rmtree, folder, True)


def _load_gguf(spec: ModelSpec) -> Model:
    """Dequantize once into a dense float32 safetensors folder keyed by the file's sha256, then load it."""
    if spec.gguf_parts:
        return _load_split_gguf(spec)
    path = resolve_gguf(spec.location, spec.id)
    prepared = cache_dir() / "gguf" / file_digest(path)
    if not _is_prepared(prepared):
        _dequantize_gguf(path, prepared)
    return _with_reloader(prepared, {"use_safetensors": True}, spec)


def _load_split_gguf(spec: ModelSpec) -> Model:
    """A GGUF file split across packages: joined and dequantized once (keyed by its sha256, checked after
    joining); later loads check the installed parts still join into that sha256 without writing them."""
    problem = missing_parts(spec)
    if problem:
        raise ModelUnavailable(problem)
    paths = part_paths(spec)
    prepared = cache_dir() / "gguf" / str(spec.gguf_sha256)
    if _is_prepared(prepared):
        check_joined(spec, paths, join_parts(paths))
    else:
        (cache_dir() / "joining").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{spec.id}-", dir=cache_dir() / "joining") as folder:
            joined = Path(folder) / joined_name(spec)
            check_joined(spec, paths, join_parts(paths, joined))
            _dequantize_gguf(joined, prepared)
    return _with_reloader(prepared, {"use_safetensors": True}, spec)


def _is_prepared(folder: Path) -> bool:
    """A finished dequantized folder: a config and its weights, in one file or sharded with an index."""
    weights = (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file()
    return (folder / "config.json").is_file() and weights


def _dequantize_gguf(path: Path, target: Path) -> None:
    """Load through transformers' GGUF reader, rebuild a dense model from its config, save atomically."""
    from transformers import AutoModelForCausalLM

    quantized = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    config = quantized.config
    config.quantization_config = None
    if hasattr(config, "__dict__"):
        config.__dict__.pop("quantization_config", None)
    dense = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = dense.load_state_dict(quantized.state_dict(), strict=False)
    if missing or unexpected:
        raise RuntimeError(f"GGUF {path.name}: state dict mismatch (missing {missing[:3]}, unexpected {unexpected[:3]})")
    staging = target.with_name(target.name + f".tmp{os.getpid()}-{threading.get_ident()}")
    dense.save_pretrained(staging, safe_serialization=True)
    publish_prepared(staging, target)


def publish_prepared(staging: Path, target: Path) -> None:
    """Move a finished ``staging`` folder to ``target`` atomically; when another worker got there first,
    keep its folder and drop ours. An unfinished folder left by an interrupted run is replaced."""
    if target.exists() and not _is_prepared(target):
        shutil.rmtree(target, ignore_errors=True)
    try:
        staging.rename(target)
    except OSError:  # another worker finished first: keep its folder
        shutil.rmtree(staging, ignore_errors=True)
        if not _is_prepared(target):
            raise


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the hub (read at call time, as the loader does)."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


def _load_hub(spec: ModelSpec) -> Model:
    from transformers.utils.hub import cached_file

    offline = hub_offline()
    try:
        config_path = cached_file(spec.location, "config.json", revision=spec.revision, local_files_only=offline)
    except Exception as exc:  # noqa: BLE001 - hub errors are many; all mean "not here"
        how = f"hf download {spec.location}" + (f" --revision {spec.revision}" if spec.revision else "")
        mode = "offline (HF_HUB_OFFLINE=1) and not in the local cache" if offline else f"not reachable ({type(exc).__name__})"
        raise ModelUnavailable(f"{spec.id}: hub id {spec.location!r} is {mode}; fetch it on a connected machine with `{how}`") from None
    if config_path is None:
        raise ModelUnavailable(f"{spec.id}: hub id {spec.location!r} has no config.json")
    check_config_safety(read_config(Path(config_path).parent), spec, f"hub {spec.location} config.json")
    options = {
        "revision": spec.revision, "local_files_only": offline, "trust_remote_code": spec.trust_remote_code,
        "use_safetensors": None if spec.allow_pickle else True,
    }
    return _with_reloader(spec.location, options, spec)

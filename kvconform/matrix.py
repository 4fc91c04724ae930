"""Load and validate ``model_matrix.yaml`` into frozen specs (no torch, no pytest).

The whole file is checked before any test runs; every problem names the file, the entry and
the field, and unknown names come with close matches.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from kvconform.checks.table import CHECK_ORDER
from kvconform.checks.table import QUANTIZED_KINDS as QUANTIZED_KINDS
from kvconform.families import CAUSAL_LM, FAMILIES, ID_SUFFIX, INT_CACHES
from kvconform.known_failures import KnownFailure, key_problem, parse_known_failure
from kvconform.names import close_matches
from kvconform.strict_yaml import load_yaml

DTYPES = ("float32", "float16", "bfloat16")
DEVICES = ("cpu", "cuda", "mps")
#: transformers' ``QuantizedCache`` with an integer backend from an extra package (``pip install "kvconform[quantized]"``):
#: cache kind -> (backend, nbits). The quanto and HQQ layers keep a full-precision residual (docs/cache-paths.md).
#: With fp8's ``quantized`` they are ``QUANTIZED_KINDS`` (the check table's, re-exported here).
INT_QUANTIZED: Mapping[str, tuple[str, int]] = {
    "quanto-int4": ("quanto", 4), "quanto-int2": ("quanto", 2), "hqq-int4": ("hqq", 4), "hqq-int2": ("hqq", 2),
}
if tuple(INT_QUANTIZED) != INT_CACHES:  # the families' and the check table's list of these kinds must be this one
    raise ImportError(f"kvconform.matrix.INT_QUANTIZED names {tuple(INT_QUANTIZED)}, kvconform.families.INT_CACHES {INT_CACHES}")
CACHES = ("dynamic", "static", "quantized", *INT_QUANTIZED)
#: The module each integer backend imports and its distribution, and the command that installs them all.
BACKEND_PACKAGES = {"quanto": ("optimum.quanto", "optimum-quanto"), "hqq": ("hqq", "hqq")}
INSTALL_QUANTIZED = 'pip install "kvconform[quantized]" (optimum-quanto==0.2.7, hqq==0.2.8.post1)'


def missing_backend(kind: str) -> str | None:
    """Why the integer-quantized cache ``kind`` cannot run here (its backend package is not installed), or ``None``."""
    if kind not in INT_QUANTIZED:
        return None
    backend = INT_QUANTIZED[kind][0]
    module, distribution = BACKEND_PACKAGES[backend]
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        return f"QuantizedCache(backend={backend!r}) needs {distribution}, which is not installed: {INSTALL_QUANTIZED}"
    return None

#: Attention implementations a cell can run: the model's sdpa path and the eager reference implementation.
ATTENTIONS = ("sdpa", "eager", "flex_attention")
#: The quantized cache kind (transformers' ``QuantizedCache`` with its fp8 backend).
QUANTIZED = "quantized"
#: Tags an xfail key may name after '@': a cache kind whole or one of its parts (``parity@hqq``, ``bytes@int2``).
CACHE_TAGS = (*CACHES, *dict.fromkeys(part for kind in INT_QUANTIZED for part in kind.split("-")))
SOURCE_KEYS = ("synthetic", "checkpoint", "gguf", "hub", "sweep")
#: The assistants of assisted decoding: the model itself, a random build of its architecture, prompt lookup.
ASSISTED_DRAFTERS = ("self", "random", "prompt_lookup")

#: Fields allowed in ``defaults`` and (as overrides) in any model entry.
SETTING_KEYS = (
    "dtypes", "devices", "caches", "batch_size", "prompt_length", "decode_steps", "seed",
    "tolerances", "generate", "ragged", "prefix_reuse", "attentions", "variant_dtypes", "beam", "crop", "window_crossings",
    "padded_generate", "path_dtypes", "static_paths", "chunked_prefill", "assisted", "assisted_drafters",
)
MODEL_KEYS = SETTING_KEYS + SOURCE_KEYS + (
    "id", "config", "revision", "trust_remote_code", "allow_pickle", "xfail", "xfail_groups", "exclude",
    "device_map", "max_memory", "notes", "family",
)
#: The fields of one ``xfail_groups`` entry of a sweep: the types one finding applies to, and its entries by check.
GROUP_KEYS = ("types", "xfail")
TOLERANCE_KEYS = ("atol", "rtol")


class MatrixError(ValueError):
    """A problem in the matrix file; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class GGUFPart:
    """One piece of a GGUF file split across Python packages: ``FILE`` inside import package ``PACKAGE``."""

    package: str
    file: str

    @property
    def distribution(self) -> str:
        """The name to ``pip install`` (the import name with ``-`` for ``_``)."""
        return self.package.replace("_", "-")


@dataclass(frozen=True)
class Tolerance:
    """Parity limit ``|Δlogit| <= atol + rtol * max|reference logit|`` for one dtype."""

    atol: float
    rtol: float

    def limit(self, logit_scale: float) -> float:
        return self.atol + self.rtol * logit_scale


#: The parity tolerance of every dtype, which a matrix file inherits unless its ``tolerances`` override it
#: (docs/tolerances.md). A dtype of ``DTYPES`` always has one, so no cell lacks a limit.
BUILTIN_TOLERANCES: Mapping[str, Tolerance] = {
    "float32": Tolerance(atol=1e-5, rtol=3e-5),
    "float16": Tolerance(atol=1e-3, rtol=2e-2),
    "bfloat16": Tolerance(atol=1e-2, rtol=1e-1),
}


@dataclass(frozen=True)
class Settings:
    """How a model is probed; defaults come from the matrix, entries may override any field."""

    dtypes: tuple[str, ...] = DTYPES
    devices: tuple[str, ...] = ("cpu", "cuda")
    caches: tuple[str, ...] = ("dynamic",)
    batch_size: int = 2
    prompt_length: int = 6
    decode_steps: int = 8
    seed: int = 0
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    #: Also compare ``generate()`` with and without the cache.
    generate: bool = True
    #: Also probe a left-padded ragged batch against each row's own unpadded reference.
    ragged: bool = False
    #: Also check that continuing from a copied prefilled cache equals a fresh run.
    prefix_reuse: bool = False
    attentions: tuple[str, ...] = ("sdpa",)
    #: Dtypes of the variant cells (any cache but dynamic, or eager attention); ``None``: every dtype.
    variant_dtypes: tuple[str, ...] | None = None
    #: Also compare cached and uncached beam search (beams and their scores), float32 cells.
    beam: bool = False
    #: Also crop a prefilled cache back and continue it against the uncached reference.
    crop: bool = False
    #: Also compare cached and uncached greedy ``generate()`` on a left-padded batch, float32 cells.
    padded_generate: bool = False
    #: Also decode sliding-window and chunked layers from prompts shorter than and equal to the window.
    window_crossings: bool = False
    #: Dtypes whose cells run the reuse paths (generate, ragged, prefix_reuse, crop, padded generate); ``None``: all.
    path_dtypes: tuple[str, ...] | None = None
    #: Whether static-cache cells also run the reuse paths (attention variants never do: checks/table.py).
    static_paths: bool = True
    #: Also prefill the prompt in chunks and compare with one prefill (logits, K/V and states), float32 cells.
    chunked_prefill: bool = False
    #: Also compare assisted ``generate()`` (an assistant model, prompt lookup) with greedy, float32 cells.
    assisted: bool = False
    #: The drafters the assisted path runs with the model's own attention (``ASSISTED_DRAFTERS``).
    assisted_drafters: tuple[str, ...] = ASSISTED_DRAFTERS


@dataclass(frozen=True)
class ModelSpec:
    """One model of the matrix: exactly one source plus its settings."""

    id: str
    source: str
    """One of ``synthetic``, ``checkpoint``, ``gguf``, ``hub``."""
    location: str
    """The model_type, folder, GGUF path or hub id."""
    settings: Settings
    config: Mapping[str, Any] = field(default_factory=dict)
    """Config overrides (synthetic models only)."""
    revision: str | None = None
    """Pinned hub revision (commit, tag or branch)."""
    trust_remote_code: bool = False
    """Allow the checkpoint's own Python code to run. Off unless the entry opts in."""
    allow_pickle: bool = False
    """Allow pickle weight files (``.bin``/``.pt``). Off unless the entry opts in."""
    xfail: Mapping[str, KnownFailure] = field(default_factory=dict)
    """Known failures: ``check``, ``check@dtype``, ``*`` or ``*@dtype`` -> the failure expected and why."""
    device_map: str | None = None
    max_memory: Mapping[str, str] | None = None
    family: str = CAUSAL_LM
    """``causal-lm``, ``image-text-to-text``, ``seq2seq`` or ``speech-seq2seq``: how the model is built and driven."""
    gguf_parts: tuple[GGUFPart, ...] = ()
    """A GGUF file split across packages, in order (``location`` then reads ``parts:FIRST … LAST (N)``); empty otherwise."""
    gguf_sha256: str | None = None
    """The sha256 of the joined parts, as the matrix declares it (split GGUF files only)."""

    @property
    def model_type(self) -> str | None:
        return self.location if self.source == "synthetic" else None


@dataclass(frozen=True)
class Matrix:
    """The validated matrix: the models to run and the architectures left out, with reasons."""

    path: Path
    defaults: Settings
    models: tuple[ModelSpec, ...]
    excluded: Mapping[str, str]
    unmatched: tuple[str, ...] = ()
    """Sweep exclude/xfail names that are no model_type of the installed transformers (another release, or a typo)."""
    unmatched_hints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The model_types of the sweep close to each unmatched name (a typo's "did you mean")."""

    def unmatched_text(self) -> str:
        """``mistrall (did you mean mistral?), qwen``: the unmatched names with their close matches."""
        hints = self.unmatched_hints
        return ", ".join(f"{name} (did you mean {' or '.join(hints[name])}?)" if hints.get(name) else name
                         for name in self.unmatched)

    def select(self, ids: list[str]) -> Matrix:
        """Only the models whose id matches one of ``ids`` (exact)."""
        known = {m.id for m in self.models}
        for wanted in ids:
            if wanted not in known:
                raise MatrixError(unknown_message(f"{self.path}: unknown model id", wanted, known))
        return replace(self, models=tuple(m for m in self.models if m.id in ids))


def unknown_message(prefix: str, name: str, known: Any) -> str:
    """``prefix 'name'. Did you mean: a, b? Available: ...`` for a lookup that failed."""
    known = sorted(known)
    close = close_matches(name, known)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    listing = ", ".join(known) if len(known) <= 12 else ", ".join(known[:12]) + f", … ({len(known)} in all)"
    return f"{prefix} {name!r}.{hint} Available: {listing}"


#: A family sweep's installed model types and the ones it leaves out with reasons: ``family -> (types, {type: reason})``.
FamilySweeps = Callable[[str], tuple[list[str], Mapping[str, str]]]


def load_matrix(
    path: str | Path,
    *,
    known_model_types: Callable[[], list[str]],
    excluded_types: Mapping[str, str] | None = None,
    family_sweeps: FamilySweeps | None = None,
) -> Matrix:
    """Read and validate a matrix file; raise ``MatrixError`` naming file, entry and field."""
    path = Path(path)
    try:
        raw = load_yaml(path.read_text())
    except FileNotFoundError:
        raise MatrixError(f"{path}: matrix file not found (pass another with --matrix PATH)") from None
    except yaml.YAMLError as exc:
        raise MatrixError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    return parse_matrix(raw, path=path, known_model_types=known_model_types, excluded_types=excluded_types or {},
                        family_sweeps=family_sweeps)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line with 1-based positions."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if not problem:
        return " ".join(str(exc).split())
    text = problem + (f" at line {mark.line + 1}, column {mark.column + 1}" if mark else "")
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:
        started = f" started at line {context_mark.line + 1}, column {context_mark.column + 1}" if context_mark else ""
        text += f" ({context}{started})"
    return text


def parse_matrix(
    raw: Any,
    *,
    path: Path,
    known_model_types: Callable[[], list[str]],
    excluded_types: Mapping[str, str],
    family_sweeps: FamilySweeps | None = None,
) -> Matrix:
    """Validate already-parsed YAML data (see ``load_matrix``)."""
    where = str(path)
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}: expected a mapping with 'defaults' and 'models', got {type(raw).__name__}")
    _check_keys(raw, ("version", "defaults", "models"), where)
    entries = raw.get("models")
    if not isinstance(entries, list) or not entries:
        raise MatrixError(f"{where}: 'models' must be a non-empty list of model entries")
    # Each problem of the defaults and of every entry is reported (one does not hide another).
    problems: list[str] = []
    base = Settings(tolerances=BUILTIN_TOLERANCES)
    try:
        defaults = _parse_settings(raw.get("defaults") or {}, base, f"{where}: defaults")
    except MatrixError as exc:
        problems.append(str(exc))
        defaults = base
    models: list[ModelSpec] = []
    excluded: dict[str, str] = {}
    unmatched: list[str] = []
    hints: dict[str, tuple[str, ...]] = {}
    types: list[str] | None = None
    for index, entry in enumerate(entries):
        label = f"{where}: models[{index}]"
        if isinstance(entry, dict) and "id" in entry:
            label += f" (id {entry['id']!r})"
        try:
            if not isinstance(entry, dict):
                raise MatrixError(f"{label}: expected a mapping, got {type(entry).__name__}")
            _check_keys(entry, MODEL_KEYS, label)
            if "xfail_groups" in entry and "sweep" not in entry:
                raise MatrixError(f"{label}: field 'xfail_groups' belongs to a sweep entry (a single model lists its "
                                  "known failures under 'xfail')")
            if entry.get("sweep", CAUSAL_LM) != CAUSAL_LM or entry.get("family", CAUSAL_LM) != CAUSAL_LM:
                family_entry = _family_entry(entry, defaults, label, family_sweeps)
                models.extend(family_entry[0])
                excluded.update(family_entry[1])
                unmatched.extend(family_entry[2])
                hints.update(family_entry[2])
                continue
            if "sweep" in entry or "synthetic" in entry:
                types = types if types is not None else known_model_types()
            if "sweep" in entry:
                swept, left_out = _expand_sweep(entry, defaults, label, types or [], excluded_types)
                models.extend(swept)
                excluded.update(left_out)
                grouped = [t for group in entry.get("xfail_groups", []) for t in group.get("types", [])]
                named = {*entry.get("exclude", {}), *entry.get("xfail", {}), *grouped}
                unmatched.extend(sorted(named - set(types or [])))
                hints.update({name: tuple(close_matches(name, types or [])) for name in named - set(types or [])})
            else:
                models.append(_parse_model(entry, defaults, label, types or []))
        except MatrixError as exc:
            problems.append(str(exc))
    if problems:
        raise MatrixError(problems[0] if len(problems) == 1 else
                          f"{where}: {len(problems)} problems:\n" + "\n".join(f"  - {problem}" for problem in problems))
    _check_unique_ids(models, where)
    return Matrix(path=path, defaults=defaults, models=tuple(models), excluded=excluded, unmatched=tuple(unmatched),
                  unmatched_hints=hints)


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], label: str) -> None:
    for key in data:
        if key not in allowed:
            close = close_matches(str(key), allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else f" Allowed: {', '.join(allowed)}"
            raise MatrixError(f"{label}: unknown field {key!r}.{hint}")


def _expect(value: Any, kind: type | tuple[type, ...], label: str, field_name: str) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise MatrixError(f"{label}: field {field_name!r} must be a number, got a boolean")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise MatrixError(f"{label}: field {field_name!r} must be {names}, got {type(value).__name__} {value!r}")
    return value


def _names(value: Any, allowed: tuple[str, ...], label: str, field_name: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise MatrixError(f"{label}: field {field_name!r} must be a non-empty list, got {value!r}")
    for item in items:
        if item not in allowed:
            raise MatrixError(unknown_message(f"{label}: field {field_name!r} has unknown value", str(item), allowed))
    return tuple(dict.fromkeys(items))


def _positive_int(value: Any, label: str, field_name: str, minimum: int = 1) -> int:
    _expect(value, int, label, field_name)
    if value < minimum:
        raise MatrixError(f"{label}: field {field_name!r} must be >= {minimum}, got {value}")
    return value


def _parse_tolerances(raw: Any, base: Mapping[str, Tolerance], label: str) -> dict[str, Tolerance]:
    _expect(raw, dict, label, "tolerances")
    merged = dict(base)
    for dtype, values in raw.items():
        _names([dtype], DTYPES, label, "tolerances")
        where = f"{label}: tolerances.{dtype}"
        _expect(values, dict, where, dtype)
        _check_keys(values, TOLERANCE_KEYS, where)
        old = merged.get(dtype, Tolerance(0.0, 0.0))
        fields = {k: float(_expect(values.get(k, getattr(old, k)), (int, float), where, k)) for k in TOLERANCE_KEYS}
        merged[dtype] = Tolerance(**fields)
    return merged


def _parse_settings(raw: Mapping[str, Any], base: Settings, label: str) -> Settings:
    _expect(raw, dict, label, "defaults")
    if label.endswith("defaults"):
        _check_keys(raw, SETTING_KEYS, label)
    changes: dict[str, Any] = {}
    allowed_names = {"dtypes": DTYPES, "devices": DEVICES, "caches": CACHES, "attentions": ATTENTIONS, "variant_dtypes": DTYPES,
                     "path_dtypes": DTYPES, "assisted_drafters": ASSISTED_DRAFTERS}
    for key, allowed in allowed_names.items():
        if key in raw:
            changes[key] = _names(raw[key], allowed, label, key)
    for key, minimum in (("batch_size", 1), ("prompt_length", 2), ("decode_steps", 1), ("seed", 0)):
        if key in raw:
            changes[key] = _positive_int(raw[key], label, key, minimum)
    for key in ("generate", "ragged", "prefix_reuse", "beam", "crop", "padded_generate", "window_crossings", "static_paths",
                "chunked_prefill", "assisted"):
        if key in raw:
            changes[key] = _expect(raw[key], bool, label, key)
    if "tolerances" in raw:
        changes["tolerances"] = _parse_tolerances(raw["tolerances"], base.tolerances, label)
    return replace(base, **changes)


def _check_model_type(model_type: Any, label: str, field_name: str, known: list[str]) -> str:
    _expect(model_type, str, label, field_name)
    if model_type not in known:
        raise MatrixError(unknown_message(f"{label}: field {field_name!r}: unknown model_type", model_type, known))
    return model_type


def _gguf_source(value: Any, label: str) -> tuple[str, tuple[GGUFPart, ...], str | None]:
    """(location, parts, sha256) of a ``gguf`` field; a single file has no parts and no declared sha256."""
    if isinstance(value, dict) and "parts" in value:
        parts, digest = _gguf_parts(value, label)
        return f"parts:{parts[0].package} … {parts[-1].package} ({len(parts)})", parts, digest
    return _gguf_location(value, label), (), None


def _gguf_location(value: Any, label: str) -> str:
    if isinstance(value, str):
        return value
    _expect(value, dict, label, "gguf")
    _check_keys(value, ("path", "package", "file", "parts"), f"{label}: gguf")
    if "path" in value:
        return _expect(value["path"], str, label, "gguf.path")
    if "package" in value and "file" in value:
        return f"package:{_expect(value['package'], str, label, 'gguf.package')}/{_expect(value['file'], str, label, 'gguf.file')}"
    raise MatrixError(f"{label}: field 'gguf' needs either 'path', both 'package' and 'file', or 'parts' with 'sha256'")


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _gguf_parts(value: Mapping[str, Any], label: str) -> tuple[tuple[GGUFPart, ...], str]:
    """``gguf: {parts: [{package, file}, ...], sha256}`` -> (the parts in order, the joined file's sha256)."""
    where = f"{label}: gguf"
    _check_keys(value, ("parts", "sha256"), where)
    parts = value["parts"]
    if not isinstance(parts, list) or len(parts) < 2:
        raise MatrixError(f"{where}: field 'parts' must list at least two {{package, file}} pieces in order, got {parts!r}")
    found = []
    for index, part in enumerate(parts):
        _expect(part, dict, where, f"parts[{index}]")
        _check_keys(part, ("package", "file"), f"{where}.parts[{index}]")
        if "package" not in part or "file" not in part:
            raise MatrixError(f"{where}.parts[{index}]: needs both 'package' (an import name) and 'file' (a path inside it)")
        package = _expect(part["package"], str, where, f"parts[{index}].package")
        if not package.isidentifier():
            raise MatrixError(f"{where}.parts[{index}]: 'package' must be an import name such as my_weights_part1, got {package!r}")
        found.append(GGUFPart(package, _expect(part["file"], str, where, f"parts[{index}].file")))
    if len(set(found)) != len(found):
        raise MatrixError(f"{where}: field 'parts' names the same piece twice")
    if "sha256" not in value:
        raise MatrixError(f"{where}: a split file needs 'sha256', the hex digest of the joined parts (sha256sum of the whole file)")
    digest = _expect(value["sha256"], str, where, "sha256")
    if not _SHA256.fullmatch(digest):
        raise MatrixError(f"{where}: field 'sha256' must be 64 lowercase hex digits, got {digest!r}")
    return tuple(found), digest


def _parse_xfail(raw: Any, label: str) -> dict[str, KnownFailure]:
    _expect(raw, dict, label, "xfail")
    parsed = {}
    for key, entry in raw.items():
        problem = key_problem(str(key), CHECK_ORDER, (*DTYPES, *CACHE_TAGS, *ATTENTIONS))
        if problem is not None:
            raise MatrixError(f"{label}: xfail.{key}: {problem}")
        try:
            known = parse_known_failure(entry, f"{label}: xfail.{key}")
        except ValueError as exc:
            raise MatrixError(str(exc)) from None
        if known is not None:  # entries for other transformers releases are validated, then left out
            parsed[str(key)] = known
    return parsed


def _parse_model(entry: Mapping[str, Any], defaults: Settings, label: str, known_types: list[str]) -> ModelSpec:
    sources = [key for key in SOURCE_KEYS if key in entry]
    if len(sources) != 1:
        found = ", ".join(sources) if sources else "none"
        raise MatrixError(f"{label}: needs exactly one source of {', '.join(SOURCE_KEYS[:-1])} (found: {found})")
    source = sources[0]
    if "id" not in entry:
        raise MatrixError(f"{label}: missing field 'id' (a short name used in test ids, e.g. 'llama-gqa')")
    model_id = _expect(entry["id"], str, label, "id")
    if not model_id or any(ch in model_id for ch in "[] "):
        raise MatrixError(f"{label}: field 'id' must be non-empty without spaces or brackets, got {model_id!r}")
    parts: tuple[GGUFPart, ...] = ()
    digest = None
    if source == "synthetic":
        location = _check_model_type(entry["synthetic"], label, "synthetic", known_types)
    elif source == "gguf":
        location, parts, digest = _gguf_source(entry["gguf"], label)
    else:
        location = _expect(entry[source], str, label, source)
    if "config" in entry and source != "synthetic":
        raise MatrixError(f"{label}: field 'config' only applies to synthetic models")
    if "revision" in entry and source != "hub":
        raise MatrixError(f"{label}: field 'revision' only applies to hub models")
    settings = _parse_settings({k: entry[k] for k in SETTING_KEYS if k in entry}, defaults, label)
    if "device_map" in entry and settings.dtypes != ("float32",):
        raise MatrixError(f"{label}: a device_map entry is probed in the dtype it is loaded in; set 'dtypes: [float32]'")
    return ModelSpec(
        id=model_id,
        source=source,
        location=location,
        settings=settings,
        config=dict(_expect(entry.get("config", {}), dict, label, "config")),
        revision=_expect(entry["revision"], str, label, "revision") if "revision" in entry else None,
        trust_remote_code=_expect(entry.get("trust_remote_code", False), bool, label, "trust_remote_code"),
        allow_pickle=_expect(entry.get("allow_pickle", False), bool, label, "allow_pickle"),
        xfail=_parse_xfail(entry.get("xfail", {}), label),
        device_map=_expect(entry["device_map"], str, label, "device_map") if "device_map" in entry else None,
        max_memory=dict(_expect(entry["max_memory"], dict, label, "max_memory")) if "max_memory" in entry else None,
        gguf_parts=parts,
        gguf_sha256=digest,
    )


def _expand_sweep(
    entry: Mapping[str, Any],
    defaults: Settings,
    label: str,
    known_types: list[str],
    excluded_types: Mapping[str, str],
) -> tuple[list[ModelSpec], dict[str, str]]:
    """``sweep: causal-lm`` -> one synthetic spec per installed causal-LM model_type."""
    if entry["sweep"] != CAUSAL_LM:
        raise MatrixError(f"{label}: field 'sweep' must be one of {', '.join(FAMILIES)}, got {entry['sweep']!r}")
    for key in ("id", "synthetic", "checkpoint", "gguf", "hub", "revision", "config"):
        if key in entry:
            raise MatrixError(f"{label}: field {key!r} is not allowed in a sweep entry (use 'exclude' or 'xfail')")
    # Entries naming model_types this transformers release lacks are kept for other releases, not errors.
    left_out = dict(excluded_types)
    for model_type, reason in _expect(entry.get("exclude", {}), dict, label, "exclude").items():
        left_out[model_type] = _expect(reason, str, label, f"exclude.{model_type}")
    xfails = _with_groups(_expect(entry.get("xfail", {}), dict, label, "xfail"), entry.get("xfail_groups", []), label)
    for model_type, checks in xfails.items():
        _parse_xfail(checks, f"{label}: {model_type}")
    settings = {k: entry[k] for k in SETTING_KEYS if k in entry}
    specs = [
        _parse_model(
            {"id": model_type, "synthetic": model_type, "xfail": xfails.get(model_type, {}), **settings},
            defaults, f"{label}: {model_type}", known_types,
        )
        for model_type in known_types
        if model_type not in left_out
    ]
    return specs, {t: r for t, r in left_out.items() if t in known_types}


def _with_groups(xfails: dict[str, Any], groups: Any, label: str) -> dict[str, Any]:
    """A sweep's per-type known failures with its ``xfail_groups`` merged in: each group names the types one finding
    applies to (a release's shipped bug on every type whose forward meets it) and its entries by check. A type that has
    an entry for that check already keeps it first and gets the group's as a further alternative; a group's ``*`` entry
    (the model does not build or run on its releases, so every check fails with it) also goes first in each of the
    type's named entries, its own and those of every group, earlier or later in the file, where a named check would
    otherwise win over ``*`` (known_failures.known_failure)."""

    def alternatives(entry: Any) -> list[Any]:
        return list(entry) if isinstance(entry, list) else [entry]

    merged = {model_type: dict(checks) if isinstance(checks, dict) else checks for model_type, checks in xfails.items()}
    stars: dict[str, list[Any]] = {}
    for index, group in enumerate(_expect(groups, list, label, "xfail_groups")):
        where = f"{label}: xfail_groups[{index}]"
        _expect(group, dict, where, "xfail_groups")
        _check_keys(group, GROUP_KEYS, where)
        types = _expect(group.get("types"), list, where, "types")
        entries = _expect(group.get("xfail"), dict, where, "xfail")
        for model_type in types:
            checks = merged.setdefault(str(model_type), {})
            if "*" in entries:
                stars.setdefault(str(model_type), []).append(entries["*"])
            for key, found in entries.items():
                existing = checks.get(key)
                checks[key] = found if existing is None else [*alternatives(existing), found]
    for model_type, found in stars.items():
        checks = merged[model_type]
        checks.update({key: [*found, *alternatives(own)] for key, own in checks.items() if key != "*"})
    return merged


def _family_entry(
    entry: Mapping[str, Any], defaults: Settings, label: str, family_sweeps: FamilySweeps | None,
) -> tuple[list[ModelSpec], dict[str, str], dict[str, tuple[str, ...]]]:
    """A family sweep (``sweep: seq2seq``) or one entry with ``family:`` -> (specs, excluded by id, unmatched names
    with their close matches)."""
    family = entry.get("sweep", entry.get("family"))
    if family not in FAMILIES:
        raise MatrixError(unknown_message(f"{label}: unknown family", str(family), FAMILIES))
    if "sweep" in entry and "family" in entry:
        raise MatrixError(f"{label}: a sweep names its family itself; drop the field 'family'")
    if family_sweeps is None:  # the installed transformers' mappings (imported only when a family entry needs them)
        from kvconform.families.registry import sweep_types

        family_sweeps = sweep_types
    types, left_out = family_sweeps(family)
    if "sweep" not in entry:
        spec = _parse_model({k: v for k, v in entry.items() if k != "family"}, defaults, label, [*types, *left_out])
        return [replace(spec, family=family)], {}, {}
    specs, excluded = _expand_sweep({**entry, "sweep": CAUSAL_LM}, defaults, label, [*types, *left_out], left_out)
    suffix = ID_SUFFIX[family]
    named = {*entry.get("exclude", {}), *entry.get("xfail", {})}
    return (
        [replace(spec, id=f"{spec.id}-{suffix}", family=family) for spec in specs],
        {f"{model_type}-{suffix}": reason for model_type, reason in excluded.items()},
        {name: tuple(close_matches(name, types)) for name in sorted(named - set(types) - set(left_out))},
    )


def _check_unique_ids(models: list[ModelSpec], where: str) -> None:
    seen: set[str] = set()
    for spec in models:
        if spec.id in seen:
            raise MatrixError(f"{where}: duplicate model id {spec.id!r} (ids must be unique; a sweep uses model_types as ids)")
        seen.add(spec.id)

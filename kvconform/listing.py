"""``--list-models``: the resolved matrix and the excluded architectures as tables."""

from __future__ import annotations

from collections.abc import Callable

from tabulate import tabulate

from kvconform.cells import cache_axes
from kvconform.checks.table import CHECK_TABLE, CHECKS
from kvconform.families import CAUSAL_LM
from kvconform.matrix import Matrix, ModelSpec


def render_listing(matrix: Matrix, paths: Callable[[ModelSpec], dict[str, str | None]] | None = None) -> str:
    """The matrix as a table; with ``paths`` (support.spec_paths) each synthetic entry's cache paths and
    attention implementations, and how many architectures run each."""
    found = {spec.id: _paths_of(spec, paths) for spec in matrix.models}
    rows = [
        (spec.id, spec.model_type or "(from checkpoint)", f"{spec.source}:{spec.location}",
         ",".join(spec.settings.dtypes), ",".join(spec.settings.devices), ",".join(cache_axes(spec)[0]), spec.family,
         found[spec.id][0])
        for spec in matrix.models
    ]
    parts = [
        f"{matrix.path}: {len(matrix.models)} models",
        tabulate(rows, headers=("id", "model_type", "source", "dtypes", "devices", "caches", "family", "paths"),
                 tablefmt="github"),
    ]
    decided = [reasons for _, reasons in found.values() if reasons]
    if decided:
        counts = ", ".join(f"{path} {sum(r[path] is None for r in decided)}" for path in decided[0])
        parts += ["", f"paths of the {len(decided)} synthetic architectures (besides the dynamic cache, which all run): {counts}; "
                  "beam search runs on all (generate() may refuse a model at run time); a cache that cannot crop after its "
                  "prefill (recurrent states, a static window) is a skip with the reason"]
    if matrix.excluded:
        excluded = sorted(matrix.excluded.items())
        parts += ["", f"{len(excluded)} architectures excluded:",
                  tabulate(excluded, headers=("model_type", "reason"), tablefmt="github")]
    if matrix.unmatched:
        parts += ["", "sweep exclude/xfail entries naming no model_type of this transformers release "
                  "(another release, or a typo): " + matrix.unmatched_text()]
    return "\n".join(parts)


def _paths_of(spec: ModelSpec, paths: Callable[[ModelSpec], dict[str, str | None]] | None) -> tuple[str, dict[str, str | None]]:
    if paths is not None and spec.family != CAUSAL_LM:  # the family's paths, as the check table gives them
        run = [c.name for c in CHECK_TABLE if c.reuse_path or c.name in ("generate", "beam", "reorder", "assisted")]
        return (" ".join(name for name in run if spec.family in CHECKS[name].families) or "decode only", {})
    if paths is None or spec.model_type is None or spec.source != "synthetic":
        return ("decided when loaded" if paths is not None else "", {})
    try:
        reasons = paths(spec)
    except Exception as exc:  # noqa: BLE001 - a config that cannot be built is listed, not fatal
        return (f"config fails: {type(exc).__name__}", {})
    wanted = set(spec.settings.caches) | set(spec.settings.attentions) | {"crop"}
    return (" ".join(p for p, reason in reasons.items() if reason is None and p in wanted) or "dynamic only", reasons)

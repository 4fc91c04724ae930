"""``--list-models``: the resolved matrix and the excluded architectures as tables."""

from __future__ import annotations

from tabulate import tabulate

from kvconform.matrix import Matrix


def render_listing(matrix: Matrix) -> str:
    rows = [
        (spec.id, spec.model_type or "(from checkpoint)", f"{spec.source}:{spec.location}",
         ",".join(spec.settings.dtypes), ",".join(spec.settings.devices), ",".join(spec.settings.caches), spec.family)
        for spec in matrix.models
    ]
    parts = [
        f"{matrix.path}: {len(matrix.models)} models",
        tabulate(rows, headers=("id", "model_type", "source", "dtypes", "devices", "caches", "family"), tablefmt="github"),
    ]
    if matrix.excluded:
        excluded = sorted(matrix.excluded.items())
        parts += ["", f"{len(excluded)} architectures excluded:",
                  tabulate(excluded, headers=("model_type", "reason"), tablefmt="github")]
    if matrix.unmatched:
        parts += ["", "sweep exclude/xfail entries naming no model_type of this transformers release "
                  "(another release, or a typo): " + ", ".join(matrix.unmatched)]
    return "\n".join(parts)

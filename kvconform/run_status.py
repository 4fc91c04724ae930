"""Whether a run finished: the ``run`` field of a report and the banner that says what is missing (plain data).

A report written after Ctrl-C, ``-x`` or a crashed controller holds only what finished; without this
field its totals ("13 passed, 0 failed") read like a complete run. ``run`` is::

    {"complete": bool, "stopped": "interrupted (Ctrl-C)" | ... | None,
     "planned": int | None, "never_ran": int, "cells_never_ran": int,
     "shard": "I/N" | None, "empty_shard": bool}

``planned`` counts the checks pytest collected (None when collection itself was cut short);
``never_ran`` the planned checks without a result; ``cells_never_ran`` the cells with at least one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Doc = dict[str, Any]
Key = tuple[str, str]


def run_field(*, planned: set[Key] | None, finished: Iterable[Key], stopped: str | None,
              shard: str | None, empty_shard: bool) -> dict[str, Any]:
    """The ``run`` field of a report from the planned and finished ``(cell_id, check)`` keys."""
    missing = sorted((planned or set()) - set(finished))
    complete = stopped is None and not missing
    return {
        "complete": complete,
        "stopped": stopped if stopped or complete else "some planned checks never ran",
        "planned": len(planned) if planned is not None else None,
        "never_ran": len(missing),
        "cells_never_ran": len({cell for cell, _ in missing}),
        "shard": shard,
        "empty_shard": empty_shard,
    }


def merge_run_fields(docs: list[Doc]) -> dict[str, Any]:
    """The ``run`` field of shards merged into one report: complete only if every shard is."""
    runs = [doc.get("run") or {"complete": True, "planned": None, "never_ran": 0, "cells_never_ran": 0} for doc in docs]
    stopped = sorted({run["stopped"] for run in runs if run.get("stopped")})
    planned = [run.get("planned") for run in runs]
    return {
        "complete": all(run.get("complete", True) for run in runs),
        "stopped": "; ".join(stopped) or None,
        "planned": None if None in planned else sum(planned),
        "never_ran": sum(run.get("never_ran", 0) for run in runs),
        "cells_never_ran": sum(run.get("cells_never_ran", 0) for run in runs),
        "shard": None,
        "empty_shard": all(run.get("empty_shard", False) for run in runs),
    }


def is_incomplete(doc: Doc) -> bool:
    """Whether ``doc`` says some of its planned checks never ran (reports without ``run`` count as complete)."""
    return not (doc.get("run") or {}).get("complete", True)


def incomplete_line(doc: Doc) -> str | None:
    """One line saying how the run is incomplete, or ``None`` when it finished (e.g. for the diff's verdict)."""
    run = doc.get("run") or {}
    if run.get("complete", True):
        return None
    planned = f" of {run['planned']} planned" if run.get("planned") is not None else ""
    return (f"incomplete run: {run.get('stopped') or 'stopped early'}; {run.get('never_ran', 0)}{planned} checks "
            f"never ran ({run.get('cells_never_ran', 0)} cells)")


def banners(doc: Doc) -> list[str]:
    """Plain-text notices for the top of the Markdown and HTML reports: an incomplete run, an empty shard."""
    run = doc.get("run") or {}
    notes = []
    line = incomplete_line(doc)
    if line:
        notes.append(f"{line[0].upper()}{line[1:]}; the totals below count only the checks that finished.")
    if run.get("empty_shard"):
        where = f"shard {run['shard']}" if run.get("shard") else "this shard"
        notes.append(f"Empty shard: {where} holds no models of the matrix, so nothing ran (more shards than models).")
    return notes

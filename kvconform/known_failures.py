"""Known failures of the matrix: which failure a check is expected to show, and why (no pytest, no torch).

An entry is precise and strict: the failure message must contain ``expect`` for the cell to count
as the known failure (any other failure of the same check is a FAIL), and a cell that passes is
an XPASS that fails the run until the entry is removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from kvconform.names import close_matches

#: What an entry claims. Only ``model bug`` blames the model's code; it needs a repro (tools/repro.py).
KINDS = ("model bug", "model limitation", "not testable")
FIELDS = ("reason", "kind", "expect")
#: Optional field: a PEP 440 specifier of the transformers releases the entry applies to (e.g. "<5.24"), or several
#: joined by ``||`` for a bug that a release fixed and a later one brought back (">=5.18,<5.24 || >=5.25").
RELEASES = "transformers"
#: Joins the alternatives of a releases field (PEP 440 specifiers have no "or").
OR = "||"


@dataclass(frozen=True)
class Releases:
    """The transformers releases a label or a repro is about: the union of one or more PEP 440 specifier sets."""

    alternatives: tuple[SpecifierSet, ...]

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, (str, Version)):  # what a SpecifierSet can hold
            return False
        return any(version in specifiers for specifiers in self.alternatives)

    def __str__(self) -> str:
        return f" {OR} ".join(str(specifiers) for specifiers in self.alternatives)


def parse_releases(text: str) -> Releases:
    """``text`` (``">=5.18,<5.24 || >=5.25"``) as :class:`Releases`; raises ``InvalidSpecifier`` for a bad part."""
    parts = [part.strip() for part in text.split(OR)]
    if any(not part for part in parts):
        raise InvalidSpecifier(f"empty alternative in {text!r}")
    return Releases(tuple(SpecifierSet(part) for part in parts))


@dataclass(frozen=True)
class KnownFailure:
    """One matrix xfail entry."""

    reason: str
    """The evidence: cause, measured figures, the source line for a model bug."""
    kind: str
    """One of ``KINDS``."""
    expect: str
    """Text the failure message must contain (a diagnosis kind, an exception name …)."""

    def matches(self, message: str) -> bool:
        return self.expect in message

    @property
    def label(self) -> str:
        return f"{self.kind}: {self.reason}"


class ExpectedFailure(Exception):
    """Raised by a check whose failure is the one its known-failure entry expects (pytest counts it as xfail)."""


@cache
def installed_transformers() -> str:
    """The installed transformers version (without importing it)."""
    return metadata.version("transformers")


def parse_known_failure(raw: Any, where: str, release: str | None = None) -> KnownFailure | None:
    """The entry that applies to transformers ``release`` (default: the installed one), or ``None``.

    ``raw`` is a mapping with ``reason``, ``kind``, ``expect`` and optionally ``transformers`` (the
    releases it applies to), or a list of such mappings, of which the first that applies counts.
    ``where`` names the entry in errors; every alternative is validated, applicable or not.
    """
    alternatives = raw if isinstance(raw, list) else [raw]
    parsed = [_parse_one(entry, f"{where}[{n}]" if isinstance(raw, list) else where) for n, entry in enumerate(alternatives)]
    version = Version(release or installed_transformers())
    return next((entry for entry, releases in parsed if releases is None or version in releases), None)


def _parse_one(raw: Any, where: str) -> tuple[KnownFailure, Releases | None]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a mapping with {', '.join(FIELDS)}, got {type(raw).__name__}")
    releases = None
    if RELEASES in raw:
        try:
            releases = parse_releases(str(raw[RELEASES]))
        except InvalidSpecifier:
            raise ValueError(f"{where}.{RELEASES}: {raw[RELEASES]!r} is not a version specifier such as '<5.24' "
                             f"(alternatives joined by {OR!r})") from None
        raw = {key: value for key, value in raw.items() if key != RELEASES}
    unknown = sorted(set(raw) - set(FIELDS))
    missing = [name for name in FIELDS if name not in raw]
    if unknown or missing:
        named = [name + (f" (did you mean {' or '.join(close)}?)" if (close := close_matches(str(name), [*FIELDS, RELEASES])) else "")
                 for name in unknown]
        raise ValueError(f"{where}: " + "; ".join(
            ([f"unknown field(s) {', '.join(named)}"] if unknown else []) + ([f"missing {', '.join(missing)}"] if missing else [])
        ) + f" (an entry has {', '.join(FIELDS)}, and may name the {RELEASES} releases it applies to)")
    for name in FIELDS:
        if not isinstance(raw[name], str) or not raw[name].strip():
            raise ValueError(f"{where}.{name}: must be a non-empty string")
    if raw["kind"] not in KINDS:
        close = close_matches(raw["kind"], KINDS)
        hint = f"; did you mean {' or '.join(repr(kind) for kind in close)}?" if close else ""
        raise ValueError(f"{where}.kind: {raw['kind']!r} is not one of {', '.join(KINDS)}{hint}")
    return KnownFailure(reason=raw["reason"], kind=raw["kind"], expect=raw["expect"]), releases


def known_failure(entries: Mapping[str, KnownFailure], check: str, *tags: str) -> KnownFailure | None:
    """The entry for ``check`` on a cell with ``tags`` (its dtype, cache and attention implementation).

    A key is ``check`` or ``*``, optionally followed by ``@`` and ``-``-joined tags that must all be the
    cell's (``parity@float16``, ``parity@static``, ``generate@static-eager``; a cache kind's parts are its tags too:
    ``parity@hqq`` is both HQQ kinds). The named check wins over
    ``*``, then the key naming more tags: ``check@dtype`` before ``check`` before ``*@dtype`` before ``*``.
    """
    best: tuple[int, int, str] | None = None
    tags = (*tags, *(part for tag in tags if "-" in tag for part in tag.split("-")))  # quanto-int4: also quanto, int4
    for key in entries:
        name, _, qualifier = key.partition("@")
        wanted = qualifier.split("-") if qualifier else []
        if name in (check, "*") and all(tag in tags for tag in wanted):
            rank = (name == check, len(wanted), key)
            best = rank if best is None or rank[:2] > best[:2] else best
    return entries[best[2]] if best else None


def key_problem(key: str, checks: tuple[str, ...], tags: tuple[str, ...]) -> str | None:
    """What is wrong with an xfail key (an unknown check or tag), or ``None``."""
    name, _, qualifier = key.partition("@")
    if name != "*" and name not in checks:
        return f"unknown check {name!r}{_did_you_mean(name, checks)} (one of *, {', '.join(checks)})"
    unknown = [tag for tag in qualifier.split("-") if tag not in tags] if qualifier else []
    if unknown or (qualifier == "" and "@" in key):
        tag = unknown[0] if unknown else ""
        return (f"unknown tag {tag!r} after '@'{_did_you_mean(tag, tags)} "
                f"(dtypes, caches or attention implementations: {', '.join(tags)})")
    return None


def _did_you_mean(name: str, known: tuple[str, ...]) -> str:
    close = close_matches(name, known) if name else []
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""

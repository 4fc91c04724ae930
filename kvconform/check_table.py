"""The one table of checks: name, what it asserts, when it applies to a cell, report column order.

Plain data (no torch, no pytest): the cells, the reports and the suite read it; ``checks.run_check``
binds each name to its function and refuses to import if the two ever differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvconform.matrix import Settings


@dataclass(frozen=True)
class CheckInfo:
    """One conformance check."""

    name: str
    summary: str
    enabled_by: str | None = None
    """A matrix setting (``generate``, ``ragged``, ``prefix_reuse``) that turns the check on per model."""
    float32_only: bool = False

    def applies(self, settings: Settings, dtype: str) -> bool:
        enabled = self.enabled_by is None or bool(getattr(settings, self.enabled_by))
        return enabled and (not self.float32_only or dtype == "float32")


#: In report column order.
CHECK_TABLE: tuple[CheckInfo, ...] = (
    CheckInfo("parity", "cached next-token logits match one uncached pass at every decode step"),
    CheckInfo("growth", "the cache grows by one position per step; each layer stores what its type keeps"),
    CheckInfo("shapes", "every layer's K/V is [B, H_kv, S_layer, head_dim] with H_kv and head_dim from the config"),
    CheckInfo("bytes", "the K/V bytes equal 2 x L x H_kv x d_head x N x B x bytes (per layer)"),
    CheckInfo("generate", "generate() with and without the cache picks the same greedy tokens",
              enabled_by="generate", float32_only=True),
    CheckInfo("ragged", "a left-padded batch: each row matches its own unpadded uncached pass", enabled_by="ragged"),
    CheckInfo("prefix_reuse", "a copied prefix cache, extended and decoded, matches a fresh run", enabled_by="prefix_reuse"),
)
CHECKS: dict[str, CheckInfo] = {check.name: check for check in CHECK_TABLE}
CHECK_ORDER: tuple[str, ...] = tuple(CHECKS)
#: Checks that read an extra cache path of the probe (a record of that name).
PATH_CHECKS: tuple[str, ...] = ("ragged", "prefix_reuse")

"""Is the uncached forward a sound reference? Prefix stability, exact top-k ties, and which side of a prefill is wrong.

Run only when parity fails, before any cache is blamed: a model whose uncached logits at a
position change when later tokens follow (not causal), or whose top-k selections are decided by
exact ties (a degenerate random build), makes cached-vs-uncached differences that say nothing
about its cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kvconform.build.models import Model


@dataclass(frozen=True)
class PrefixInstability:
    """Uncached logits at ``position`` differ by ``delta`` between a pass over ``cut`` tokens and the full pass."""

    cut: int
    total: int
    position: int
    delta: float

    def describe(self) -> str:
        return (
            f"the uncached forward is not prefix-stable: logits at position {self.position} change by {self.delta:.3g} "
            f"between a pass over the first {self.cut} tokens and the pass over all {self.total}"
        )


@dataclass(frozen=True)
class TopkTies:
    """How many ``topk`` selections of the uncached pass were decided between exactly equal scores."""

    selections: int
    tied: int
    example: str

    def describe(self) -> str:
        return (
            f"{self.tied} of {self.selections} top-k selections choose between exactly equal "
            f"scores ({self.example}): which keys or experts are picked depends on tie-breaking, which torch.topk does "
            "differently for different sequence lengths (a degenerate build, or repeated tokens)"
        )


def prefix_instability(model: Model, full: torch.Tensor, reference: torch.Tensor, cuts: list[int],
                       limit: float) -> PrefixInstability | None:
    """The worst prefix whose uncached logits differ from the full pass's by more than ``limit``."""
    worst = None
    for cut in sorted({c for c in cuts if 0 < c < full.shape[1]}):
        logits = model(input_ids=full[:, :cut], use_cache=False).logits
        delta = torch.nan_to_num((logits.float() - reference[:, :cut].float()).abs(), nan=float("inf")).amax(dim=(0, 2))
        position = int(delta.argmax())
        if float(delta[position]) > limit and (worst is None or float(delta[position]) > worst.delta):
            worst = PrefixInstability(cut, full.shape[1], position, float(delta[position]))
    return worst


@dataclass(frozen=True)
class PrefillSplit:
    """The cached prefill (an empty cache: no entry read yet) already differs from the uncached pass.

    ``plain_delta`` is the same prefill into an empty config-less ``DynamicCache`` (plain layers that keep every
    token): above the limit too, the model computes differently with ``use_cache=True``; within it, what differs
    is the cell's own cache class. ``None``: a plain cache cannot run the model.
    """

    delta: float
    plain_delta: float | None
    cache_class: str
    limit: float

    @property
    def model_side(self) -> bool:
        """Whether the split does not depend on the cell's cache class (the model's ``use_cache=True`` path)."""
        return self.plain_delta is None or self.plain_delta > self.limit

    def describe(self) -> str:
        head = (f"the cached and uncached passes already disagree at the prefill (|Δ| {self.delta:.3g} > {self.limit:.3g}), "
                "before any cache entry was read, so this is not a cache-read fault")
        if self.plain_delta is None:
            return (f"{head}: the model computes differently with use_cache=True (a plain DynamicCache cannot run it to "
                    "tell the cache class apart); either side may be the broken one, the cached path or the uncached reference")
        if self.model_side:
            return (f"{head}: the model computes differently with use_cache=True (a prefill into an empty plain DynamicCache "
                    f"differs by {self.plain_delta:.3g} as well); either side may be the broken one, the cached path or the "
                    "uncached reference")
        return (f"{head}: a prefill into an empty plain DynamicCache agrees (|Δ| {self.plain_delta:.3g}), so the prefill "
                f"changes with the cell's {self.cache_class}: the K/V its layers' first update() hands to attention, or how "
                "the model reads them")


class _TieCounter(TorchFunctionMode):
    """Counts ``topk`` calls whose k-th and (k+1)-th largest finite scores are equal."""

    def __init__(self) -> None:
        super().__init__()
        self.selections = 0
        self.tied = 0
        self.example = ""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func in (torch.topk, torch.Tensor.topk):
            self._inspect(*args, **kwargs)
        return result

    def _inspect(self, scores: torch.Tensor, k: int, dim: int = -1, largest: bool = True, *_: Any, **__: Any) -> None:
        if not scores.is_floating_point() or scores.shape[dim] <= k:
            return
        ordered = torch.sort(scores.detach(), dim=dim, descending=largest).values
        kth, after = ordered.narrow(dim, k - 1, 1), ordered.narrow(dim, k, 1)
        # Masked scores (-inf, or the dtype's lowest value) may tie: masked keys are never attended.
        unmasked = kth.abs() < torch.finfo(kth.dtype).max / 2
        ties = (kth == after) & unmasked
        self.selections += 1
        if bool(ties.any()):
            self.tied += 1
            self.example = self.example or f"k={k} of {scores.shape[dim]}, {int(ties.sum())} rows tied at {float(kth[ties][0]):.3g}"


def topk_ties(run: Callable[[], Any]) -> TopkTies | None:
    """Exact ties at the selection boundary of every ``topk`` that ``run()`` makes, or ``None``."""
    counter = _TieCounter()
    with counter:
        run()
    return TopkTies(counter.selections, counter.tied, counter.example) if counter.tied else None

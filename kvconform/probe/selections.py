"""Selections decided by rounding: near-ties in top-k routers and indexers, and replaying them.

A mixture-of-experts router or a sparse indexer picks entries with ``topk``, ``max(dim)`` or
``argmax(dim)``. Where the k-th and (k+1)-th scores lie within the dtype's rounding of each other, a
one-token cached step and a many-token uncached pass (whose matmuls round differently, and differently
on every CPU kernel) may pick different experts or keys: a large logit difference that says nothing
about the cache.

``recording`` traces the selections every forward of a block makes. ``replaying`` runs the block again
and forces, token by token, the selections the uncached forwards of the recording made into every
cached forward, noting each place where the cached forward would have picked otherwise (a ``Flip``,
with its margin in rounding steps). If the replayed run then matches its reference, the selections
were the whole difference; if not, the cache is still to blame.

A selection's rows are mapped to tokens by their layout: ``[B*S, n]`` (tokens flattened row-major, as
routers do), ``[B, S, n]`` or ``[B, …, S, n]`` (indexers: queries on the second-last axis). A token's
position comes from the forward's 2-D attention mask (padding excluded), else its ``position_ids``,
else the cache's length before the forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kvconform.compat import CACHE_KEYWORDS
from kvconform.probe.cache_io import seq_length

#: A flip is decided by rounding when its margin, and the distance of the cached scores from the uncached ones
#: there, are within this many times the run's own noise: the largest distance of that selection's scores
#: between the cached and the uncached run over all its tokens, at least one rounding step of the dtype at the
#: scores' magnitude. Measured: the flips of the shrunk MoE routers in bfloat16 (AVX2 kernels) sit at 0.4-3.2 steps.
NEAR_TIE_STEPS = 8.0
#: The run's noise is plausible as rounding only up to this many rounding steps of the dtype: a selection whose
#: scores moved by more (a router or indexer reading a corrupted state) is not excused by its own spread.
#: Measured spreads: 1-6.6 steps in bfloat16 and float16 (6.6: phimoe's threshold on a difference of scores), up to 9 in float32 (a reduction over 64 products adds
#: its roundings, and one float32 step is 2^-23).
NOISE_CAP_STEPS = {torch.float32: 64.0, torch.float16: 16.0, torch.bfloat16: 16.0}

_SELECTIONS = {torch.topk: "topk", torch.Tensor.topk: "topk", torch.max: "max", torch.Tensor.max: "max",
               torch.argmax: "argmax", torch.Tensor.argmax: "argmax"}


@dataclass(frozen=True)
class Selection:
    """One selection call of a forward: which module made it, its scores and what it picked, per token.

    A threshold (``scores > t`` and the like) is a selection too: ``k`` 0, ``scores`` the signed distance to the
    threshold (positive where the comparison holds), ``indices`` the comparison's result as 0/1.
    """

    module: str
    op: str
    k: int
    scores: torch.Tensor
    """The scores compared, float32, ``[B, heads, S, n]``, larger is picked (``largest=False`` is negated)."""
    indices: torch.Tensor
    """``[B, heads, S, k]`` the picked indices (thresholds: ``[B, heads, S, n]`` 0/1)."""
    scale: torch.Tensor
    """``[B, heads, S]`` the magnitude of the values each token compares, which sets their rounding."""

    @property
    def key(self) -> tuple[str, str]:
        return self.module, self.op


@dataclass
class _Forward:
    """What a traced forward is: its batch and token count, each token's position, and whether it is cached."""

    batch: int
    length: int
    positions: torch.Tensor
    """``[B, S]``; below 0 for padding."""
    cached: bool
    calls: dict[tuple[str, str, int], Selection] = field(default_factory=dict)
    """By (module, op, how many such calls that module made before in this forward)."""

    def add(self, selection: Selection) -> tuple[str, str, int]:
        ordinal = sum(1 for key in self.calls if key[:2] == selection.key)
        key = (*selection.key, ordinal)
        self.calls[key] = selection
        return key


@dataclass(frozen=True)
class Flip:
    """A token where the cached forward, fed the same history, would pick differently from the uncached pass."""

    module: str
    op: str
    k: int
    candidates: int
    position: int
    row: int
    margin: float
    """The uncached pass's margin there: its k-th minus its (k+1)-th score, or a threshold's distance."""
    score_delta: float
    """How far the cached forward's scores of that token are from the uncached pass's (max |Δ|)."""
    rounding: float
    """One rounding step of the dtype at the magnitude of the scores compared."""
    noise: float = 0.0
    """The run's own noise for this selection (see ``NEAR_TIE_STEPS``), at least ``rounding``."""
    noise_cap: float = NEAR_TIE_STEPS
    """``NOISE_CAP_STEPS`` of the dtype."""
    key: tuple[str, str, int] = ("", "", 0)
    """The selection call: module, op, and how many such calls came before it in its forward."""

    @property
    def by_rounding(self) -> bool:
        """Margin and score distance within ``NEAR_TIE_STEPS`` × the run's noise, and that noise plausible as
        rounding: a near-tie, not a fault."""
        noise = max(self.noise, self.rounding)
        return noise <= self.noise_cap * self.rounding and max(self.margin, self.score_delta) <= NEAR_TIE_STEPS * noise

    def describe(self) -> str:
        call = {"topk": f"topk(k={self.k})", "threshold": "threshold comparison"}.get(self.op, self.op)
        return (f"{self.module or 'the model'} {call} over {self.candidates} at position {self.position} of row {self.row}: "
                f"margin {self.margin:.3g}, the cached scores {self.score_delta:.3g} away "
                f"({max(self.margin, self.score_delta) / self.rounding:.2g} rounding steps; the run's noise "
                f"{max(self.noise, self.rounding) / self.rounding:.2g})")


@dataclass
class SelectionReplay:
    """A failing run made again with the uncached passes' selections forced into its cached forwards."""

    selections: int
    """Selection calls of the recorded uncached forwards."""
    near_ties: int
    """Tokens of those calls whose margin is within ``NEAR_TIE_STEPS`` rounding steps."""
    flips: list[Flip] = field(default_factory=list)
    step_max_abs_delta: list[float] = field(default_factory=list)
    """Per decode step max |Δlogit| of the replayed run against its reference."""
    error: str | None = None
    """Why the replay could not be made (then nothing is concluded from it)."""

    def agrees(self, limit: float) -> bool:
        """The replayed run matches its reference and every flip is a near-tie: rounding is the whole difference.

        A flip whose margin or score distance is beyond the rounding (a stale indexer-key cache, say) is a real
        change of the cached scores, so no replay can excuse it.
        """
        return (self.error is None and bool(self.flips) and all(flip.by_rounding for flip in self.flips)
                and max(self.step_max_abs_delta, default=float("inf")) <= limit)

    def describe(self, limit: float) -> str:
        if self.error is not None:
            return f"the uncached selections could not be replayed ({self.error})"
        worst = max(self.step_max_abs_delta, default=0.0)
        shown = "; ".join(flip.describe() for flip in self.flips[:2])
        more = f" (+{len(self.flips) - 2} more)" if len(self.flips) > 2 else ""
        beyond = sum(not flip.by_rounding for flip in self.flips)
        flips = (f"{len(self.flips)} selection(s) flip between the cached and the uncached pass"
                 f"{f' ({beyond} beyond {NEAR_TIE_STEPS:g} rounding steps)' if beyond else ''}: {shown}{more}") if self.flips \
            else "no selection flips between the cached and the uncached pass"
        return (f"{flips}; {self.near_ties} of the uncached selections are near-ties (≤ {NEAR_TIE_STEPS:g} rounding steps); "
                f"with the uncached selections replayed, max |Δlogit| {worst:.3g} {'≤' if worst <= limit else '>'} limit {limit:.3g}")


class ReplayError(RuntimeError):
    """The uncached selections cannot be matched to the cached forward's."""


def rounding_step(scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One rounding step of ``dtype`` at magnitude ``scale``."""
    return (scale * torch.finfo(dtype).eps).clamp(min=torch.finfo(dtype).tiny)


def margins(selection: Selection) -> torch.Tensor:
    """``[B, heads, S]`` the k-th minus the (k+1)-th largest score per token (``inf`` where nothing finite is
    left out); thresholds: ``[B, heads, S, n]`` each comparison's distance to its threshold."""
    scores, k = selection.scores, selection.k
    if k == 0:
        return torch.nan_to_num(scores.abs(), nan=float("inf"))
    if scores.shape[-1] <= k:
        return torch.full(scores.shape[:-1], float("inf"))
    top = scores.topk(k + 1, dim=-1).values
    gap = top[..., k - 1] - top[..., k]
    return torch.where(torch.isfinite(top[..., k]), gap, torch.full_like(gap, float("inf")))


def rounding_steps(selection: Selection, dtype: torch.dtype) -> torch.Tensor:
    """``[B, heads, S]`` how many rounding steps of ``dtype`` each token's selection is from going otherwise."""
    gaps = margins(selection)
    return (gaps.amin(-1) if selection.k == 0 else gaps) / rounding_step(selection.scale, dtype)


def _magnitude(values: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0).abs().amax(-1)


def near_ties(calls: list[Selection], dtype: torch.dtype) -> int:
    """Tokens of ``calls`` whose selection is within ``NEAR_TIE_STEPS`` rounding steps of ``dtype`` of going otherwise."""
    return sum(int((rounding_steps(c, dtype) <= NEAR_TIE_STEPS).sum()) for c in calls)


def by_token(tensor: torch.Tensor, batch: int, length: int) -> torch.Tensor | None:
    """A selection's ``[*rows, n]`` tensor as ``[B, heads, S, n]`` for ``batch`` × ``length`` tokens, or ``None``."""
    rows = tuple(tensor.shape[:-1])
    if len(rows) == 1 and rows[0] == batch * length:
        return tensor.reshape(batch, 1, length, tensor.shape[-1])
    if len(rows) >= 2 and rows[0] == batch and rows[-1] == length:
        return tensor.reshape(batch, -1, length, tensor.shape[-1])
    return None


_THRESHOLDS = {torch.gt: 1, torch.Tensor.gt: 1, torch.Tensor.__gt__: 1, torch.ge: 1, torch.Tensor.ge: 1,
               torch.Tensor.__ge__: 1, torch.lt: -1, torch.Tensor.lt: -1, torch.Tensor.__lt__: -1, torch.le: -1,
               torch.Tensor.le: -1, torch.Tensor.__le__: -1}
"""Comparisons, by the sign that makes ``lhs - rhs`` positive where they hold."""


def _selection_args(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor, int, int, bool] | None:
    """``(scores, k, dim, largest)`` of a selection call, or ``None`` for a call that selects nothing per row."""
    scores = args[0] if args else kwargs.get("input")
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point() or scores.dim() == 0:
        return None
    rest = list(args[1:])
    if op == "topk":
        k = rest.pop(0) if rest else kwargs.get("k")
        dim = rest.pop(0) if rest else kwargs.get("dim", -1)
        largest = rest.pop(0) if rest else kwargs.get("largest", True)
        return (scores, k, int(dim), bool(largest)) if isinstance(k, int) else None
    dim = rest[0] if rest else kwargs.get("dim")
    return (scores, 1, dim, True) if isinstance(dim, int) else None


def _threshold_args(sign: int, args: tuple[Any, ...], result: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(signed distance, magnitude)`` of a float comparison, both shaped like its result, or ``None``."""
    if len(args) < 2 or not isinstance(result, torch.Tensor) or result.dim() == 0:
        return None
    lhs, rhs = args[0], args[1]
    if not (isinstance(lhs, torch.Tensor) and lhs.is_floating_point() and lhs.shape == result.shape):
        return None
    if not (isinstance(rhs, (int, float)) or (isinstance(rhs, torch.Tensor) and rhs.is_floating_point())):
        return None
    lhs_f = lhs.detach().float()
    rhs_f = rhs.detach().float() if isinstance(rhs, torch.Tensor) else torch.tensor(float(rhs))
    distance = sign * (lhs_f - rhs_f)
    magnitude = torch.maximum(lhs_f.abs(), rhs_f.abs().expand_as(lhs_f))
    return distance, magnitude


def _positions(inputs: dict[str, Any], batch: int, length: int) -> torch.Tensor:
    """Each token's position in its row's own sequence (below 0 for padding)."""
    mask = inputs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2:
        positions = mask.long().cumsum(-1) - 1
        return torch.where(mask.bool(), positions, torch.full_like(positions, -1))[:, -length:].cpu()
    ids = inputs.get("position_ids")
    if isinstance(ids, torch.Tensor) and ids.dim() == 2:
        return ids.expand(batch, length).long().cpu()
    cache = next((inputs[k] for k in CACHE_KEYWORDS if inputs.get(k) is not None), None)
    start = (seq_length(cache) or 0) if cache is not None else 0
    return (torch.arange(length) + start).expand(batch, length)


class _Tracer(TorchFunctionMode):
    """Records every selection of the traced forwards; given references, forces theirs into cached forwards."""

    def __init__(self, references: list[_Forward] | None, dtype: torch.dtype) -> None:
        super().__init__()
        self.references = [f for f in references if not f.cached] if references is not None else None
        self.dtype = dtype
        self.forwards: list[_Forward] = []
        self.flips: list[Flip] = []
        self.modules: list[str] = []
        self.spread: dict[tuple[str, str, int], list[float]] = {}

    def begin(self, inputs: dict[str, Any]) -> None:
        ids = inputs.get("input_ids")
        if not isinstance(ids, torch.Tensor):
            raise ReplayError("a forward without input_ids cannot be mapped to tokens")
        batch, length = ids.shape[0], ids.shape[1]
        cached = bool(inputs.get("use_cache", True))
        self.forwards.append(_Forward(batch, length, _positions(inputs, batch, length), cached))

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if not self.forwards or not self.modules:  # only selections inside the model's forwards
            return result
        op = _SELECTIONS.get(func)
        if op is not None:
            parsed = _selection_args(op, args, kwargs)
            return result if parsed is None else self._selection(op, parsed, result, args, kwargs)
        sign = _THRESHOLDS.get(func)
        if sign is not None:
            parsed_threshold = _threshold_args(sign, args, result)
            return result if parsed_threshold is None else self._threshold(parsed_threshold, result)
        return result

    def _selection(self, op: str, parsed: tuple[torch.Tensor, int, int, bool], result: Any, args: Any, kwargs: Any) -> Any:
        scores, k, dim, largest = parsed
        dim = dim % scores.dim()
        moved = scores.detach().movedim(dim, -1).float()
        picked = result[1] if op in ("topk", "max") else result
        picked = picked.detach().movedim(dim, -1) if picked.dim() == scores.dim() else picked.detach().unsqueeze(-1)
        forward = self.forwards[-1]
        token_scores = by_token(moved if largest else -moved, forward.batch, forward.length)
        token_picked = by_token(picked, forward.batch, forward.length)
        if token_scores is None or token_picked is None:
            return result
        selection = Selection(self.modules[-1], op, k, token_scores, token_picked.clone(), _magnitude(token_scores))
        forced = self._forced(forward.add(selection), selection, forward)
        return result if forced is None else _with_indices(op, result, scores, dim, forced.reshape(picked.shape), kwargs, args)

    def _threshold(self, parsed: tuple[torch.Tensor, torch.Tensor], result: torch.Tensor) -> Any:
        distance, magnitude = parsed
        forward = self.forwards[-1]
        token_distance = by_token(distance if distance.dim() > 1 else distance[:, None], forward.batch, forward.length)
        token_holds = by_token(result if result.dim() > 1 else result[:, None], forward.batch, forward.length)
        token_magnitude = by_token(magnitude if magnitude.dim() > 1 else magnitude[:, None], forward.batch, forward.length)
        if token_distance is None or token_holds is None or token_magnitude is None:
            return result
        selection = Selection(self.modules[-1], "threshold", 0, token_distance, token_holds.long(), token_magnitude.amax(-1))
        forced = self._forced(forward.add(selection), selection, forward)
        return result if forced is None else forced.bool().reshape(result.shape)

    def _forced(self, key: tuple[str, str, int], cached: Selection, forward: _Forward) -> torch.Tensor | None:
        """What a cached forward's selection ``key`` must pick: the uncached references' at each token, or ``None``
        (nothing to force: recording, an uncached forward, or no counterpart of the same layout)."""
        if self.references is None or not forward.cached:
            return None
        forced = cached.indices.clone()
        for row in range(forward.batch):
            ref, ref_row = _reference_for(self.references, row, forward.batch)
            call = ref.calls.get(key)
            if call is None or call.indices.shape[1] != forced.shape[1] or call.indices.shape[-1] != forced.shape[-1]:
                return None
            for s, position in enumerate(forward.positions[row].tolist()):
                if position < 0:
                    continue
                if position >= call.indices.shape[2]:
                    raise ReplayError(f"position {position} is beyond the uncached pass's {call.indices.shape[2]} tokens")
                picked = call.indices[ref_row, :, position]
                if cached.k and int(picked.max()) >= cached.scores.shape[-1]:
                    raise ReplayError(f"{cached.module} picks index {int(picked.max())} of {cached.scores.shape[-1]}")
                own = forced[row, :, s]
                distance = (cached.scores[row, :, s] - call.scores[ref_row, :, position]).abs()
                self.spread.setdefault(key, []).append(float(torch.nan_to_num(distance, nan=0.0, posinf=0.0).max()))
                same = torch.equal(own.sort(-1).values, picked.sort(-1).values) if cached.k else torch.equal(own, picked)
                if not same:
                    self.flips.append(self._flip(call, ref_row, position, cached.scores[row, :, s], row, own != picked, key))
                forced[row, :, s] = picked
        return forced

    def finish(self) -> None:
        """Give every flip its selection's noise, known once the run is over."""
        for index, flip in enumerate(self.flips):
            spread = max(self.spread.get(flip.key, [0.0]))
            self.flips[index] = replace(flip, noise=spread, noise_cap=NOISE_CAP_STEPS.get(self.dtype, NEAR_TIE_STEPS))

    def _flip(self, ref: Selection, ref_row: int, position: int, cached_scores: torch.Tensor, row: int,
              differ: torch.Tensor, key: tuple[str, str, int]) -> Flip:
        """A changed token, at the head (and for a threshold the comparison) farthest from a tie."""
        scores, scale = ref.scores[ref_row, :, position], ref.scale[ref_row, :, position]
        token = Selection(ref.module, ref.op, ref.k, scores[None, :, None], ref.indices[ref_row, :, position][None, :, None],
                          scale[None, :, None])
        gaps = margins(token)[0, :, 0]
        if ref.k == 0:  # [heads, n]: only the comparisons that came out otherwise
            head, element = divmod(int(torch.where(differ, gaps, torch.full_like(gaps, -1.0)).argmax()), gaps.shape[-1])
            margin = float(gaps[head, element])
        else:
            head = int(torch.where(differ.any(-1), gaps, torch.full_like(gaps, -1.0)).argmax())
            margin = float(gaps[head])
        delta = float(torch.nan_to_num((cached_scores[head] - scores[head]).abs(), nan=0.0, posinf=0.0).max())
        rounding = float(rounding_step(scale[head], self.dtype))
        return Flip(ref.module, ref.op, ref.k, scores.shape[-1], position, row, margin, delta, rounding, key=key)


def _reference_for(references: list[_Forward], row: int, batch: int) -> tuple[_Forward, int]:
    """The uncached forward and row a cached forward's ``row`` continues: one pass of the whole batch, or one per row."""
    if len(references) == 1 and references[0].batch == batch:
        return references[0], row
    if len(references) == batch and all(r.batch == 1 for r in references):
        return references[row], 0
    raise ReplayError(f"{len(references)} uncached forwards cannot be matched to a batch of {batch}")


def _with_indices(op: str, result: Any, scores: torch.Tensor, dim: int, forced: torch.Tensor,
                  kwargs: dict[str, Any], args: tuple[Any, ...]) -> Any:
    """``result`` of the selection call with ``forced`` ``[*rows, k]`` indices, the values gathered to match."""
    values = scores.movedim(dim, -1).gather(-1, forced).movedim(-1, dim)
    indices = forced.movedim(-1, dim)
    if op != "topk":
        keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
        if not keepdim:
            values, indices = values.squeeze(dim), indices.squeeze(dim)
        if op == "argmax":
            return indices
    return type(result)((values, indices)) if hasattr(result, "_fields") else (values, indices)


@contextmanager
def _traced(model: torch.nn.Module, tracer: _Tracer) -> Iterator[_Tracer]:
    """Trace ``model``'s forwards: the top-level call starts a forward, every module names its selections."""
    def enter(name: str) -> Callable[..., None]:
        return lambda *_: tracer.modules.append(name)

    def leave(*_: Any) -> None:  # a forward hook's return value would replace the module's output
        if tracer.modules:
            tracer.modules.pop()

    handles = [model.register_forward_pre_hook(lambda _m, _a, kwargs: tracer.begin(kwargs), with_kwargs=True)]
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(enter(name)))
        handles.append(module.register_forward_hook(leave))
    try:
        with tracer:
            yield tracer
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def recording(model: torch.nn.Module) -> Iterator[list[_Forward]]:
    """Record the selections of every forward inside the block (cached and uncached)."""
    with _traced(model, _Tracer(None, torch.float32)) as tracer:
        yield tracer.forwards


@contextmanager
def replaying(model: torch.nn.Module, recorded: list[_Forward], dtype: torch.dtype) -> Iterator[list[Flip]]:
    """Run the block again with the uncached forwards' selections of ``recorded`` forced into its cached forwards."""
    with _traced(model, _Tracer(recorded, dtype)) as tracer:
        yield tracer.flips
        tracer.finish()


def uncached_selections(recorded: list[_Forward]) -> list[Selection]:
    """Every selection the uncached forwards of a recording made."""
    return [call for forward in recorded if not forward.cached for call in forward.calls.values()]


def replay_selections(model: torch.nn.Module, dtype: torch.dtype, run: Callable[[], list[float]],
                      references: Callable[[], object]) -> SelectionReplay | None:
    """Record the selections of the uncached forwards ``references()`` makes, then ``run()`` the cached run (which
    returns its per-step max |Δlogit|) with them forced in; ``None`` where the uncached forwards select nothing."""
    with recording(model) as recorded:
        references()
    selections = uncached_selections(recorded)
    if not selections:
        return None
    replay = SelectionReplay(len(selections), near_ties(selections, dtype))
    try:
        with replaying(model, recorded, dtype) as flips:
            replay.step_max_abs_delta = run()
        replay.flips = flips
    except Exception as exc:  # noqa: BLE001 - a replay that cannot be made concludes nothing, it fails nothing
        replay.error = f"{type(exc).__name__}: {exc}"[:300]
    return replay

"""Codebook models with a depth decoder (CSM): two caches per generated frame.

CSM's backbone reads the text prompt, then one embedding per audio frame (the sum of its K codebooks' embeddings), and
predicts codebook 0 of the next frame; its depth decoder then decodes codebooks 1..K-1 of that frame from the
backbone's last hidden state, with a cache of its own started empty every frame (generation_csm.py:266-281). The cell
drives both as ``generate()`` does:

- the backbone: the text prompt as 2-D ``input_ids`` (the forward embeds it as its processor's text-only prompt), then
  every decode step one frame ``[B, 1, K]``, against ONE uncached pass over the text and every frame's embedding;
- the depth decoder, every frame: ``[0, c0]`` with the backbone's hidden state, then one codebook at a time through its
  cache, against ONE uncached depth pass over ``[0, c0, …, c(K-2)]`` with the same hidden state. Its codebook heads are
  chosen by position (``CsmCodebooksHead``, ``codebook_indices`` from the cache length), so a cache that miscounts
  positions reads another codebook's head.

Rows of the per-head deltas are ``b * K + k`` as for the other codebook decoders: head 0 the backbone's, head ``k``
the depth decoder's for codebook ``k`` of the frame chosen at that step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword, feed_cache_position
from kvconform.families.codebook import GenerateRun, run_generate
from kvconform.families.decode import Driver, FamilyRun, drive
from kvconform.families.inputs import special_token_ids, text_ids
from kvconform.probe.cache_io import cache_layers, new_cache, seq_length
from kvconform.probe.decode import ProbePlan
from kvconform.probe.forwards import Forwards, fed_back

#: Text tokens of the prompt.
TEXT_TOKENS = 5


@dataclass
class DepthTrace:
    """What the depth decoder's own cache held, frame by frame, and the geometry its config gives."""

    layers: int
    kv_heads: int
    head_dim: int
    frames: list[list[tuple[int | None, list[list[int] | None]]]] = field(default_factory=list)
    """Per frame, per depth call: (the cache's seq length, each layer's keys shape)."""
    owner: str = "backbone"
    """The model whose head is codebook 0 (CSM's backbone, Qwen3-Omni's talker)."""
    name: str = "depth decoder"
    """The model whose heads are codebooks 1..K-1."""

    def problem(self, batch: int) -> str | None:
        """The first frame and call whose cache is not one position per codebook fed, in the config's geometry."""
        for frame, calls in enumerate(self.frames):
            for call, (length, shapes) in enumerate(calls):
                want = call + 2  # the prefill feeds the frame's start and c0; every later call one codebook
                if length != want:
                    return (f"{self.name} cache of frame {frame} holds {length} positions after call {call}, expected "
                            f"{want} (empty at every frame, then the frame's start and c0, and one codebook a call)")
                expected = [batch, self.kv_heads, want, self.head_dim]
                if len(shapes) != self.layers:
                    return f"{self.name} cache of frame {frame} has {len(shapes)} layers, its config {self.layers}"
                for index, shape in enumerate(shapes):
                    if shape != expected:
                        return (f"{self.name} cache of frame {frame}, layer {index}: keys {shape} after call {call}, "
                                f"expected {expected} (its config's heads and head size)")
        return None


@dataclass
class DepthRun:
    """The backbone's decode run with its rows widened to every codebook head, the depth decoder's trace, and what
    ``generate()`` did."""

    run: FamilyRun
    codebooks: int
    trace: DepthTrace
    recipe: str
    generate: GenerateRun


def is_depth_codebook_model(model: Model) -> bool:
    """Whether ``model`` decodes a frame's codebooks with a depth decoder of its own (CSM)."""
    return hasattr(model, "depth_decoder") and hasattr(model, "backbone_model")


@dataclass
class DepthCalls:
    """How one frame runs through a depth decoder with a cache of its own, as the model's ``generate()`` runs it."""

    start: Callable[[torch.Tensor], tuple[Any, torch.Tensor]]
    """``c0 [B, 1] -> (a fresh cache, logits [B, V] of codebook 1)``: the prefill over the frame's start and c0."""
    step: Callable[[torch.Tensor, int, Any], tuple[Any, torch.Tensor]]
    """``(codebook k's ids [B, 1], k, cache) -> (cache, logits [B, V] of codebook k + 1)``: one cached call."""
    reference: Callable[[torch.Tensor], torch.Tensor]
    """``frame [B, K] -> logits [B, K - 1, V]``: ONE uncached pass over the frame's start and c0..c(K-2), each position
    through the head its cached call used."""


def cache_seen(cache: Any) -> tuple[int | None, list[list[int] | None]]:
    """The cache's seq length and each layer's keys shape."""
    shapes = [list(layer.keys.shape) if isinstance(getattr(layer, "keys", None), torch.Tensor) else None
              for layer in cache_layers(cache)]
    return seq_length(cache), shapes


class DepthFrames:
    """The frames a cached decode chose, each ``[B, K]``, their depth decoder's per-head deltas and its cache trace."""

    def __init__(self, trace: DepthTrace, codebooks: int) -> None:
        self.trace, self.codebooks = trace, codebooks
        self.codes: list[torch.Tensor] = []
        self.head_deltas: list[torch.Tensor] = []
        """Per frame ``[B, K - 1]``: each depth head's max |Δlogit| against the uncached depth pass."""

    def decode(self, first: torch.Tensor, calls: DepthCalls) -> torch.Tensor:
        """Codebooks 1..K-1 of the frame whose codebook 0 is ``first`` ``[B, 1]``, greedily through the depth decoder's
        cache (the last one fed to no call); records each head's distance from one uncached depth pass."""
        cache, logits = calls.start(first)
        seen, outputs, codes = [cache_seen(cache)], [logits], [first]
        while True:
            token = outputs[-1].float().argmax(-1, keepdim=True)
            codes.append(token)
            if len(codes) == self.codebooks:
                break
            cache, logits = calls.step(token, len(codes) - 1, cache)
            outputs.append(logits)
            seen.append(cache_seen(cache))
        frame = torch.cat(codes, dim=1)
        reference = calls.reference(frame)
        cached = torch.stack(outputs, dim=1)
        self.head_deltas.append((cached.float() - reference.float()).abs().nan_to_num(nan=float("inf")).amax(-1))
        self.trace.frames.append(seen)
        self.codes.append(frame)
        return frame

    def chosen(self, ids: torch.Tensor, first: int) -> torch.Tensor:
        """The frames ``[rows, n, K]`` the cached decode chose at frame indices ``first`` … ``first + n - 1`` whose
        codebook 0 are ``ids`` ``[rows, n]``; rows fed in another order (a reordered cache's decode) get theirs."""
        if ids.shape[1] == 0:
            return ids.new_zeros((ids.shape[0], 0, self.codebooks))
        where = f"frames {first}..{first + ids.shape[1] - 1}, where the cache's get_seq_length() puts the ids"
        if first < 0 or first + ids.shape[1] > len(self.codes):
            raise RuntimeError(f"{where}, were not decoded (the decode chose {len(self.codes)})")
        frames = torch.stack(self.codes[first:first + ids.shape[1]], dim=1)
        if torch.equal(frames[..., 0], ids):
            return frames
        rows = [next((b for b in range(frames.shape[0]) if torch.equal(frames[b, :, 0], row)), None) for row in ids]
        if None in rows:
            raise RuntimeError(f"the ids are not the codebook 0 of {where}, that the cached decode chose")
        return frames[torch.tensor(rows, device=frames.device)]

    def rows(self, run: FamilyRun) -> list[list[float]]:
        """The run's rows widened to every head: per step, row ``b * K + k`` (head 0 the run's, heads 1..K-1 the frame's
        depth heads; step ``t``'s frame is the one its logits chose)."""
        return [[delta for b, first in enumerate(owner) for delta in (first, *heads[b].tolist())]
                for owner, heads in zip(run.row_deltas, self.head_deltas, strict=True)]


class _Frames(DepthFrames):
    """CSM's frames by position after the text; its depth decoder's calls (generation_csm.py:266-281)."""

    def __init__(self, model: Model, text_length: int) -> None:
        feed_cache_position(model.depth_decoder)  # 5.0-5.4 pick its heads by the cache_position generate() passed
        config = model.config.depth_decoder_config
        super().__init__(DepthTrace(int(config.num_hidden_layers), int(config.num_key_value_heads), int(config.head_dim)),
                         int(model.config.num_codebooks))
        self.model, self.text_length = model, text_length
        self.hidden: torch.Tensor | None = None

    def decode_from(self, first: torch.Tensor) -> torch.Tensor:
        """The frame whose codebook 0 is ``first``, from the backbone's last hidden state: ``[0, c0]`` with it, then one
        codebook a call; its heads chosen by position (``CsmCodebooksHead``)."""
        from transformers import DynamicCache

        hidden = self.hidden
        if hidden is None:
            raise RuntimeError("the backbone has not run: no hidden state to start a frame from")
        depth = self.model.depth_decoder
        keyword = cache_keyword(depth)

        def start(first: torch.Tensor) -> tuple[Any, torch.Tensor]:
            cache = DynamicCache(config=depth.config)
            output = depth(input_ids=torch.cat([torch.zeros_like(first), first], dim=1), backbone_last_hidden_state=hidden,
                           use_cache=True, logits_to_keep=1, **{keyword: cache})
            return fed_back(output, cache)[0], output.logits[:, -1]

        def step(token: torch.Tensor, k: int, cache: Any) -> tuple[Any, torch.Tensor]:
            output = depth(input_ids=token, use_cache=True, logits_to_keep=1, **{keyword: cache})
            return fed_back(output, cache)[0], output.logits[:, -1]

        def reference(frame: torch.Tensor) -> torch.Tensor:
            ids = torch.cat([torch.zeros_like(frame[:, :1]), frame[:, :-1]], dim=1)
            return depth(input_ids=ids, backbone_last_hidden_state=hidden, use_cache=False).logits

        return self.decode(first, DepthCalls(start, step, reference))

    def embeds(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Embeddings of ``ids`` from position ``start`` on: the text's, then each chosen frame's."""
        split = max(0, min(ids.shape[1], self.text_length - start))
        parts = [self.model.embed_text_tokens(ids[:, :split])] if split else []
        if split < ids.shape[1]:
            frames = self.chosen(ids[:, split:], max(0, start - self.text_length))
            parts.append(self.model.backbone_model.embed_tokens(frames))
        return torch.cat(parts, dim=1)


def _driver(model: Model, text: torch.Tensor, frames: _Frames) -> Driver:
    keyword = cache_keyword(model)

    def backbone(cache: Any, decoding: bool, **inputs: Any) -> tuple[Any, Any]:
        output = model(use_cache=True, output_hidden_states=True, **inputs, **({keyword: cache} if cache is not None else {}))
        if decoding:  # the decode's own calls start the next frame; a fresh pass (the localization) does not
            frames.hidden = output.hidden_states[-1][:, -1]
        return fed_back(output, cache)

    def start(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        if ids.shape[1] == frames.text_length:
            return backbone(cache, True, input_ids=ids)  # the text prompt as its processor gives it
        return backbone(cache, False, inputs_embeds=frames.embeds(ids))

    def more(ids: torch.Tensor, cache: Any, keep: int | None) -> tuple[Any, Any]:
        seen = seq_length(cache) or 0
        if ids.shape[1] == 1 and seen - frames.text_length == len(frames.codes):  # the decode: a new frame
            return backbone(cache, True, input_ids=frames.decode_from(ids)[:, None, :])
        return backbone(cache, False, inputs_embeds=frames.embeds(ids, seen))  # a path: positions already decoded

    def reference(ids: torch.Tensor, keep: int | None) -> Any:
        return model(inputs_embeds=frames.embeds(ids), use_cache=False)

    forwards = Forwards(model=model, prompt=text, start=start, more=more, reference=reference,
                        make_cache=lambda kind, length: new_cache(model, kind, length), default_cache=lambda: None,
                        row_inputs=True)
    return Driver(forwards)


def probe_depth_codebooks(model: Model, plan: ProbePlan) -> DepthRun:
    """Prefill the text, decode ``plan.decode_steps`` frames through both caches, compare with uncached passes."""
    device = next(p.device for p in model.parameters())
    config = model.config
    codebooks = int(config.num_codebooks)
    text = text_ids(plan.batch_size, TEXT_TOKENS, plan.seed + 2, int(config.text_vocab_size), special_token_ids(config)).to(device)
    frames = _Frames(model, TEXT_TOKENS)
    run = drive(model, replace(plan, prompt_length=TEXT_TOKENS), _driver(model, text, frames))
    last = torch.tensor(run.record.steps[-1].cached_argmax, device=device).reshape(-1, 1)
    with torch.inference_mode():  # the frame the last step's logits choose (the decode stops before it): every step has all its heads
        frames.decode_from(last)
    rows = frames.rows(run)
    recipe = (f"text input_ids [B, {TEXT_TOKENS}], then frames [B, 1, {codebooks}]: codebook 0 from the backbone, "
              f"codebooks 1..{codebooks - 1} from the depth decoder's own cache, empty every frame (generation_csm.py)")
    start = time.perf_counter()
    generated = run_generate(model, text, plan.decode_steps, cache=plan.cache, again=plan.calls)
    run.record.timings["generate_s"] = time.perf_counter() - start
    return DepthRun(replace(run, row_deltas=rows), codebooks, frames.trace, recipe, generated)

"""Assisted decoding end to end: ``generate(assistant_model=...)`` and ``generate(prompt_lookup_num_tokens=k)``
against plain greedy ``generate()`` with the cell's cache.

Assisted decoding drafts a few tokens, verifies them in one multi-token forward of the main model over its
cache, and rolls the rejected drafts back with ``cache.crop(-rejected)`` (generation/utils.py,
``_assisted_decoding``). Three drafters run, each with a constant draft length of ``DRAFT_TOKENS``:

- ``self``: the model drafts for itself (every draft is accepted; the last burst is capped at ``max_length``);
- ``random``: a second, smaller random build of the same architecture and vocabulary: at most ``ASSISTANT_LAYERS``
  layers and always fewer than the model where its stack is uniform (drafts are mostly rejected, so the cache is
  cropped at many lengths);
- ``prompt_lookup``: n-gram drafts from the prompt (built as a repetition, so drafts are proposed at once).

Every run must return greedy's tokens, and its per-token logits (``output_logits``) must match ONE uncached pass
over the prompt and greedy's tokens within the parity limit up to where the tokens part, so a difference is
located at a generated token, the main-model forward that produced it and the crop before it. Where the model
has sliding-window or chunked layers (windows up to ``MAX_CROSSED_WINDOW``), the prompt is shorter than the
smallest window and the run long enough that draft bursts cross the largest one. Batch size 1 (assisted
decoding refuses more).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from kvconform.build.geometry import cache_geometry, config_layer_types
from kvconform.build.models import Model
from kvconform.build.support import crop_support
from kvconform.compat import CACHE_KEYWORDS
from kvconform.matrix import ASSISTED_DRAFTERS
from kvconform.probe.assistant_kv import assistant_kv, inferred_padding
from kvconform.probe.cache_io import (
    cache_implementation,
    fixed_length_config,
    input_device,
    make_prompt,
    returned_cache,
    seq_length,
)
from kvconform.probe.generation import GREEDY_OR_SAMPLING_ONLY
from kvconform.probe.kv_compare import KVParity
from kvconform.probe.selections import ReplayError, SelectionReplay, replay_selections
from kvconform.probe.variants import row_delta
from kvconform.probe.window import windows_of

#: Draft tokens per burst (constant schedule), for the assistants and for prompt lookup.
DRAFT_TOKENS = 3
#: Most layers of the ``random`` assistant where the model is one stack of layers of one kind: 2 of SmolLM2's 30, 1 of
#: a shrunk sweep build's 2 (always fewer than the model, a smaller build); hybrid or KV-sharing stacks tie their
#: layers together, so those keep their layer count.
ASSISTANT_LAYERS = 2
#: Windows larger than this are not crossed (the run would be that long); the main prompt is used then.
MAX_CROSSED_WINDOW = 64
#: What generate() raises where the built cache cannot be rolled back (generation/utils.py, _assisted_decoding).
NOT_CROPPABLE = "Assisted decoding requires a cache that can be cropped"
#: A model's own generate() that does greedy search and sampling only (musicgen_melody: it takes no assistant_model
#: argument, so generate()'s model_kwargs validation names it; prompt lookup is refused as a generation mode).
#: Up to 5.14 a sliding-window layer that rolled past its window refuses the crop assisted decoding asks for, in these
#: words (cache_utils.py, ``DynamicSlidingWindowLayer.crop``); from 5.15 on it can be cropped.
ROLLED_WINDOW = "Cannot `crop` a `DynamicSlidingWindowLayer` after it has seen more tokens than its"
#: Up to 5.13 assisted decoding runs on the cache MiniMax builds itself (no generate() cache is needed before 5.14:
#: ``assisted_needs_generate_cache``), whose crop refuses in these words (modeling_minimax.py:110-111 in 5.0.0, :111-112 in
#: 5.13.1); 5.14 refuses earlier, for want of a cache generate() prepared.
OWN_CACHE_NOT_CROPPABLE = "MiniMaxCache doesnot support `crop` method"
REFUSALS = (NOT_CROPPABLE, "are not used by the model: ['assistant_model']", GREEDY_OR_SAMPLING_ONLY, ROLLED_WINDOW,
            OWN_CACHE_NOT_CROPPABLE)
DRAFTERS = ASSISTED_DRAFTERS
#: Cells of another attention run the drafter that crops most: each of its bursts is verified in one multi-token
#: forward and mostly rolled back (measured cost: docs/cache-paths.md).
OTHER_ATTENTION_DRAFTERS = ("random",)
#: Why a cell of another attention skips the path on a model without windowed layers.
NO_WINDOW = ("the model has no sliding-window or chunked-attention layers, so under another attention assisted decoding "
             "takes the masks the model's own attention cell runs (pruned: docs/cache-paths.md)")
#: The same where no window is crossed: every window is longer than the runs the path makes (a real checkpoint's 512).
WINDOW_NOT_CROSSED = ("its windows {windows} are longer than the {limit} tokens the path crosses, so under another attention "
                      "assisted decoding takes the masks the model's own attention cell runs (pruned: docs/cache-paths.md)")


@dataclass
class Forward:
    """One forward of the main model during an assisted run."""

    start: int
    """The position of its first token in the sequence (the previous forward's end less the crop generate() asked for)."""
    tokens: int
    cached: int
    """The cache's ``get_seq_length()`` before it (``start`` on a cache that was rolled back right)."""
    positioned: bool = False
    """Whether generate() fed it ``position_ids``."""


@dataclass
class AssistantCall:
    """One ``generate()`` call the candidate generator made of the assistant: the sequence it handed over and the
    assistant's cache around it (``get_seq_length()``; ``None`` where the call had or returned none)."""

    sequence: int
    """The length of the ids handed over (-1: the call was handed none, an embeddings prompt)."""
    cached_before: int | None
    returned: int | None = None
    """The sequence length the call returned (``None``: it raised)."""
    cached_after: int | None = None

    @property
    def fault(self) -> str | None:
        """How the cache around the call leaves the sequence: a cache that holds every position of the sequence it is
        handed (the next forward feeds the whole sequence again: ``input_ids[:, -0:]``), or more than the sequence the
        call returns."""
        if self.cached_before is not None and 0 <= self.sequence <= self.cached_before:
            return (f"was handed a {self.sequence}-token sequence over a cache of {self.cached_before} tokens (the crop "
                    "after the last verification left no position to feed, so its prefill feeds the whole sequence again)")
        if self.returned is not None and self.cached_after is not None and self.cached_after > self.returned:
            held = self.cached_before or 0
            return (f"returned a {self.returned}-token sequence with a cache of {self.cached_after} tokens: its forwards "
                    f"fed {self.cached_after - held} positions over the {held} cached where {self.returned - 1 - held} were "
                    "new (a prefill that fed the whole sequence again)")
        return None


@dataclass
class AssistedRun:
    """One drafter's ``generate()``: its tokens and, per generated token, max |Δlogit| to the uncached reference."""

    drafter: str
    tokens: list[int]
    step_max_abs_delta: list[float]
    """Up to and including the first generated token that differs from greedy's (later ones continue other text)."""
    forwards: list[Forward] = field(default_factory=list)
    margin_at_part: float | None = None
    """The uncached reference's top-2 logit margin at the first generated token that differs from greedy's."""
    error: str | None = None
    replay: SelectionReplay | None = None
    """Set when the run left the reference on a model that selects: the run again with the uncached selections."""
    assistant_calls: list[AssistantCall] = field(default_factory=list)
    """The assistant's ``generate()`` calls (none for prompt lookup), its cache around each."""
    assistant_kv: KVParity | None = None
    """The assistant's cache after its last call against a fresh pass of it (``None``: not compared: no assistant, a
    family prompt, whose fresh pass would need the family's inputs, or ``assistant_kv_not_compared``)."""
    assistant_kv_not_compared: str | None = None
    """Why the assistant's K/V were not compared where they could be (its sequence holds the pad id)."""

    @property
    def rejected(self) -> list[int]:
        """Draft tokens rejected after each forward (its tokens beyond the next forward's first position)."""
        return [a.start + a.tokens - b.start for a, b in zip(self.forwards, self.forwards[1:], strict=False)]


@dataclass
class AssistedRecord:
    """Greedy ``generate()`` and each drafter's, over one prompt with the cell's cache."""

    prompt: list[int]
    max_new_tokens: int
    greedy_tokens: list[int]
    greedy_delta: float
    """Greedy's own max |Δlogit| to the uncached reference (a baseline; the ``generate`` check judges greedy)."""
    logit_scale: float
    windows: list[int]
    runs: list[AssistedRun]
    error: str | None = None
    not_applicable: str | None = None


def assisted_prompt(vocab: int, seed: int, length: int, device: torch.device) -> torch.Tensor:
    """A seeded prompt that repeats its first half, so prompt lookup finds an n-gram to draft from."""
    half = make_prompt(1, (length + 1) // 2, seed, vocab, device)
    return torch.cat([half, half], dim=1)[:, :length]


def run_lengths(prompt_length: int, windows: list[int]) -> tuple[int, int]:
    """``(prompt, max_new_tokens)``: a prompt shorter than the smallest window (else the probe's) and at least two
    bursts of new tokens, past the largest window; as many that the last self-drafted burst is capped at ``max_length``
    (each accepted burst adds ``DRAFT_TOKENS + 1`` tokens: the count leaves 2 for the last)."""
    crossed = [w for w in windows if w <= MAX_CROSSED_WINDOW]
    prompt = max(2, min(crossed) - 2) if crossed else prompt_length
    new = max(2 * DRAFT_TOKENS, max(crossed, default=0) + 2 * (DRAFT_TOKENS + 1) - prompt)
    return prompt, new + (2 - new) % (DRAFT_TOKENS + 1)


def random_assistant(model: Model, seed: int) -> Model:
    """A second random build of the model's architecture and vocabulary, smaller where its stack is uniform (fewer
    layers: ``ASSISTANT_LAYERS`` at most)."""
    config = copy.deepcopy(model.config)
    text = config.get_text_config(decoder=True)
    layers = getattr(text, "num_hidden_layers", None)
    if isinstance(layers, int) and layers > 1 and _one_uniform_stack(model, text, layers):
        kept = min(ASSISTANT_LAYERS, layers - 1)
        try:
            text.num_hidden_layers = kept
            if isinstance(getattr(text, "layer_types", None), list):
                text.layer_types = text.layer_types[:kept]
        except AttributeError:  # layer kinds a read-only property derives (Mamba's, FalconH1's in 5.25): the model's depth
            config = copy.deepcopy(model.config)
    torch.manual_seed(seed + 1)
    dtype = next(model.parameters()).dtype
    assistant = type(model)._from_config(config, dtype=dtype)
    return assistant.to(input_device(model)).eval()


def _one_uniform_stack(model: Model, text: Any, layers: int) -> bool:
    """Whether the model is one stack of ``layers`` layers of one kind (so fewer layers is the same architecture), counted
    by ``num_hidden_layers`` itself (BART-style configs alias it to ``encoder_layers``: a decoder-only build of theirs
    would keep its decoder's count and size its cache by the encoder's)."""
    stacks = [len(m) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and name.endswith("layers")]
    kinds = set(config_layer_types(text) or ["one"])  # recurrent_gemma before 5.24: its layers_block_type
    aliased = "num_hidden_layers" in getattr(text, "attribute_map", {})
    return stacks == [layers] and len(kinds) == 1 and not getattr(text, "num_kv_shared_layers", 0) and not aliased


@contextmanager
def main_forwards(model: Model) -> Iterator[list[Forward]]:
    """Record the forwards the model's own ``generate()`` makes, not those of a nested ``generate()`` of the same
    model drafting for itself. A forward's sequence position follows from the one before it and the ``crop`` generate()
    asked of the main cache in between (its draft rollback), whatever the cache then holds."""
    forwards: list[Forward] = []
    depth, watched = [0], []
    kept: list[int | None] = [None]
    generate = model.generate

    def nested(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        try:
            return generate(*args, **kwargs)
        finally:
            depth[0] -= 1

    def watch(cache: Any) -> None:
        crop = cache.crop

        def recorded(max_length: int) -> None:
            # Cache.crop's argument: zero or a negative one removes that many tokens (generate() from 5.14), a positive
            # one keeps that many (up to 5.13: crop(new_cur_len - 1)); either way, the length generate() asked to keep.
            end = forwards[-1].start + forwards[-1].tokens if forwards else 0
            kept[0] = end + max_length if max_length <= 0 else max_length
            crop(max_length)

        cache.crop = recorded
        watched.append(cache)

    def before(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("decoder_input_ids") if kwargs.get("decoder_input_ids") is not None else kwargs.get("input_ids")
        if depth[0] != 1 or not isinstance(ids, torch.Tensor):
            return
        cache = next((kwargs[k] for k in CACHE_KEYWORDS if kwargs.get(k) is not None), None)
        if cache is not None and callable(getattr(cache, "crop", None)) and not any(cache is w for w in watched):
            watch(cache)
        cached = (seq_length(cache) or 0) if cache is not None else 0
        start = cached if not forwards else kept[0] if kept[0] is not None else forwards[-1].start + forwards[-1].tokens
        kept[0] = None
        forwards.append(Forward(start, ids.shape[1], cached, isinstance(kwargs.get("position_ids"), torch.Tensor)))

    model.generate = nested
    handle = model.register_forward_pre_hook(before, with_kwargs=True)
    try:
        yield forwards
    finally:
        handle.remove()
        del model.generate
        for cache in watched:
            del cache.crop


@dataclass
class AssistantCalls:
    """The assistant's ``generate()`` calls, and what the last one returned: its sequences and cache."""

    calls: list[AssistantCall] = field(default_factory=list)
    last: tuple[torch.Tensor, Any] | None = None


@contextmanager
def assistant_calls(assistant: Model | None, own: bool) -> Iterator[AssistantCalls]:
    """Record the assistant's ``generate()`` calls and its cache around each (none without an assistant: prompt lookup);
    ``own``: the model drafts for itself, so its calls are the nested ones (its first is the main model's)."""
    made = AssistantCalls()
    calls = made.calls
    if assistant is None:
        yield made
        return
    depth = [0]
    previous = assistant.__dict__.get("generate")
    generate = assistant.generate

    def recorded(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        try:
            if depth[0] != (2 if own else 1):
                return generate(*args, **kwargs)
            ids = kwargs.get("decoder_input_ids", kwargs.get("input_ids"))
            cache = next((kwargs[k] for k in CACHE_KEYWORDS if kwargs.get(k) is not None), None)
            call = AssistantCall(ids.shape[-1] if isinstance(ids, torch.Tensor) else -1,
                                 seq_length(cache) if cache is not None else None)
            calls.append(call)
            out = generate(*args, **kwargs)
            sequences, cache = getattr(out, "sequences", None), returned_cache(out)
            call.returned = sequences.shape[-1] if isinstance(sequences, torch.Tensor) else None
            call.cached_after = seq_length(cache) if cache is not None else None
            made.last = (sequences, cache) if isinstance(sequences, torch.Tensor) and cache is not None else None
            return out
        finally:
            depth[0] -= 1

    assistant.generate = recorded
    try:
        yield made
    finally:
        if previous is None:
            del assistant.generate
        else:
            assistant.generate = previous


#: Up to 5.2 the candidate generator refuses the MinLengthLogitsProcessor that min_new_tokens builds (candidate_generator.py;
#: 5.3 drops it from the drafts instead), in these words.
MIN_LENGTH_REFUSED = "Passing `MinLengthLogitsProcessor` when using `assisted_generation is disabled"
#: Fixed length there as transformers' own assisted-decoding tests make it: an EOS id no token has, no min_new_tokens.
NEVER_STOP = {"eos_token_id": -1, "min_new_tokens": None}


def _config(model: Model, cache: str, new: int, **extra: Any) -> Any:
    return fixed_length_config(model, new, output_logits=True, return_dict_in_generate=True, **cache_implementation(cache),
                               **extra)


@contextmanager
def drafting(assistant: Model) -> Iterator[None]:
    """The assistant drafts ``DRAFT_TOKENS`` every burst (constant schedule, no confidence stop); restored after."""
    saved = copy.deepcopy(assistant.generation_config)
    assistant.generation_config.update(num_assistant_tokens=DRAFT_TOKENS, num_assistant_tokens_schedule="constant",
                                       assistant_confidence_threshold=0.0)
    try:
        yield
    finally:
        assistant.generation_config = saved


def _drafter_kwargs(model: Model, drafter: str, seed: int) -> tuple[dict[str, Any], Model | None]:
    if drafter == "prompt_lookup":
        return {"prompt_lookup_num_tokens": DRAFT_TOKENS, "max_matching_ngram_size": 2}, None
    return {}, model if drafter == "self" else random_assistant(model, seed)


def _not_applicable(model: Model, windows: list[int], other_attention: bool) -> str | None:
    reason = crop_support(type(model))
    if reason is None and other_attention and not windows:
        return NO_WINDOW
    if reason is None and other_attention and min(windows) > MAX_CROSSED_WINDOW:
        return WINDOW_NOT_CROSSED.format(windows=windows, limit=MAX_CROSSED_WINDOW)
    return reason


@dataclass
class AssistedInputs:
    """How a family feeds this path (its adapter): the prompt ``generate()`` continues, the rest of what it takes,
    and one uncached pass over a whole (decoder) sequence."""

    prompt: torch.Tensor
    """``[1, P]``, the (decoder) prompt; ``generate()``'s ``sequences`` start with it."""
    kwargs: dict[str, Any]
    """The rest of ``generate()``'s inputs: the causal LM's ``input_ids`` and mask, an encoder-decoder's encoder inputs."""
    reference: Callable[[torch.Tensor, bool], torch.Tensor]
    """``[1, S]`` (decoder) ids and whether generate() fed ``position_ids`` -> their uncached logits ``[1, S, V]``."""
    config: dict[str, Any] = field(default_factory=dict)
    """Generation settings the family needs (an encoder-decoder's ``decoder_start_token_id``)."""
    not_applicable: str | None = None
    """Why the model's own generate() cannot take this path (the adapter knows), else ``None``."""
    ids_only: bool = False
    """Whether the prompt is ids alone (a causal LM's), so the assistant's cache can be checked by a fresh pass of ids."""


def causal_inputs(model: Model, plan: Any, length: int) -> AssistedInputs:
    """A causal LM's: ``assisted_prompt`` as ``input_ids`` with an all-ones mask; the reference is its plain forward, with
    the positions generate() feeds where it feeds them (0, 1, …: RoBERTa-style models otherwise start at padding_idx + 1)."""
    prompt = assisted_prompt(model.config.get_text_config(decoder=True).vocab_size, plan.seed, length, input_device(model))

    def reference(ids: torch.Tensor, positioned: bool) -> torch.Tensor:
        positions = {"position_ids": torch.arange(ids.shape[1], device=ids.device)[None]} if positioned else {}
        return model(input_ids=ids, use_cache=False, **positions).logits

    return AssistedInputs(prompt, {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}, reference, ids_only=True)


Adapter = Callable[[Model, Any, int], AssistedInputs]


@torch.inference_mode()
def run_assisted(model: Model, plan: Any, drafters: tuple[str, ...] = DRAFTERS, other_attention: bool = False,
                 windows: list[int] | None = None, inputs_for: Adapter = causal_inputs) -> AssistedRecord:
    """Greedy ``generate()`` and each drafter's over one prompt, against one uncached pass over greedy's sequence;
    ``other_attention``: the cell runs an attention other than the model's own (then only windowed models run it);
    ``windows``: of the (decoder) layers, from the model's cache geometry by default; ``inputs_for``: the family's adapter.
    Fixed length comes from ``min_new_tokens`` as users set it; where the release refuses that, from ``NEVER_STOP``."""
    record = _assisted(model, plan, drafters, other_attention, windows, inputs_for, {})
    if any(run.error and MIN_LENGTH_REFUSED in run.error for run in record.runs):
        record = _assisted(model, plan, drafters, other_attention, windows, inputs_for, NEVER_STOP)
    return record


def _assisted(model: Model, plan: Any, drafters: tuple[str, ...], other_attention: bool, windows: list[int] | None,
              inputs_for: Adapter, stop: dict[str, Any]) -> AssistedRecord:
    try:
        windows = windows_of(cache_geometry(model.config)) if windows is None else windows
    except Exception as exc:  # noqa: BLE001 - a config the geometry cannot read fails this check, with its words
        return AssistedRecord([], 0, [], 0.0, 0.0, [], [], error=f"the model's layers could not be read: {type(exc).__name__}: {exc}"[:500])
    prompt_length, new = run_lengths(plan.prompt_length, windows)
    reason = _not_applicable(model, windows, other_attention)
    if reason is not None:
        return AssistedRecord([], new, [], 0.0, 0.0, windows, [], not_applicable=reason)
    inputs = inputs_for(model, plan, prompt_length)
    if inputs.not_applicable is not None:
        return AssistedRecord([], new, [], 0.0, 0.0, windows, [], not_applicable=inputs.not_applicable)
    prompt = inputs.prompt
    prompt_length = prompt.shape[1]
    try:
        with main_forwards(model) as fed:
            greedy = model.generate(**inputs.kwargs, generation_config=_config(model, plan.cache, new, **{**inputs.config, **stop}))
    except Exception as exc:  # noqa: BLE001 - a crash of plain generate() fails this check only
        words = f"{type(exc).__name__}: {exc}"[:500]
        if isinstance(exc, TypeError) and "generate() missing" in str(exc):  # a generate() of its own, of other inputs
            return AssistedRecord(prompt[0].tolist(), new, [], 0.0, 0.0, windows, [], not_applicable=f"the model's own generate() "
                                  f"takes other inputs than the family's encoder input: {words}")
        return AssistedRecord(prompt[0].tolist(), new, [], 0.0, 0.0, windows, [], error=f"greedy generate() raised {words}")
    full = greedy.sequences
    positioned = bool(fed) and fed[0].positioned
    reference = inputs.reference(full, positioned)[0, prompt_length - 1 : -1]
    greedy_delta = max(float(row_delta(logits, reference[k : k + 1])[0]) for k, logits in enumerate(greedy.logits))
    record = AssistedRecord(prompt[0].tolist(), new, full[0, prompt_length:].tolist(), greedy_delta,
                            float(torch.nan_to_num(reference.float()).abs().max()), windows, [])
    for drafter in drafters:
        try:
            run = _run(model, plan, drafter, inputs, new, reference, record.greedy_tokens, positioned, stop)
        except _Refused as refused:
            record.not_applicable = f"generate() refuses: {refused.args[0]}"[:500]
            return record
        except Exception as exc:  # noqa: BLE001 - a crash of one drafter (its assistant's build) fails this check
            run = AssistedRun(drafter, [], [], error=f"{type(exc).__name__}: {exc}"[:500])
        record.runs.append(run)
    return record


class _Refused(Exception):
    """generate() refuses this path (one of ``REFUSALS``)."""


def _run(model: Model, plan: Any, drafter: str, inputs: AssistedInputs, new: int, reference: torch.Tensor,
         greedy: list[int], positioned: bool, stop: dict[str, Any]) -> AssistedRun:
    extra, assistant = _drafter_kwargs(model, drafter, plan.seed)
    prompt = inputs.prompt

    recorded = AssistantCalls()
    generation = _config(model, plan.cache, new, **{**inputs.config, **extra, **stop})

    def once() -> tuple[list[int], list[torch.Tensor], list[Forward]]:
        nonlocal recorded
        with main_forwards(model) as forwards, drafting(assistant if assistant is not None else model):
            with assistant_calls(assistant, own=assistant is model) as made:
                try:
                    out = model.generate(**inputs.kwargs, **({"assistant_model": assistant} if assistant is not None else {}),
                                         generation_config=copy.deepcopy(generation))
                finally:
                    recorded = made
        return out.sequences[0, prompt.shape[1] :].tolist(), list(out.logits), forwards

    def deltas(tokens: list[int], logits: list[torch.Tensor]) -> list[float]:
        part = next((k for k, (a, b) in enumerate(zip(tokens, greedy, strict=False)) if a != b), len(logits) - 1)
        # A run longer than greedy's (drafts past max_new_tokens) has no reference for its extra tokens: the check says so.
        return [float(row_delta(logits[k], reference[k : k + 1])[0]) for k in range(min(part + 1, len(logits), len(reference)))]

    try:
        tokens, logits, forwards = once()
    except Exception as exc:
        # transformers' own refusal, in its words (a ValueError; MiniMaxCache.crop's is a RuntimeError)
        if isinstance(exc, (ValueError, RuntimeError)) and any(refusal in str(exc) for refusal in REFUSALS):
            raise _Refused(exc) from exc
        return AssistedRun(drafter, [], [], error=f"{type(exc).__name__}: {exc}"[:500], assistant_calls=list(recorded.calls))
    run = AssistedRun(drafter, tokens, deltas(tokens, logits), forwards, assistant_calls=list(recorded.calls))
    if assistant is not None and recorded.last is not None and inputs.ids_only:
        run.assistant_kv_not_compared = inferred_padding(generation, recorded.last[0])
        try:
            run.assistant_kv = None if run.assistant_kv_not_compared else assistant_kv(assistant, *recorded.last, positioned)
        except Exception as exc:  # noqa: BLE001 - a crash of the fresh pass fails this check, with its words
            run.assistant_kv = KVParity(0, 0.0, None, problem=f"the assistant's fresh pass raised {type(exc).__name__}: {exc}"[:500])
    part = next((k for k, (a, b) in enumerate(zip(tokens, greedy, strict=False)) if a != b), None)
    if part is not None:
        top = reference[part].float().topk(2).values
        run.margin_at_part = float(top[0] - top[1])
    limit = plan.locate_tolerance.limit(float(reference.abs().max())) if plan.locate_tolerance is not None else float("inf")
    if max(run.step_max_abs_delta, default=0.0) > limit:
        full = torch.cat([prompt, torch.tensor([greedy], device=prompt.device)], dim=1)
        run.replay = _replay(model, lambda: deltas(*once()[:2]), lambda: inputs.reference(full, positioned))
    return run


def _replay(model: Model, rerun: Callable[[], list[float]], uncached: Callable[[], object]) -> SelectionReplay | None:
    """The run again with the uncached pass's selections forced in; ``None`` where its forwards cannot be traced (an
    encoder-decoder's reference reads no ``input_ids``): then nothing is concluded from it."""
    try:
        return replay_selections(model, next(model.parameters()).dtype, rerun, uncached)
    except ReplayError:
        return None

"""State that leaks between ``generate()`` calls through one model instance (issue 20, item 4).

On a cell whose ``generate`` check ran (its cached greedy tokens for the probe's prompt are the first call):

- dynamic cells: ``generate()`` continued from the ``past_key_values`` a shorter call returned
  (``return_dict_in_generate=True``) must give the one long call's tokens; then a second, different prompt with
  extra pad columns on the left (masked, as a tokenizer's ``pad_to_multiple_of`` pads) through the same instance
  must give the tokens its unpadded uncached ``generate()`` gives (half the decode steps: a leaked state or a
  visible pad column shows from the first decoded token);
- static and quantized cells: ``generate()`` again with the same arguments (``cache_implementation`` and the user's
  ``cache_config`` dict: fp8's ``{"backend": "fp8"}``, quanto's and HQQ's every documented key, the same
  ``GenerationConfig`` object) must give the first call's tokens, and leave the dict and the config as they were
  (transformers consumes keys of a copy from 5.19 on: generation/utils.py, "Copied, as generate may be called several
  times with the same cache_config"; 5.0-5.18 consume the user's own dict).

Tokens are compared exactly (float32 cells only); where they part, the first generated position and rows are named.
A family cell's calls take its prompt from its adapter (``GenerateInputs``: an image, an encoder input), continued as
the adapter says; a causal LM's second prompt is another, padded one, a decoder-only family cell's its own prompt (its
media) left-padded the same way (``GenerateInputs.left_padded``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from kvconform.build.models import Model
from kvconform.compat import cache_keyword
from kvconform.probe.cache_io import cache_implementation, fixed_length_config, input_device, make_prompt, returned_cache
from kvconform.probe.generate_inputs import GenerateInputs, pad_id

if TYPE_CHECKING:  # decode.py imports this module
    from kvconform.probe.decode import GenerateRecord

#: Extra pad columns put on the left of the prompt (masked out), as a tokenizer's ``pad_to_multiple_of`` adds.
EXTRA_PADDING = 3
#: The second prompt's seed offset from the probe's.
SECOND_PROMPT_SEED = 1


@dataclass
class Continued:
    """A ``generate()`` continued from its returned cache: its raw logits against the one long call's."""

    what: str
    """The comparison's words (as in ``checked`` or ``problems``)."""
    head: int
    """Tokens the first call generated: the continued call's first is generated token ``head``."""
    deltas: list[float]
    """Per continued step, max |Δlogit| against the one long call's logits at that generated token."""
    logit_scale: float
    """max |logit| of the one long call, for the tolerance's limit."""


@dataclass
class CallsRecord:
    """Each comparison made (``checked``: what held) and each that failed (``problems``)."""

    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    """Set when a call raised (the comparisons made before it stand)."""
    calling: str = "the first generate()"
    """The call being made (the one that raised, when ``error`` is set)."""
    not_made: list[str] = field(default_factory=list)
    """Comparisons not made, each with why (a model with its own ``generate()`` is not continued)."""
    continued: Continued | None = None
    """The continued call's logits against the one long call's (tokens alone miss a wrong continuation of a model that
    repeats one token, as tiny random models do)."""

    @property
    def compared(self) -> int:
        return len(self.checked) + len(self.problems)


def _config(model: Model, steps: int, use_cache: bool = True, inputs: GenerateInputs | None = None, **extra: Any) -> Any:
    return fixed_length_config(model, steps, use_cache, return_dict_in_generate=True, **(inputs.config if inputs else {}), **extra)


def parted_at(got: list[list[int]], want: list[list[int]]) -> str | None:
    """``generated token k (rows …): a vs b`` where two token lists first part, or ``None``."""
    if len(got) != len(want) or any(len(a) != len(b) for a, b in zip(got, want, strict=False)):
        return f"{[len(a) for a in got]} tokens per row against {[len(b) for b in want]}"
    for k in range(len(got[0]) if got else 0):
        rows = [r for r, (a, b) in enumerate(zip(got, want, strict=False)) if a[k] != b[k]]
        if rows:
            return f"from generated token {k} (rows {rows}: {[got[r][k] for r in rows]} vs {[want[r][k] for r in rows]})"
    return None


def _compare(record: CallsRecord, what: str, got: list[list[int]], want: list[list[int]], against: str) -> None:
    parted = parted_at(got, want)
    if parted is None:
        record.checked.append(what)
    else:
        record.problems.append(f"{what}: tokens part from {against} {parted}")


def _generate(model: Model, given: dict[str, Any], config: Any, record: CallsRecord, calling: str, **kwargs: Any) -> Any:
    record.calling = calling
    return model.generate(**given, generation_config=config, **kwargs)


def _new_tokens(output: Any, prompt_width: int) -> list[list[int]]:
    return output.sequences[:, prompt_width:].tolist()


def run_calls(model: Model, plan: Any, first: GenerateRecord | None, inputs: GenerateInputs | None = None) -> CallsRecord:
    """The calls of the cell's kind after the ``generate`` check's; ``first`` is that check's record (``None``: not run or
    raised); ``inputs`` a family cell's prompt (``None``: a causal LM's, made from the plan)."""
    record = CallsRecord()
    try:
        _run(model, plan, first, inputs, record)
    except Exception as exc:  # noqa: BLE001 - a generate() crash fails this check only
        record.error = f"{record.calling} raised {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
    return record


@torch.inference_mode()
def _run(model: Model, plan: Any, first: GenerateRecord | None, inputs: GenerateInputs | None, record: CallsRecord) -> None:
    vocab = model.config.get_text_config(decoder=True).vocab_size
    causal = inputs is None
    if inputs is None:
        inputs = GenerateInputs.of_ids(make_prompt(plan.batch_size, plan.prompt_length, plan.seed, vocab, input_device(model)))
    steps, width = plan.decode_steps, inputs.prompt_length
    if plan.cache == "dynamic":
        if first is None or first.cached_logits is None:
            output = _generate(model, inputs.kwargs, _config(model, steps, inputs=inputs, output_logits=True), record,
                               "a first generate()")
            tokens, logits = _new_tokens(output, width), torch.stack(output.logits)
        else:
            tokens, logits = first.cached_tokens, first.cached_logits
        _continued(model, inputs, steps, tokens, logits, record)
        if causal:
            _second_prompt(model, plan, vocab, record)
        else:
            _padded_prompt(model, inputs, tokens, record)
        return
    kwargs = cache_implementation(plan.cache, model.config)  # the user's arguments, one dict passed to both calls
    config = _config(model, steps, inputs=inputs)
    given_kwargs, given_config = copy.deepcopy(kwargs), config.to_dict()
    what = "the generate check's generate()"
    if first is None:
        what = "a first generate()"
        tokens = _new_tokens(_generate(model, inputs.kwargs, config, record, what, **kwargs), width)
        _unchanged(record, kwargs, given_kwargs, config, given_config, note=False)  # before a call it may break
    else:
        tokens = first.cached_tokens
    again = f"generate() again with the same arguments ({_shown(kwargs)}) and GenerationConfig"
    second = _new_tokens(_generate(model, inputs.kwargs, config, record, again, **kwargs), width)
    _compare(record, again, second, tokens, what)
    if not record.problems:
        _unchanged(record, kwargs, given_kwargs, config, given_config)


def _unchanged(record: CallsRecord, kwargs: dict[str, Any], given_kwargs: dict[str, Any], config: Any,
               given_config: dict[str, Any], note: bool = True) -> None:
    """The user's arguments and GenerationConfig as they were given (a problem for each that is not; ``note``: record
    that they were)."""
    now = config.to_dict()
    changed = sorted(key for key in given_config.keys() | now.keys() if given_config.get(key) != now.get(key))
    if kwargs != given_kwargs:
        record.problems.append(f"generate() changed the user's arguments: {_shown(given_kwargs)} came back as {_shown(kwargs)}")
    if changed:
        record.problems.append(f"generate() changed the user's GenerationConfig: {changed}")
    if note and kwargs == given_kwargs and not changed:
        record.checked.append(f"the arguments ({_shown(kwargs)}) and the GenerationConfig came back unchanged")


def _shown(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{key}={_plain(value)!r}" for key, value in kwargs.items())


def _plain(value: Any) -> Any:
    """``value`` with any object that is not plain data shown as ``<its class name>`` (a model config generate() put in
    the user's dict would print whole)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    return value if value is None or isinstance(value, (str, int, float, bool)) else f"<{type(value).__name__}>"


def _continued(model: Model, inputs: GenerateInputs, steps: int, first: list[list[int]], logits: torch.Tensor,
               record: CallsRecord) -> None:
    """``generate()`` for half the tokens, then continued from the cache it returned, against one long call (its tokens
    ``first`` and raw ``logits``)."""
    from transformers import Cache, GenerationMixin

    head = max(1, steps // 2)
    what = f"generate() of {head} tokens continued for {steps - head} from the cache it returned"
    if type(model).generate is not GenerationMixin.generate:  # musicgen: the continuation contract is GenerationMixin's
        record.not_made.append(f"{what}: not continued, {type(model).__name__} has its own generate()")
        return
    # A model's own forced tokens (BART's generation config forces EOS as the last token, mBART BOS as the first) belong
    # to the ends of the one long call: the first call's last token and the continued call's first are not those ends.
    # generate() fills a None it is given from the model's own config, so the model's is unset for the call.
    with _unset(model, "forced_eos_token_id"):
        short = _generate(model, inputs.kwargs, _config(model, head, inputs=inputs), record,
                          f"generate() of {head} tokens (to be continued)")
    cache = returned_cache(short)
    if cache is None:
        record.problems.append(f"{what}: generate(return_dict_in_generate=True) returned no cache")
        return
    if not isinstance(cache, Cache):  # generate() takes Cache instances only (generation/utils.py: "Please use a Cache instance")
        record.not_made.append(f"{what}: not continued, the model's {type(cache).__name__} is not a transformers Cache")
        return
    with _unset(model, "forced_bos_token_id"):
        rest = _generate(model, inputs.continued(short.sequences), _config(model, steps - head, inputs=inputs, output_logits=True),
                         record, f"generate() continued for {steps - head} tokens from the returned cache",
                         **{cache_keyword(model): cache})
    _compare(record, what, _new_tokens(rest, inputs.prompt_length), first, f"one generate() of {steps} tokens")
    deltas = [float((got.float() - want.float()).abs().nan_to_num(nan=float("inf")).max()) for got, want in zip(rest.logits, logits[head:], strict=False)]
    record.continued = Continued(what, head, deltas, float(logits.float().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).abs().max()))


@contextmanager
def _unset(model: Model, name: str) -> Iterator[None]:
    """``model.generation_config.<name>`` set to ``None`` for the block (and in the call's own config)."""
    config = model.generation_config
    saved = getattr(config, name, None) if config is not None else None
    if config is not None:
        setattr(config, name, None)
    try:
        yield
    finally:
        if config is not None:
            setattr(config, name, saved)


def _padded_prompt(model: Model, inputs: GenerateInputs, tokens: list[list[int]], record: CallsRecord) -> None:
    """A family cell's own prompt (its image or audio) with ``EXTRA_PADDING`` masked pad columns on the left (the text
    config's pad id), after the calls above, against the cell's unpadded cached ``tokens`` (their first half)."""
    padded = inputs.left_padded(EXTRA_PADDING, pad_id(model, inputs))
    if padded is None:
        return
    steps = max(1, len(tokens[0]) // 2)
    what = f"the cell's prompt with {EXTRA_PADDING} extra masked pad columns on the left, after the calls before it"
    got = _new_tokens(_generate(model, padded.kwargs, _config(model, steps, inputs=padded), record, what), padded.prompt_length)
    _compare(record, what, got, [row[:steps] for row in tokens], "its unpadded generate()")


def _second_prompt(model: Model, plan: Any, vocab: int, record: CallsRecord) -> None:
    """A different prompt, with ``EXTRA_PADDING`` masked pad columns (id 0) on the left, after the calls above, against
    its own unpadded uncached ``generate()``; where they part, the unpadded cached call says whether the padding did."""
    prompt = make_prompt(plan.batch_size, plan.prompt_length, plan.seed + SECOND_PROMPT_SEED, vocab, input_device(model))
    steps = max(1, plan.decode_steps // 2)
    padded = GenerateInputs.of_ids(prompt).left_padded(EXTRA_PADDING, 0)
    assert padded is not None  # a prompt of ids
    what = f"a second prompt (seed + 1) with {EXTRA_PADDING} extra masked pad columns on the left, after the calls before it"
    cached = _new_tokens(_generate(model, padded.kwargs, _config(model, steps), record, what), padded.prompt_length)
    uncached = _new_tokens(_generate(model, GenerateInputs.of_ids(prompt).kwargs, _config(model, steps, use_cache=False), record,
                                     "the second prompt's uncached generate()"), prompt.shape[1])
    parted = parted_at(cached, uncached)
    if parted is None:
        record.checked.append(what)
        return
    unpadded = _new_tokens(_generate(model, GenerateInputs.of_ids(prompt).kwargs, _config(model, steps), record, "the second prompt unpadded"),
                           prompt.shape[1])
    again = parted_at(unpadded, uncached)
    cause = ("the extra left padding changes the tokens (unpadded, the cached call gives the uncached tokens)" if again is None
             else f"unpadded too, the cached call parts from the uncached one {again}")
    record.problems.append(f"{what}: tokens part from its own unpadded uncached generate() {parted}; {cause}")

"""Per-worker memo of models and probe records: a model is built once, a cell is probed once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvconform.build.geometry import CacheGeometry, cache_geometry, explain
from kvconform.build.models import load_master, model_in_dtype
from kvconform.build.support import attention_model, cache_support, cell_support
from kvconform.cells import Cell, check_applies, untestable
from kvconform.families import CAUSAL_LM, TEXT_TO_AUDIO
from kvconform.matrix import QUANTIZED_KINDS
from kvconform.path_failure import model_frame, path_failure_message
from kvconform.probe.decode import ProbePlan, ProbeRecord, run_probe


@dataclass
class CellOutcome:
    """A cell's probe record, or the exception that kept it from running."""

    record: ProbeRecord | None = None
    error: BaseException | None = None
    geometry: CacheGeometry | None = None
    explanation: str = ""
    load_s: float = 0.0
    model_type: str | None = None
    """``config.model_type`` of the loaded model (``None`` when it did not load)."""
    not_applicable: str | None = None
    """Why the model cannot run this cell's cache or attention (decided by transformers' own rules)."""
    family: Any = None
    """A family cell's ``FamilyProbe`` (cross-attention half, text-only record); ``None`` for causal LMs."""
    path_failure: str | None = None
    """Set when the model loaded and was cast but raised while running this cell's cache path: the failure of
    that path's checks (naming the cache and the frame in the model's own file), not of the model's build."""


@dataclass
class CellRunner:
    """Holds one master model at a time (cells arrive grouped by model) and every cell's outcome."""

    outcomes: dict[str, CellOutcome] = field(default_factory=dict)
    loads: int = 0
    #: Called with each cast model before it is probed (the benchmark hooks its timers here).
    on_model: Callable[[Any], None] | None = None
    _model_id: str | None = None
    _master: Any = None
    _load_error: BaseException | None = None
    _load_s: float = 0.0
    _by_dtype: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def outcome(self, cell: Cell) -> CellOutcome:
        if cell.id not in self.outcomes:
            self.outcomes[cell.id] = self._run(cell)
        return self.outcomes[cell.id]

    def _master_for(self, cell: Cell) -> Any:
        if self._model_id != cell.spec.id:
            self._model_id, self._master, self._load_error, self._by_dtype = cell.spec.id, None, None, {}
            start = time.perf_counter()
            try:
                self.loads += 1
                self._master = load_master(cell.spec)
            except Exception as exc:  # noqa: BLE001 - reported on every cell of this model
                self._load_error = exc
            self._load_s = time.perf_counter() - start
        if self._load_error is not None:
            raise self._load_error
        return self._master

    def _model_for(self, master: Any, cell: Cell) -> Any:
        """One model per dtype, device and attention of the current master, kept while that dtype's cells run."""
        key = (cell.dtype, cell.device, cell.attn)
        if key not in self._by_dtype:
            self._by_dtype = {k: v for k, v in self._by_dtype.items() if k[:2] == key[:2]}
            if _already_placed(master, cell):
                base = master
            else:
                same = (cell.dtype, cell.device, master.config._attn_implementation)
                base = self._by_dtype.get(same) or model_in_dtype(master, cell.dtype, cell.device)
                self._by_dtype[same] = base
            # Family cells run the attention from_pretrained picks (their cache paths are the causal sweep's only).
            model, rebuilt = attention_model(base, cell.attn) if cell.spec.family == CAUSAL_LM else (base, False)
            self.loads += rebuilt
            self._by_dtype[key] = model
        return self._by_dtype[key]

    def _run(self, cell: Cell) -> CellOutcome:
        try:
            master = self._master_for(cell)
        except Exception as exc:  # noqa: BLE001
            return CellOutcome(error=exc, load_s=self._load_s)
        settings = cell.spec.settings
        model_type = getattr(master.config, "model_type", None)
        plan = ProbePlan(
            batch_size=settings.batch_size, prompt_length=settings.prompt_length, decode_steps=settings.decode_steps,
            seed=settings.seed, cache=cell.cache, device=cell.device,
            generate=check_applies("generate", cell),
            ragged=check_applies("ragged", cell) and untestable("ragged", cell) is None, prefix_reuse=check_applies("prefix_reuse", cell),
            crop=check_applies("crop", cell), reorder=check_applies("reorder", cell), window=check_applies("window", cell),
            chunked_prefill=check_applies("chunked_prefill", cell),
            calls=check_applies("between_calls", cell),
            # K/V localization compares stored tensors: a quantized cache stores other values by design.
            locate_tolerance=None if cell.cache in QUANTIZED_KINDS else cell.tolerance,
        )
        try:
            # Family cells run the attention from_pretrained picks: only their cache is asked about.
            reason = (cell_support(master, cell.cache, cell.attn) if cell.spec.family == CAUSAL_LM
                      else family_cache_support(master, cell))
            if reason is not None:
                return CellOutcome(load_s=self._load_s, model_type=model_type, not_applicable=reason)
            model = self._model_for(master, cell)
        except Exception as exc:  # noqa: BLE001 - the model cannot be prepared for this cell: fails its setup
            return CellOutcome(error=exc, load_s=self._load_s, model_type=model_type)
        try:
            if self.on_model is not None:
                self.on_model(model)
            if cell.spec.family != CAUSAL_LM:
                from kvconform.families.probe import probe_family

                probe = probe_family(model, plan, cell.spec.family)
                _family_paths(model, plan, cell, probe)
                return CellOutcome(probe.record, None, probe.geometry, probe.explanation, self._load_s, model_type, family=probe)
            record = run_probe(model, plan)
            record.extras.update(run_extras(model, plan, cell, master, record.timings))
            return CellOutcome(record, None, cache_geometry(master.config), explain(master.config), self._load_s, model_type)
        except Exception as exc:  # noqa: BLE001 - a crash inside a model fails its cell's checks, not the run
            failure = path_failure_message(cell.id, cell.cache, cell.attn, exc, model_frame(exc, model))
            return CellOutcome(error=exc, load_s=self._load_s, model_type=model_type, path_failure=failure)


def family_cache_support(master: Any, cell: Cell) -> str | None:
    """Why a family cell's cache does not run: transformers builds none for the config of a stage the cell decodes (Bark:
    each causal stage's; others: the model's), or a codebook decoder's static cell where its own generate() builds no
    static cache; ``None`` where it runs."""
    from kvconform.families.bark import is_bark, stage_configs

    configs = stage_configs(master) if is_bark(master) else [master.config]
    reason = next((reason for config in configs if (reason := cache_support(type(master), config, cell.cache)) is not None), None)
    if reason is not None or cell.spec.family != TEXT_TO_AUDIO or cell.cache != "static":
        return reason
    from kvconform.families.codebook import static_support

    return static_support(master)


def _family_paths(model: Any, plan: ProbePlan, cell: Cell, probe: Any) -> None:
    """A family cell's generate() paths: the one generate, beam and assisted paths, a ragged batch of its prompt and the
    calls through one instance, given the family's adapter, and generate(prefill_chunk_size=...) where its chunked prefill
    ran (timed)."""
    from kvconform.families import ENCODER_DECODER
    from kvconform.families.geometry import self_attention_geometry
    from kvconform.probe.assisted import run_assisted
    from kvconform.probe.decode import keeps_generate_logits, run_generate
    from kvconform.probe.generation import run_beam
    from kvconform.probe.window import windows_of

    record, inputs, assisted = probe.record, probe.generate_inputs, probe.assisted_inputs
    # an encoder-decoder's windows are its decoder's; a decoder-only model's, its cache geometry's (run_assisted's own)
    windows = windows_of(self_attention_geometry(model.config)[0]) if cell.spec.family in ENCODER_DECODER else None
    runs = {"generate": lambda: run_generate(model, inputs, plan.decode_steps, plan.cache,
                                             keep_logits=keeps_generate_logits(plan)),
            "beam": lambda: run_beam(model, plan, inputs),
            "assisted": lambda: run_assisted(model, plan, windows=windows, inputs_for=assisted)}
    for name, run in runs.items():
        if check_applies(name, cell) and (assisted is not None if name == "assisted" else inputs is not None):
            start = time.perf_counter()
            if name == "generate":
                record.generate = run()
            else:
                record.extras[name] = run()
            record.timings[f"{name}_s"] = time.perf_counter() - start
    if plan.ragged and inputs is not None:
        from kvconform.families.decoders import inner_language_model
        from kvconform.probe.ragged_generate import run_ragged_generate

        start = time.perf_counter()
        decoder = inner_language_model(model) or model
        record.paths["ragged"] = run_ragged_generate(model, decoder, inputs, plan)
        record.timings["ragged_s"] = time.perf_counter() - start
    if plan.calls and inputs is not None:
        from kvconform.probe.calls import run_calls

        start = time.perf_counter()
        generated = record.generate if record.generate is not None and record.generate.error is None else None
        record.calls = run_calls(model, plan, generated, inputs)
        record.timings["calls_s"] = time.perf_counter() - start
    chunked = record.chunked
    if chunked is not None and chunked.steps and plan.cache == "dynamic" and plan.generate and inputs is not None:  # the path users run
        from kvconform.probe.chunked import run_chunked_generate
        from kvconform.probe.decode import plain_run

        start = time.perf_counter()
        # An encoder-decoder's chunked generate() takes its encoder batch padded, as a tokenizer pads it (its own plain run).
        given, plain = (inputs.padded, None) if inputs.padded is not None else (inputs, plain_run(record.generate))
        chunked.generate = run_chunked_generate(model, given, plan.decode_steps, chunked.chunk_size, plain)
        record.timings["chunked_generate_s"] = time.perf_counter() - start
    if record.generate is not None:
        record.generate.cached_logits = None  # used: the record outlives the cell


def _already_placed(master: Any, cell: Cell) -> bool:
    """Models spread by ``device_map`` are probed where accelerate put them, in float32 only."""
    return bool(getattr(master, "hf_device_map", None)) and cell.dtype == "float32"


def run_extras(model: Any, plan: ProbePlan, cell: Cell, master: Any, timings: dict[str, float]) -> dict[str, Any]:
    """The cell's generation paths and, for a non-default attention, its agreement with the model's own (timed)."""
    from kvconform.probe.assisted import OTHER_ATTENTION_DRAFTERS, run_assisted
    from kvconform.probe.attention import run_agreement
    from kvconform.probe.generation import run_beam, run_padded_generate

    other_attention = cell.attn != cell.model_attn
    drafters = OTHER_ATTENTION_DRAFTERS if other_attention else cell.spec.settings.assisted_drafters
    runs = {"beam": lambda: run_beam(model, plan), "padded_generate": lambda: run_padded_generate(model, plan),
            "attn_agreement": lambda: run_agreement(model, master, plan),
            "assisted": lambda: run_assisted(model, plan, drafters, other_attention)}
    extras: dict[str, Any] = {}
    for name, run in runs.items():
        if check_applies(name, cell):
            start = time.perf_counter()
            extras[name] = run()
            timings[f"{name}_s"] = time.perf_counter() - start
    return extras

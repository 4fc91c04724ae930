"""The cache paths of family cells: the one generate() and beam paths, given each family's prompt (an image, an encoder
input) by its adapter and judged by the same checks as for causal LMs, and the static cache (both halves of an
encoder-decoder's, sliding layers crossed with an image in the prompt)."""

from __future__ import annotations

import re

import pytest
import transformers.generation.utils as generation_utils

from kvconform.cells import Cell
from kvconform.checks.table import INT_KINDS
from kvconform.families import AUDIO_LANGUAGE, SEQ2SEQ, SPEECH_SEQ2SEQ, TEXT_TO_AUDIO, VISION_LANGUAGE
from kvconform.families import checks as family_checks
from kvconform.matrix import ModelSpec, Settings
from kvconform.results import CheckResult
from kvconform.runner import CellOutcome, CellRunner
from tests.conftest import TOLERANCES
from tests.family_faults import FAULTS as FAMILY_FAULTS
from tests.family_faults import planted as planted_family_fault
from tests.faults import planted
from tests.schema import undocumented_details

#: t5gemma: a decoder with sliding layers (its cross half must have none) and no sdpa (its static cell runs all the same);
#: speech_to_text: an audio encoder input its feature extractor pads and masks (Whisper's pads every clip to 30 s).
MODELS = {"llava": VISION_LANGUAGE, "qwen2_vl": VISION_LANGUAGE, "gemma3": VISION_LANGUAGE, "t5": SEQ2SEQ,
          "t5gemma": SEQ2SEQ, "whisper": SPEECH_SEQ2SEQ, "speech_to_text": SPEECH_SEQ2SEQ, "qwen2_audio": AUDIO_LANGUAGE}


#: The labelled model bugs of these cells (model_matrix.yaml, each with its repro): model type -> check -> its words.
KNOWN = {"whisper": {"chunked_prefill": "got multiple values for keyword argument 'position_ids'"},
         # the encoder-decoder continuation (5.3+) and the chunked prefill's encoder mask cut to the chunk (5.1+)
         **{model: {"between_calls": "its logits leave the one long call's", "chunked_prefill": "must match the size of tensor b"}
            for model in ("t5", "t5gemma")},
         # the continuation, and the chunked generate()'s feature mask cut to the chunk (5.1+)
         "speech_to_text": {"between_calls": "its logits leave the one long call's",
                            "chunked_prefill": "generate(prefill_chunk_size=2)'s greedy tokens"}}


#: Codebook decoders whose own generate(cache_implementation="static") builds a static cache (their static cells run).
CODEBOOK_STATIC = ("bark", "dia", "csm", "musicgen_melody", "seamless_m4t", "higgs_audio_v2", "qwen2_5_omni", "qwen3_omni_moe")


def _unexplained(model_type: str, failed: dict[str, str]) -> dict[str, str]:
    """``failed`` without the cell's labelled model bugs (each must still fail with its own words)."""
    known = KNOWN.get(model_type, {})
    return {name: message for name, message in failed.items() if not (name in known and known[name] in message)}


def _cell(model_type: str, cache: str = "dynamic", assisted: bool = False) -> Cell:
    settings = Settings(dtypes=("float32",), devices=("cpu",), caches=("dynamic", "static"), tolerances=TOLERANCES,
                        generate=True, beam=True, prefix_reuse=True, crop=True, chunked_prefill=True, window_crossings=True,
                        ragged=True, assisted=assisted)
    family = MODELS.get(model_type, TEXT_TO_AUDIO)
    return Cell(ModelSpec(id=f"{model_type}-family{'-assisted' if assisted else ''}", source="synthetic", location=model_type,
                          settings=settings, family=family), "float32", "cpu", cache, "sdpa")


def _outcome(runner: CellRunner, model_type: str, cache: str = "dynamic", assisted: bool = False) -> CellOutcome:
    cell = _cell(model_type, cache, assisted)
    runner.outcomes.pop(cell.id, None)
    outcome = runner.outcome(cell)
    assert outcome.error is None, outcome.error
    return outcome


def _results(runner: CellRunner, model_type: str, cache: str = "dynamic") -> dict[str, CheckResult]:
    """Probe the family cell afresh (faults are planted around this call) and run every check of the table the cell
    runs: the core checks, the generate paths and the family's own."""
    outcome, cell = _outcome(runner, model_type, cache), _cell(model_type, cache)
    results = family_checks.run_all_family(outcome.family, cell.spec.family, cell.tolerance)
    assert undocumented_details(results.values()) == []  # the report's schema documents every field a family cell writes
    quantized = cache not in ("dynamic", "static")
    assert ("generate" in results) == (not quantized) and ("beam" in results) == (cache in ("dynamic", *INT_KINDS)), sorted(results)
    return results


@pytest.fixture(scope="module")
def runner() -> CellRunner:
    return CellRunner()


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_generate_and_beam_run_on_every_family_and_pass_healthy(runner, model_type):
    results = _results(runner, model_type)
    failed = {name: result.message for name, result in results.items() if not result.passed}
    assert _unexplained(model_type, failed) == {}, failed
    assert results["generate"].measured == "8/8 equal", results["generate"].message
    assert "num_beams=3, 6 returned beams: the same beams" in results["beam"].message, results["beam"].message
    calls = results["between_calls"]
    if model_type == "whisper":  # its own generate(): the continuation contract is GenerationMixin's
        assert calls.measured == "not run" and "WhisperForConditionalGeneration has its own generate()" in calls.message, calls.message
    else:  # an encoder-decoder's continuation re-feeds its decoder prompt (model_matrix.yaml: a model bug with its repro);
        # a decoder-only family prompt is also given again left-padded
        assert calls.measured == ("1/1 differ" if model_type in ("t5", "t5gemma", "speech_to_text") else "0/2 differ"), calls.message
        assert "generate() of 4 tokens continued for 4 from the cache it returned" in calls.message, calls.message


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_static_family_cells_pass_healthy_with_static_layers_in_every_half(runner, model_type):
    """The static cache as generate(cache_implementation="static") builds it: an encoder-decoder's two halves are
    StaticCaches (the cross half sized to the encoder output), and every core, family and generate check passes; T5's
    fail only where generate()'s cache takes the encoder's 3 layers (model_matrix.yaml: a model bug with its repro)."""
    results = _results(runner, model_type, "static")
    failed = {name: result.message for name, result in results.items() if not result.passed}
    if model_type == "t5":
        assert failed.keys() == {"shapes", "cross_shapes"}, failed
        assert all("cache has 3 layers, the config has 2 decoder layers" in message for message in failed.values()), failed
    else:
        assert not failed, failed
    assert results["between_calls"].measured == "0/2 differ", results["between_calls"].message
    assert "(cache_implementation='static') and the GenerationConfig came back unchanged" in results["between_calls"].message
    outcome = runner.outcomes[_cell(model_type, "static").id]
    layers = {state.layer_class for step in outcome.record.steps for state in step.layers}
    assert layers and all(kind.startswith("Static") for kind in layers), layers
    if outcome.family.cross is not None:
        cross = {state.layer_class for step in outcome.family.cross.record.steps for state in step.layers}
        assert cross == {"StaticLayer"}, cross


def _codebook_results(runner: CellRunner, model_type: str, cache: str) -> tuple[CellOutcome, dict[str, CheckResult]]:
    """A codebook decoder's cell probed afresh and every check of its family run."""
    outcome = _outcome(runner, model_type, cache)
    return outcome, family_checks.run_all_family(outcome.family, TEXT_TO_AUDIO, _cell(model_type, cache).tolerance)


#: The labelled model bugs of the static codebook cells on their generate() (model_matrix.yaml, each with its repro).
CODEBOOK_STATIC_KNOWN = {"csm": "differs", "musicgen_melody": "KeyError: 'encoder_outputs'", "qwen2_5_omni": "for -: 'int' and 'dict'",
                         "qwen3_omni_moe": "with and without the cache differ"}


@pytest.mark.parametrize("model_type", CODEBOOK_STATIC)
def test_static_codebook_cells_decode_through_static_layers_and_generate_with_them(runner, model_type):
    """Bark (both causal stages), Dia (both halves), CSM (its backbone), MusicGen Melody (the decoder, its prepended conditioning too),
    SeamlessM4T's text-to-unit model, Higgs Audio and the Qwen Omni talkers decode through StaticLayers only and pass
    every check; codebook_generate asks generate() for the static cache and fails only where a labelled model bug makes
    it (CSM's and Qwen3-Omni's uncached generate(), MusicGen Melody's KeyError, Qwen2.5-Omni's talker mask arithmetic)."""
    outcome, results = _codebook_results(runner, model_type, "static")
    for record in (outcome.record, *(own.record for own in outcome.record.own_caches)):  # Bark's coarse stage too
        layers = {state.layer_class for step in record.steps for state in step.layers}
        assert layers == {"StaticLayer"}, layers
        assert record.max_cache_len is not None and record.max_cache_len >= record.steps[-1].seq_length
    failed = {name: result.message for name, result in results.items() if not result.passed}
    known = CODEBOOK_STATIC_KNOWN.get(model_type)
    assert {k: m for k, m in failed.items() if not (k == "codebook_generate" and known and known in m)} == {}, failed
    assert "cache_implementation=static" in results["codebook_generate"].message, results["codebook_generate"].message


def test_a_static_slot_fault_is_caught_on_a_codebook_cell_and_musicgen_runs_no_static_cell(runner):
    """A decoded token written one slot late fails the static Dia cell's parity and codebook_parity with the first K/V
    divergence named, and its generate(cache_implementation="static") (its prefix reuse too); MusicGen, whose generate() never builds a static
    cache, has no static cell (not applicable, with the reason)."""
    with planted("static_wrong_slot"):
        _, results = _codebook_results(runner, "dia", "static")
    failed = {name for name, result in results.items() if not result.passed}
    assert {"parity", "codebook_parity", "codebook_generate"} <= failed <= {"parity", "codebook_parity", "codebook_generate",
                                                                        "kv_parity", "prefix_reuse", "ragged"}, failed
    assert "first K/V divergence at layer" in results["parity"].message, results["parity"].message
    cell = _cell("musicgen", "static")
    runner.outcomes.pop(cell.id, None)
    outcome = runner.outcome(cell)
    assert outcome.not_applicable is not None and "never builds its cache from cache_implementation" in outcome.not_applicable


def test_a_static_sliding_window_with_an_image_in_the_prompt_is_crossed(runner):
    """Gemma 3's sliding layers in a static cache longer than their window, with the image's tokens in a prompt longer
    than the window: the sliding layers hold the window from the prefill on, the full-attention layers the whole."""
    results = _results(runner, "gemma3", "static")
    assert all(result.passed for result in results.values()), {n: r.message for n, r in results.items() if not r.passed}
    record = runner.outcomes[_cell("gemma3", "static").id].record
    window = runner._master.config.text_config.sliding_window
    assert record.max_cache_len > window and record.plan.prompt_length > window, (record.max_cache_len, window)
    stored = {state.layer_class: state.keys_shape[-2] for state in record.steps[-1].layers}
    assert stored == {"StaticSlidingWindowLayer": window, "StaticLayer": record.max_cache_len}, stored


@pytest.mark.parametrize(("fault", "model_type", "fails"), [
    ("static_wrong_slot", "llava", {"parity", "kv_parity", "generate", "crop", "prefix_reuse", "ragged"}),
    # t5's cross-attention half is static too: its encoder states land one slot late as well.
    ("static_wrong_slot", "t5", {"parity", "kv_parity", "prefix_reuse", "shapes", "cross_shapes", "ragged"}),
    # (and the static cell's window crossings, through its text-only prompt: a prompt holding the image fills the window)
    ("static_window_no_roll", "gemma3", {"parity", "kv_parity", "prefix_reuse", "window", "ragged"}),
])
def test_a_static_cache_fault_is_caught_and_located_on_a_family_cell(runner, fault, model_type, fails):
    """Faults of the static layers (a decoded token written one slot late; a full sliding window that does not roll)
    fail the static family cell's parity with the first K/V divergence named, and the paths that decode through the
    same layers; every other check of the cell passes, and the dynamic cell does not see them."""
    with planted(fault):
        static = _results(runner, model_type, "static")
        dynamic = _results(runner, model_type)
    assert not static["parity"].passed and "first K/V divergence at layer" in static["parity"].message, static["parity"].message
    assert {name for name, result in static.items() if not result.passed} == fails, {n: r.message for n, r in static.items() if not r.passed}
    assert _unexplained(model_type, {n: r.message for n, r in dynamic.items() if not r.passed}) == {}


@pytest.mark.parametrize("model_type", ["llava", "t5"])
def test_beam_search_that_never_reorders_the_cache_is_caught_on_a_family_cell(runner, model_type):
    """The causal path's fault, on a vision-language and an encoder-decoder cell (its self-attention half): only beam
    search reorders, so only the beam check fails: its beams part (llava), or the same beams come back with other
    scores (t5)."""
    with planted("beam_not_reordered"):
        results = _results(runner, model_type)
    failed = {name: result.message for name, result in results.items() if not result.passed}
    assert _unexplained(model_type, failed).keys() == {"beam"}, failed
    expected = {"llava": "suspect the cache reorder between steps", "t5": "same tokens, but beam scores differ by"}
    assert expected[model_type] in results["beam"].message, results["beam"].message


def test_a_cached_generate_that_loses_the_image_is_caught():
    """The generate() path's own fault: LLaVA's cached generate() prefills without the pixel values. The hand-driven
    decode keeps the image (parity, growth, shapes and bytes pass); generate() with and without the cache part, and so
    do the beams, the generate() calls through one instance (media_calls, whose calls build the cache too) and the
    ragged batch's cached generate() against its rows' own uncached ones."""
    with planted_family_fault("cached_generate_drops_the_image"):
        results = _results(CellRunner(), "llava")
    assert {name for name, result in results.items() if not result.passed} == {"generate", "beam", "media_calls", "ragged"}, results
    assert results["generate"].message.startswith("greedy tokens part at generated token 0"), results["generate"].message


#: per (model type, cache): the checks the kept cache fails beyond the healthy cell's.
KEPT_CACHE = {("llava", "static"): {"between_calls", "ragged"}, ("t5", "static"): {"between_calls", "ragged"},
              # the media_calls run before the generate check keeps the first cache: generate() meets it too, and so
              # does the chunked prefill's comparison with the plain generate()
              ("llava", "dynamic"): {"between_calls", "generate", "media_calls", "chunked_prefill", "ragged"}}


@pytest.mark.parametrize(("model_type", "cache"), sorted(KEPT_CACHE))
def test_a_cache_kept_between_generate_calls_is_caught_on_a_family_cell(runner, model_type, cache):
    """The causal path's fault on a vision-language and an encoder-decoder cell: generate() hands the cache it built, not
    reset, to the next greedy call of the same batch size. The decode loop and its hand-driven cache paths never call
    generate(); on static cells between_calls calls generate() again, and names the call that met the stale cache, and the
    ragged batch's generate() meets it too."""
    healthy = _failing(_results(runner, model_type, cache))
    with planted("generate_reuses_cache"):
        results = _results(runner, model_type, cache)
    assert _failing(results) - healthy == KEPT_CACHE[(model_type, cache)], {n: r.message for n, r in results.items() if not r.passed}
    message = results["between_calls"].message
    called = "generate() again with the same arguments" if cache == "static" else "a first generate()"
    assert message.startswith(called) and " raised " in message, message


#: fault -> (the cache of the cells it runs on, per model type: the checks it fails beyond the healthy cell's, and words
#: of the first one's message that locate it).
PATH_FAULTS = {
    # The crop rolls a (P+3)-token prefill back to P + 1 tokens, and the decode grows from there.
    "crop_one_short": ("dynamic", {"llava": ({"crop"}, "get_seq_length() trace [23, 24,"),
                                   "t5": ({"crop"}, "get_seq_length() trace [7, 8,")}),
    # With 2 rows the reversal is the rotation: only the identity shows it, at the first layer's keys.
    "static_reorder_reverses_rows": ("static", {
        model: ({"reorder"}, "reorder_cache(identity [0, 1]) changed the prefilled cache: layer 0 (") for model in ("llava", "t5")}),
    "cross_half_not_reordered": ("static", {"t5": ({"reorder"}, "left the cache unlike its rows moved by hand: layer 0 "
                                                               "(cross-attention keys)")}),
    "static_copy_shares_storage": ("static", {
        model: ({"prefix_reuse"}, "the original prefix cache's layer 0 (StaticLayer) keys changed while its copy was extended")
        for model in ("llava", "t5")}),
    # A multi-token forward on a filled cache: the prefix's extend, the chunks after the first (llava's first chunk holds
    # the image whole, its second the text after it). (t5's chunked_prefill fails on the healthy cell already: its chunked
    # generate() meets the encoder-mask bug)
    "extend_keeps_last_only": ("dynamic", {"llava": ({"prefix_reuse", "chunked_prefill"},
                                                     "after the extend the copy's cache differs from one prefill"),
                                           "t5": ({"prefix_reuse"}, "after the extend the copy's cache differs from one prefill")}),
}


@pytest.mark.parametrize(("fault", "model_type"), [(fault, model) for fault, (_, models) in PATH_FAULTS.items() for model in models])
def test_a_cache_path_fault_is_caught_and_located_on_a_family_cell(runner, fault, model_type):
    """Each cache path's own fault, planted in transformers' cache code, on a vision-language (llava) and an encoder-decoder
    (t5) cell: exactly the checks that reach it fail (beside what the healthy cell fails), the first located; the same
    paths pass on the healthy cell."""
    cache, models = PATH_FAULTS[fault]
    expected, words = models[model_type]
    healthy = _results(runner, model_type, cache)
    with planted_family_fault(fault) if fault in FAMILY_FAULTS else planted(fault):
        results = _results(runner, model_type, cache)
    failing = {name for name, result in results.items() if not result.passed} - _failing(healthy)
    assert failing == expected, {name: results[name].message for name in failing | expected}
    first = next(name for name in results if name in expected)
    assert words in results[first].message, results[first].message
    assert all(healthy[name].passed for name in expected), {name: healthy[name].message for name in expected}


#: (fault, model type, cache) -> the checks it fails beyond the healthy cell's, and words of the first one's message.
DECODE_FAULTS = {
    # Only a prompt shorter than the window fills the layer during the decode: t5gemma's decoder prompt crossing, a
    # vision-language model's text-only prompt (its image fills more than the shrunk window).
    ("dynamic_window_stale_before_full", "t5gemma", "dynamic"): ({"window"}, "prompt 2 (shorter than window 4): "),
    ("static_window_late_before_full", "t5gemma", "static"): ({"window"}, "prompt 2 (shorter than window 4): "),
    ("dynamic_window_stale_before_full", "gemma3", "dynamic"): ({"text_only"}, "window: prompt 2 (shorter than window 4): "),
    # A mask one key wider than the K/V attention gets: sdpa skips the mask of a one-token decode, the logits survive
    # (llava's text-only prompt decodes through the same loop: its growth, in the text_only check, fails too; and its
    # left-padded generate() call, whose padded mask sdpa cannot skip, raises on the extra column in between_calls).
    ("mask_one_wide", "llava", "dynamic"): ({"growth", "text_only", "between_calls", "ragged"}, "get_mask_sizes(1) advertises kv_length"),
    ("mask_one_wide", "t5", "dynamic"): ({"growth"}, "get_mask_sizes(1) advertises kv_length"),
}


@pytest.mark.parametrize(("fault", "model_type", "cache"), sorted(DECODE_FAULTS))
def test_a_window_or_mask_fault_of_the_one_decode_loop_is_caught_on_a_family_cell(runner, fault, model_type, cache):
    """The family cells decode through the causal probe's own loop: a sliding layer that goes wrong before it is full is
    caught by the window crossings (an encoder-decoder's decoder prompt, a vision-language model's text-only prompt), a
    mask sized for other keys than attention receives by the mask-size watch of every decode step; nothing else moves."""
    expected, words = DECODE_FAULTS[(fault, model_type, cache)]
    healthy = _results(runner, model_type, cache)
    with planted(fault):
        results = _results(runner, model_type, cache)
    failing = _failing(results) - _failing(healthy)
    assert failing == expected, {name: results[name].message for name in failing | expected}
    assert all(healthy[name].passed for name in expected), {name: healthy[name].message for name in expected}
    first = next(name for name in results if name in expected)
    assert words in results[first].message, results[first].message


def test_family_cells_compare_their_stored_kv_and_mask_sizes_at_every_step(runner):
    """kv_parity and the mask-size watch reach every family through the one decode loop: each layer's K/V against one
    fresh pass, each decode step's get_mask_sizes against the K/V update() returned (the self-attention half)."""
    for model_type in ("llava", "t5", "whisper", "qwen2_audio"):
        results, record = _results(runner, model_type), runner.outcomes[_cell(model_type).id].record
        assert record.kv_parity is not None and record.kv_parity.kv_layers > 0 and results["kv_parity"].passed, results["kv_parity"].message
        assert record.mask_compared == record.plan.decode_steps * record.kv_parity.kv_layers, (model_type, record.mask_compared)
        assert "get_mask_sizes = the K/V update() returned at every decode step" in results["growth"].message


def test_a_media_prompt_prefills_in_chunks_with_its_media_whole_in_the_first(runner):
    """A vision-language prompt's hand-driven chunks: the first holds the image's placeholders whole (and the processor's
    ids closing them), later ones the text after it, each equal to one prefill; generate(prefill_chunk_size=...) splits
    the image (its features sliced per chunk, transformers 5.23+) and picks the plain generate()'s tokens."""
    for model_type, closing in (("llava", 0), ("qwen2_vl", 1)):  # Qwen2-VL's processor closes the image with vision_end
        results, outcome = _results(runner, model_type), runner.outcomes[_cell(model_type).id]
        chunked = outcome.record.chunked
        assert chunked is not None and len(chunked.steps) >= 2 and results["chunked_prefill"].passed, results["chunked_prefill"].message
        last = int(re.search(r"image tokens at positions \d+-(\d+)", outcome.explanation).group(1))
        assert chunked.steps[0].length == last + 1 + closing > chunked.chunk_size, (chunked.steps, outcome.explanation)
        assert chunked.generate is not None and chunked.generate.first_divergence is None, chunked.generate


def test_a_left_padded_media_prompt_is_compared_with_its_unpadded_run(runner):
    """between_calls also gives a decoder-only family cell's own prompt (its image or audio) 3 masked pad columns on the
    left, as a processor pads a batch: the tokens must be the unpadded run's. Healthy llava and qwen2_audio pass it;
    planted ``left_pads_attended`` (LLaVA's generate() attends to the pad columns) fails exactly between_calls there,
    naming the padded call."""
    padded = "the cell's prompt with 3 extra masked pad columns on the left, after the calls before it"
    for model_type in ("llava", "qwen2_audio"):
        results = _results(runner, model_type)
        record = runner.outcomes[_cell(model_type).id].record
        assert record.calls is not None and padded in record.calls.checked, record.calls
        assert results["between_calls"].passed, results["between_calls"].message
    healthy = _results(runner, "llava")
    with planted_family_fault("left_pads_attended"):
        results = _results(runner, "llava")
    assert _failing(results) - _failing(healthy) == {"between_calls", "ragged"}, {n: r.message for n, r in results.items() if not r.passed}
    assert f"{padded}: tokens part from its unpadded generate()" in results["between_calls"].message


@pytest.mark.parametrize(("model_type", "cache"), [("llava", "dynamic"), ("llava", "static"), ("qwen2_vl", "dynamic"),
                                                   ("qwen2_audio", "static")])
def test_a_ragged_batch_of_media_prompts_matches_each_rows_own_run(runner, model_type, cache):
    """A decoder-only family cell's prompt batched with a shorter text in row 1, left-padded and masked as a processor
    pads it, through generate(): each row's logits at every step against its own unpadded uncached run, growth by one per
    forward, every layer's shape at the end (a static cache sized as generate() sizes it). Planted ``left_pads_attended``
    (the pad columns attended) fails ragged at the padded row and decode step 0 (the prefill), the other checks as before."""
    results = _results(runner, model_type, cache)
    path = runner.outcomes[_cell(model_type, cache).id].record.paths["ragged"]
    assert results["ragged"].passed, results["ragged"].message
    assert "rows [0, 1] tokens shorter after the media" in results["ragged"].message
    assert len(path.seq_lengths) == len(path.step_max_abs_delta) == 8 and path.seq_lengths[0] == path.first_length
    if (model_type, cache) != ("llava", "dynamic"):  # a static cell's generate() builds its 4-D masks before the hook
        return
    healthy = results
    with planted_family_fault("left_pads_attended"):
        results = _results(runner, model_type, cache)
    assert "ragged" in _failing(results) - _failing(healthy), results["ragged"].message
    assert _failing(results) - _failing(healthy) <= {"ragged", "between_calls"}, {n: r.message for n, r in results.items() if not r.passed}
    assert "cached logits leave one uncached pass over each row's own unpadded prompt and tokens from decode step 0" in results["ragged"].message
    assert "batch row 1" in results["ragged"].message


def test_a_ragged_encoder_batch_matches_each_rows_own_run_and_a_dropped_encoder_mask_is_caught(runner):
    """An encoder-decoder's text input batched with a shorter row, right-padded and masked as its tokenizer pads it:
    each row's logits against one uncached pass over its own unpadded encoder input (t5, dynamic and static). Planted
    ``decode_steps_drop_the_encoder_mask`` (T5's decode steps read the encoder output unmasked) fails ragged alone, at the
    padded row from decode step 1: the prefill keeps the mask, and no other path pads an encoder row it compares."""
    healthy = {cache: _results(runner, "t5", cache) for cache in ("dynamic", "static")}
    for results in healthy.values():
        assert results["ragged"].passed, results["ragged"].message
        assert "the encoder's text input batched with rows [0, 1] tokens shorter, right-padded" in results["ragged"].message
    with planted_family_fault("decode_steps_drop_the_encoder_mask"):
        results = _results(runner, "t5")
    assert _failing(results) - _failing(healthy["dynamic"]) == {"ragged"}, {n: r.message for n, r in results.items() if not r.passed}
    message = results["ragged"].message
    assert "own unpadded prompt and tokens from decode step 1" in message and "batch row 1" in message, message


def test_a_ragged_audio_batch_matches_the_padded_batchs_own_pass_and_a_dropped_encoder_mask_is_caught(runner):
    """A speech encoder's input batched with a row half as long, zero-padded on the right and masked as its feature
    extractor pads it: each row's logits against one uncached pass over the padded batch (speech_to_text, dynamic and
    static). Planted ``decode_steps_drop_the_encoder_mask`` (Speech2Text's decode steps read the encoder output unmasked)
    fails ragged alone, at the padded row from decode step 1; Whisper, padded to 30 s unmasked, is not batched so."""
    healthy = {cache: _results(runner, "speech_to_text", cache) for cache in ("dynamic", "static")}
    for results in healthy.values():
        assert results["ragged"].passed, results["ragged"].message
        assert "the encoder's audio input (input_features) batched with rows [0, 16] frames shorter, right-padded" in \
            results["ragged"].message
    with planted_family_fault("decode_steps_drop_the_encoder_mask"):
        results = _results(runner, "speech_to_text")
    assert _failing(results) - _failing(healthy["dynamic"]) == {"ragged"}, {n: r.message for n, r in results.items() if not r.passed}
    message = results["ragged"].message
    assert "padded batch and each row's tokens from decode step 1" in message and "batch row 1" in message, message
    _results(runner, "whisper")
    assert "Whisper's features" in (runner.outcomes[_cell("whisper").id].record.paths["ragged"].not_applicable or "")


#: A codebook decoder's ragged batch, and the planted fault that batch exists to catch there: the text conditioning's
#: mask dropped by the decoder's one-position forwards (its prefill of the start frame too), or a left-padded prompt's
#: mask made all ones (Higgs Audio's processor pads on the left).
CODEBOOK_RAGGED = {"musicgen": ("decode_steps_drop_the_encoder_mask", "right-padded", "from decode step 0"),
                   "dia": ("decode_steps_drop_the_encoder_mask", "right-padded", "from decode step 0"),
                   "higgs_audio_v2": ("left_pads_attended", "left-padded", "from decode step 0")}


@pytest.mark.parametrize("model_type", sorted(CODEBOOK_RAGGED))
def test_a_codebook_decoders_ragged_text_matches_each_rows_own_generate_and_an_attended_pad_is_caught(runner, model_type):
    """A codebook decoder's text batched with a shorter row, padded and masked as its processor pads it (MusicGen's and
    Dia's conditioning on the right, Higgs Audio's prompt on the left, before its reference audio), through generate()
    (MusicGen with its published guidance: the cache holds 2 rows a prompt): each row's scores against one uncached
    generate() of its own unpadded text. The planted fault (``CODEBOOK_RAGGED``: the pad columns attended) fails ragged
    alone, at the padded row from decode step 0: the unpadded paths read an all-ones mask. MusicGen Melody, whose text
    is prepended to its codes, takes no such batch."""
    fault, padded, words = CODEBOOK_RAGGED[model_type]
    caches = ("dynamic", "static") if model_type in CODEBOOK_STATIC else ("dynamic",)
    healthy = {cache: _codebook_results(runner, model_type, cache)[1] for cache in caches}
    for results in healthy.values():
        assert results["ragged"].passed, results["ragged"].message
        assert f"batched with rows [0, 2] tokens shorter, {padded}" in results["ragged"].message
        assert ("classifier-free guidance" in results["ragged"].message) == (model_type == "musicgen")
    with planted_family_fault(fault):
        _, results = _codebook_results(runner, model_type, "dynamic")
    assert _failing(results) - _failing(healthy["dynamic"]) == {"ragged"}, {n: r.message for n, r in results.items() if not r.passed}
    message = results["ragged"].message
    assert f"own unpadded text {words}" in message and "batch row 1" in message, message
    if model_type == "musicgen":
        outcome, _ = _codebook_results(runner, "musicgen_melody", "dynamic")
        assert "MusicGen Melody prepends it" in (outcome.record.paths["ragged"].not_applicable or "")


def test_a_ragged_batch_drops_text_after_the_media_and_pads_every_per_position_input():
    """``GenerateInputs.ragged``: row r loses the last r tokens of its text columns and gets r masked pad columns on the
    left (the ids the pad id, the mask and other per-position inputs 0); ``shortened(r)`` is that row unpadded, and the
    media (not per position) is left as it is."""
    import torch

    from kvconform.probe.generate_inputs import GenerateInputs

    ids = torch.tensor([[5, 6, 9, 9, 7, 8, 3], [15, 16, 9, 9, 17, 18, 3]])  # 9: placeholders, 3: a closing id
    types = (ids == 9).long()
    pixels = torch.ones(2, 3, 4, 4)
    given = GenerateInputs({"input_ids": ids, "attention_mask": torch.ones_like(ids), "mm_token_type_ids": types,
                            "pixel_values": pixels}, 6, ragged_columns=(4, 6))
    ragged = given.ragged([0, 2], pad=0)
    assert ragged is not None
    assert ragged.kwargs["input_ids"].tolist() == [[5, 6, 9, 9, 7, 8, 3], [0, 0, 15, 16, 9, 9, 3]]
    assert ragged.kwargs["attention_mask"].tolist() == [[1] * 7, [0, 0, 1, 1, 1, 1, 1]]
    assert ragged.kwargs["mm_token_type_ids"].tolist() == [[0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0]]
    assert ragged.kwargs["pixel_values"] is pixels and ragged.prompt_length == 6
    shortened = given.shortened(2)
    assert shortened.kwargs["input_ids"].tolist() == [[5, 6, 9, 9, 3], [15, 16, 9, 9, 3]] and shortened.prompt_length == 4
    assert GenerateInputs({"input_ids": ids}, 7).ragged([0, 1], pad=0) is None  # no text columns: nothing to drop


def test_a_ragged_audio_batch_zero_pads_and_masks_the_last_row_half_as_long():
    """``GenerateInputs.ragged`` on an audio input: the last row keeps its first half of the frames, right-padded with
    zero frames, and gets an attention mask 0 there (the feature extractor's); the decoder prompt is left as it is."""
    import torch

    from kvconform.probe.generate_inputs import GenerateInputs

    features, prompt = torch.arange(1, 25, dtype=torch.float32).reshape(2, 4, 3), torch.tensor([[7, 8], [7, 9]])
    given = GenerateInputs({"input_features": features, "decoder_input_ids": prompt}, 2, sequence_key="decoder_input_ids",
                           ragged_columns=(0, 4), ragged_key="input_features", pad_side="right")
    drops = given.row_drops()
    assert drops == [0, 2]
    ragged = given.ragged(drops, pad=0)
    assert ragged is not None
    assert torch.equal(ragged.kwargs["input_features"][0], features[0])
    assert torch.equal(ragged.kwargs["input_features"][1, :2], features[1, :2])
    assert not ragged.kwargs["input_features"][1, 2:].any()
    assert ragged.kwargs["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert ragged.kwargs["decoder_input_ids"] is prompt


def test_generate_slicing_the_image_features_per_chunk_wrongly_is_caught(runner):
    """generate()'s chunked prefill handing a chunk another part of the image's features (the rows reversed) fails
    chunked_prefill alone on a vision-language cell, naming the generated token where it parts; the hand-driven chunks
    and every other check pass."""
    if not hasattr(generation_utils, "_slice_mm_encoder_output"):
        pytest.skip("this transformers hands no pre-encoded features to a chunk (5.23+ does)")
    healthy = _results(runner, "llava")
    with planted_family_fault("chunk_features_reversed"):
        results = _results(runner, "llava")
    assert _failing(results) - _failing(healthy) == {"chunked_prefill"}, {n: r.message for n, r in results.items() if not r.passed}
    assert "generate(prefill_chunk_size=" in results["chunked_prefill"].message
    assert "greedy tokens part from the plain cached generate()'s" in results["chunked_prefill"].message


def _failing(results: dict[str, CheckResult]) -> set[str]:
    return {name for name, result in results.items() if not result.passed}


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_the_cache_paths_run_on_every_family(runner, model_type):
    """crop, prefix_reuse, ragged and chunked_prefill on dynamic cells, reorder, prefix_reuse, ragged and chunked_prefill
    on static ones, through the same code and checks as causal LMs; an encoder-decoder's static cache refuses crop, as
    transformers does (EncoderDecoderCache.crop), a prefix-LM's bidirectional prompt is not split, and Whisper's
    features, which its feature extractor pads to 30 s unmasked, are not batched ragged."""
    for cache, paths in (("dynamic", {"crop", "prefix_reuse", "ragged"}), ("static", {"crop", "prefix_reuse", "reorder", "ragged"})):
        results, record = _results(runner, model_type, cache), runner.outcomes[_cell(model_type, cache).id].record
        encoder_decoder = MODELS[model_type] in (SEQ2SEQ, SPEECH_SEQ2SEQ)
        ran = {name for name, path in record.paths.items() if not path.not_applicable}
        refused = {name: path.not_applicable for name, path in record.paths.items() if path.not_applicable}
        if encoder_decoder and cache == "static":  # refused by check_dynamic_cache, or first by is_croppable (T5Gemma's sliding)
            assert "crop" in refused and ("only defined for dynamic cache" in refused["crop"] or "not croppable" in refused["crop"]), refused
        assert ran | set(refused) == paths, (ran, refused)
        assert record.chunked is not None and record.chunked.steps, record.chunked  # every family prefills in chunks
        failed = {name: results[name].message for name in ran | {"chunked_prefill"} if name in results and not results[name].passed}
        assert _unexplained(model_type, failed) == {}, failed


@pytest.mark.parametrize("model_type", ["llava", "qwen2_audio"])
def test_the_fp8_cache_runs_on_multimodal_cells_judged_by_its_design(runner, model_type):
    """Vision- and audio-language cells run QuantizedCache(backend="fp8") as generate(cache_implementation="quantized")
    builds it, judged against its design as causal cells are: healthy, every check passes; a layer that quantizes each
    new token with its own scale (dequantized with the frozen one) fails quantized_kv, located past the prompt, and parity."""
    healthy = _results(runner, model_type, "quantized")
    assert not {name for name, result in healthy.items() if not result.passed}, healthy
    assert {"quantized_kv", "reorder", "between_calls"} <= healthy.keys() and "fp8 design" in healthy["parity"].message
    prompt = runner.outcomes[_cell(model_type, "quantized").id].record.plan.prompt_length
    with planted("fp8_scale_drift"):
        results = _results(runner, model_type, "quantized")
    failed = {name: result.message for name, result in results.items() if not result.passed}
    assert failed.keys() == {"quantized_kv", "parity"}, failed
    assert f"position {prompt} (keys): the dequantized cache differs from the fp8 design" in failed["quantized_kv"], failed



#: (model type, cache) -> per planted fault, the checks it fails (the causal llama-int cells' sets, through the adapter).
INT_FAULTS = {"int_residual_flushed_late": ({"parity", "bytes", "quantized_kv", "reorder", "beam"}, "after decode step 3 the cache holds"),
              "int_block_other_scale": ({"parity", "quantized_kv", "reorder", "beam"}, "(keys): the stored packed values with their scale")}


@pytest.mark.parametrize(("model_type", "cache", "fault"), [("llava", "hqq-int4", "int_residual_flushed_late"),
                                                            ("qwen2_audio", "quanto-int2", "int_block_other_scale")])
def test_the_integer_caches_run_on_multimodal_cells_judged_by_their_design(runner, model_type, cache, fault):
    """quanto and HQQ caches on vision- and audio-language cells, built as generate(cache_implementation="quantized",
    cache_config=...) builds them and judged against the residual design through the family's forwards (the causal
    cells' design reference, one code): healthy, every check passes at Δ 0 against the design; a residual flushed one
    step late, or a group stored with its neighbour's scale, fails the same checks as on a causal cell, located."""
    healthy = _results(runner, model_type, cache)
    assert not _failing(healthy), {n: r.message for n, r in healthy.items() if not r.passed}
    assert {"quantized_kv", "reorder", "between_calls", "beam"} <= healthy.keys()
    assert "design reference (residual_length" in healthy["parity"].message and healthy["parity"].measured == "0.00e+00", healthy["parity"].message
    expected, words = INT_FAULTS[fault]
    with planted(fault):
        results = _results(runner, model_type, cache)
    assert _failing(results) == expected, {n: r.message for n, r in results.items() if not r.passed}
    located = "bytes" if "bytes" in expected else "quantized_kv"
    assert words in results[located].message, results[located].message


#: per model type: the checks the planted prefill split fails beyond the healthy cell's; llava's media_calls compares
#: each generate() call, whose first step is a cached prefill into an empty cache, with an uncached pass.
PREFILL_SPLIT = {"llava": {"parity", "text_only", "media_calls", "chunked_prefill", "ragged"}, "t5": {"parity", "ragged"}}


@pytest.mark.parametrize("model_type", sorted(PREFILL_SPLIT))
def test_a_split_at_the_prefill_is_not_blamed_on_a_cache_read_on_a_family_cell(runner, model_type):
    """The model's use_cache=True path shifts a prefill's logits (LLaVA with its image, T5's decoder prompt with the
    encoder output; no cache entry read, none wrong): parity fails at the prefill only, diagnosed ``prefill differs`` by
    the causal probe's own code, with the cached and plain-cache prefills' distances; so does the text-only prompt's
    parity (llava). The chunked prefill, whose reference is one prefill into an empty cache, is diagnosed the same;
    what else the healthy cell fails (t5's labelled model bugs) fails with the same words."""
    healthy = _results(runner, model_type)
    with planted("cached_prefill_shift"):
        results = _results(runner, model_type)
    failed = _failing(results)
    assert failed - _failing(healthy) == PREFILL_SPLIT[model_type], {name: results[name].message for name in failed}
    parity = results["parity"]
    deltas, limit = parity.details["step_max_abs_delta"], parity.details["tolerance"]
    assert [k for k, delta in enumerate(deltas) if delta > limit] == [0] and 0 not in parity.details["argmax_disagree_steps"]
    assert parity.details["diagnosis"] == "prefill differs", parity.message
    assert parity.message.startswith("[prefill differs] cached logits diverge from the uncached reference at decode step 0 "
                                     f"(prefill): |Δ| {deltas[0]:.3g}"), parity.message
    assert (f"already disagree at the prefill (|Δ| {deltas[0]:.3g} > {limit:.3g}), before any cache entry was read, so this "
            "is not a cache-read fault: the model computes differently with use_cache=True (a prefill into an empty plain "
            f"DynamicCache differs by {deltas[0]:.3g} as well); either side may be the broken one") in parity.message
    assert "first K/V divergence" not in parity.message and "stored K/V at the end of the decode" not in parity.message
    if model_type == "llava":
        assert "text-only prompt: parity: [prefill differs]" in results["text_only"].message, results["text_only"].message
    chunked = results["chunked_prefill"]  # t5's healthy cell fails it already (its labelled chunked generate())
    assert chunked.details["diagnosis"] == "prefill differs", chunked.message
    assert healthy["chunked_prefill"].passed or healthy["chunked_prefill"].details["diagnosis"] == "cache fault"
    assert "its reference is one prefill into an empty cache, and the main decode's prefill differs already" in chunked.message
    ragged = results["ragged"]  # generate()'s prefill of the padded batch, against uncached generate() of each row
    assert ragged.details["diagnosis"] == "prefill differs" and "from decode step 0" in ragged.message, ragged.message
    assert _unexplained(model_type, {name: results[name].message for name in failed - PREFILL_SPLIT[model_type]}) == {}
    assert all(healthy[name].passed for name in PREFILL_SPLIT[model_type])


#: Every codebook decoder the text-to-audio sweep drives (its driver: delay-pattern rows, a depth decoder's frames, Bark's
#: stages, inline audio frames, a talker fed by a thinker, a text-to-unit decoder).
CODEBOOK_TYPES = ("bark", "csm", "dia", "higgs_audio_v2", "musicgen", "musicgen_melody", "qwen2_5_omni", "qwen3_omni_moe",
                  "seamless_m4t")


@pytest.mark.parametrize("model_type", CODEBOOK_TYPES)
def test_the_cache_paths_run_on_every_codebook_decoder(runner, model_type):
    """crop, prefix_reuse and the chunked prefill on dynamic cells, reorder on static ones, through each codebook driver's
    forwards (positions already decoded fed again as the decode fed them: the chosen frames, the reply embeddings, the
    prompt's embeddings), judged by the causal checks and passing; Bark's coarse stage runs them on its own cache too.
    Not applicable, with the reason: every path where the model prepends a conditioning prefix (MusicGen Melody), crop
    of a static encoder-decoder cache (transformers refuses it), a prompt too short for two chunks (SeamlessM4T's units).
    between_calls makes the cached generate() again and passes, where the first call runs (the labelled static calls
    of MusicGen Melody and Qwen2.5-Omni raise), and continues Higgs Audio's dynamic one."""
    for cache in ("dynamic", "static") if model_type in CODEBOOK_STATIC else ("dynamic",):
        outcome, results = _codebook_results(runner, model_type, cache)
        record = outcome.record
        ragged = record.paths.pop("ragged")  # a padded text batch: MusicGen's, Dia's, Higgs Audio's (their own test above)
        assert (ragged.not_applicable is None) == (model_type in CODEBOOK_RAGGED), ragged.not_applicable
        ran = {name for name, path in record.paths.items() if not path.not_applicable}
        refused = {name: path.not_applicable for name, path in record.paths.items() if path.not_applicable}
        assert ran | set(refused) == ({"crop", "prefix_reuse"} if cache == "dynamic" else {"crop", "prefix_reuse", "reorder"})
        if model_type == "musicgen_melody":
            assert ran == set() and "prepends a conditioning prefix" in (record.chunked.not_applicable or ""), refused
        elif cache == "static" and model_type in ("dia", "seamless_m4t"):
            assert set(refused) == {"crop"} and "only defined for dynamic cache" in refused["crop"], refused
        else:
            assert refused == {}, refused
        if model_type == "bark":
            assert set(record.own_caches[0].record.paths) == ran
        chunked = model_type not in ("musicgen_melody", "seamless_m4t")
        assert bool(record.chunked is not None and record.chunked.steps) == chunked, record.chunked
        assert {name: results[name].message for name in ran | {"chunked_prefill", "between_calls"}
                if name in results and not results[name].passed} == {}
        continued = (model_type, cache) == ("higgs_audio_v2", "dynamic")  # its own test below
        made = record.calls is not None and record.calls.compared == 1 + continued
        assert made or (cache, model_type) in {("static", "musicgen_melody"), ("static", "qwen2_5_omni")}, record.calls
        assert not made or "generate() again through the same instance" in results["between_calls"].message


#: (fault, model type, cache) -> the checks it fails beyond the healthy cell's, and words of the first one's message.
CODEBOOK_PATH_FAULTS = {
    ("crop_one_short", "musicgen", "dynamic"): ({"crop"}, "get_seq_length() trace ["),
    # CSM's driver finds the frames to feed again by get_seq_length(): one position too many names them
    ("crop_one_short", "csm", "dynamic"): ({"crop"}, "where the cache's get_seq_length() puts the ids"),
    ("static_reorder_reverses_rows", "higgs_audio_v2", "static"): ({"reorder"}, "reorder_cache(identity [0, 1]) changed"),
    ("static_reorder_reverses_rows", "qwen3_omni_moe", "static"): ({"reorder"}, "reorder_cache(identity [0, 1]) changed"),
    ("static_copy_shares_storage", "dia", "static"): ({"prefix_reuse"}, "keys changed while its copy was extended"),
    ("static_reorder_reverses_rows", "bark", "static"): ({"reorder"}, "reorder_cache(identity [0, 1]) changed"),
    # Bark's static caches, both stages (its generate()'s too): every check that decodes through them, located
    ("static_wrong_slot", "bark", "static"): ({"parity", "kv_parity", "prefix_reuse", "crop", "codebook_parity", "codebook_generate"},
                                              "[cache fault] cached logits diverge from the uncached reference at decode step 1"),
    ("extend_keeps_last_only", "bark", "dynamic"): ({"prefix_reuse", "chunked_prefill"},
                                                    "after the extend the copy's cache differs from one prefill"),
    ("extend_keeps_last_only", "qwen2_5_omni", "dynamic"): ({"prefix_reuse", "chunked_prefill"},
                                                            "after the extend the copy's cache differs from one prefill"),
}


@pytest.mark.parametrize(("fault", "model_type", "cache"), sorted(CODEBOOK_PATH_FAULTS))
def test_a_cache_path_fault_is_caught_and_located_on_a_codebook_decoder(runner, fault, model_type, cache):
    """Each cache path's own fault, planted in transformers' cache code, on codebook decoders of four drivers: exactly
    the checks that reach it fail, the first located; they pass on the healthy cell."""
    expected, words = CODEBOOK_PATH_FAULTS[(fault, model_type, cache)]
    _, healthy = _codebook_results(runner, model_type, cache)
    with planted_family_fault(fault) if fault in FAMILY_FAULTS else planted(fault):
        _, results = _codebook_results(runner, model_type, cache)
    failing = _failing(results) - _failing(healthy)
    assert failing == expected, {name: results[name].message for name in failing | expected}
    first = next(name for name in results if name in expected)
    assert words in results[first].message, results[first].message
    assert all(healthy[name].passed for name in expected), {name: healthy[name].message for name in expected}


@pytest.mark.parametrize(("model_type", "cache"), [("dia", "dynamic"), ("higgs_audio_v2", "dynamic"), ("qwen2_5_omni", "dynamic"),
                                                   ("musicgen_melody", "dynamic")])
def test_a_cache_kept_between_generate_calls_is_caught_on_a_codebook_decoder(runner, model_type, cache):
    """generate() that hands its next call the cache it built (not reset) fails between_calls on codebook decoders whose
    generate() prepares its cache through GenerationMixin: the second call's codes or scores leave the first's, or it
    raises on the stale cache; codebook_generate, whose uncached call builds none, passes (Dia's and Higgs Audio's ragged
    batch, a cached call after those, meets the stale cache too)."""
    _, healthy = _codebook_results(runner, model_type, cache)
    with planted("generate_reuses_cache"):
        _, results = _codebook_results(runner, model_type, cache)
    also = {"ragged"} if model_type in CODEBOOK_RAGGED else set()
    assert _failing(results) - _failing(healthy) == {"between_calls"} | also, {name: results[name].message for name in _failing(results)}
    assert "generate() again through the same instance with the same arguments" in results["between_calls"].message
    assert healthy["between_calls"].passed, healthy["between_calls"].message


def test_higgs_audios_generate_continued_from_its_returned_cache_gives_the_one_calls_codes_and_a_refed_sequence_is_caught(runner):
    """Higgs Audio's generate() of 4 frames, continued for 4 from the cache it returned (given the returned sequences,
    audio_sequences and the audio mask extended, as transformers' continuation test gives them), returns the one 8-frame
    call's codes and scores. Planted ``continuation_refeeds_sequence`` (the continued call's first forward gets the whole
    sequence again) fails between_calls alone, naming the continued call."""
    _, healthy = _codebook_results(runner, "higgs_audio_v2", "dynamic")
    checked = healthy["between_calls"].details["checked"]
    assert healthy["between_calls"].passed and any("4 frames continued for 4 from the cache it returned: codes [2, " in c for c in checked), checked
    with planted("continuation_refeeds_sequence"):
        _, results = _codebook_results(runner, "higgs_audio_v2", "dynamic")
    assert _failing(results) - _failing(healthy) == {"between_calls"}, {n: r.message for n, r in results.items() if not r.passed}
    message = results["between_calls"].message
    assert "generate() of 4 frames continued for 4 from the cache it returned: generate() continued for 4 frames" in message, message


@pytest.mark.parametrize("model_type", ["llava", "qwen2_audio"])
def test_assisted_decoding_runs_on_a_media_prompt_and_a_crop_that_keeps_rejected_drafts_is_caught(runner, model_type):
    """A vision- and an audio-language cell run assisted generate() on a one-row media prompt (the family's adapter):
    all three drafters return greedy's tokens within the parity limit, and the assistants' drafts are rejected (the
    assistant's generate() drafts without the media: generation/utils.py _prefill(is_first_iteration=not is_assistant)
    drops mm_encoder_outputs); planted, a crop that keeps the rejected drafts fails assisted only, located at the
    forward after the crop."""
    outcome = _outcome(runner, model_type, assisted=True)
    record = outcome.record.extras["assisted"]
    healthy = family_checks.run_all_family(outcome.family, MODELS[model_type], TOLERANCES["float32"])
    assert healthy["assisted"].passed, healthy["assisted"].message
    assert [run.drafter for run in record.runs] == ["self", "random", "prompt_lookup"]
    assert len(record.prompt) > 6 and outcome.family.assisted_inputs is not None
    assert sum(next(run for run in record.runs if run.drafter == "self").rejected) > 0, healthy["assisted"].message
    with planted("crop_skips_verified_drafts"):
        faulty = _outcome(runner, model_type, assisted=True)
    results = family_checks.run_all_family(faulty.family, MODELS[model_type], TOLERANCES["float32"])
    assert _failing(results) - _failing(healthy) == {"assisted"}, {name: results[name].message for name in _failing(results)}
    assert "[cache fault]" in results["assisted"].message and "the crop before it left +3 columns" in results["assisted"].message


def test_assisted_decoding_is_not_applicable_where_generate_hands_the_image_to_its_language_model(runner):
    """BLIP-2's own generate() takes the image as a required argument and calls its language model's generate() with
    embeddings: the assisted path is not applicable, with the reason and the source line."""
    MODELS.setdefault("blip-2", VISION_LANGUAGE)
    outcome = _outcome(runner, "blip-2", assisted=True)
    reason = outcome.record.extras["assisted"].not_applicable
    assert reason is not None and "Blip2ForConditionalGeneration.generate() (modeling_blip_2.py:" in reason, reason
    assert "missing 'pixel_values'" in reason

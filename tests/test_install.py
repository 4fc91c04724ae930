"""kvconform installed like the pytest plugins people know: a wheel built from this checkout, installed into a fresh
venv, checks a checkpoint in a folder outside the checkout.

The venv reuses this environment's packages instead of downloading them: it is made without pip, a ``.pth`` file
in its site-packages lists this interpreter's site-packages (their own ``.pth`` files are not processed, so the
checkout's editable kvconform stays out; its dist-info is still visible, with no ``pytest11`` entry of its own, or one
of the same name, which pytest loads once), and this environment's pip installs the wheel with ``--python``.
Subprocesses run without ``PYTHONPATH``, so only the wheel's kvconform can be imported outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import save_llama

ROOT = Path(__file__).resolve().parents[1]
#: What a wheel is built from (git-ignored outputs such as __pycache__ are left behind).
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "model_matrix.yaml", "kvconform", "suites")
#: One cell of the tiny checkpoint: every check of the float32 dynamic sdpa cell.
ONE_CELL = ("--dtype", "float32", "--cache", "dynamic", "--attn", "sdpa")


@dataclass(frozen=True)
class Installed:
    """A fresh venv with the wheel installed, and a folder outside the checkout holding a tiny checkpoint."""

    python: Path
    scripts: Path
    work: Path
    source: Path
    """The copy of the checkout the wheel was built from."""

    def run(self, *command: str | Path, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        env = {name: value for name, value in os.environ.items()
               if name not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "GITHUB_STEP_SUMMARY")}
        env |= {"HF_HUB_OFFLINE": "1", "PATH": f"{self.scripts}{os.pathsep}{env.get('PATH', '')}"}
        return subprocess.run([str(part) for part in command], cwd=cwd or self.work, env=env, capture_output=True,
                              text=True, timeout=timeout)


def _pip(*args: str | Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", base / "dist", source)
    [wheel] = (base / "dist").glob("kvconform-*.whl")
    python = _fresh_venv(base / "venv")
    _pip("--python", python, "install", "--no-deps", "--no-index", "-q", wheel)
    work = base / "my-project"
    save_llama(work / "tiny-llama")
    return Installed(python=python, scripts=python.parent, work=work, source=source)


def _fresh_venv(venv: Path) -> Path:
    """A venv without pip whose imports fall back to this environment's packages; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "kvconform-test-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def test_the_wheel_ships_the_plugin_the_suites_and_the_default_matrix(installed: Installed) -> None:
    found = installed.run(installed.python, "-c", "import importlib.metadata as m, kvconform.suites, kvconform.run_scope as s;"
                          "print(kvconform.suites.__file__); print(s.default_matrix());"
                          "print(sorted(e.value for e in m.entry_points(group='pytest11') if e.value.startswith('kvconform')))")
    assert found.returncode == 0, found.stderr
    suites, matrix, entry_points = found.stdout.splitlines()
    venv = installed.python.parents[1]
    assert Path(suites).is_relative_to(venv) and Path(matrix).is_relative_to(venv), found.stdout
    assert Path(matrix).read_text() == (ROOT / "model_matrix.yaml").read_text()
    assert entry_points in ("['kvconform.plugin']", "['kvconform.plugin', 'kvconform.plugin']"), entry_points


def test_installed_command_checks_a_checkpoint_outside_the_checkout(installed: Installed) -> None:
    """``kvconform --model ./ckpt`` (= ``pytest --pyargs kvconform.suites``) in a folder of one's own: the cell's
    checks pass, and the reports are written there, in the run's own folder."""
    done = installed.run("kvconform", "--model", "./tiny-llama", *ONE_CELL, "-q")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "PytestAssertRewriteWarning" not in done.stdout, done.stdout[-3000:]  # the command imports kvconform first
    folder = installed.work / "reports" / "model-tiny-llama_dtype-float32_cache-dynamic_attn-sdpa"
    assert f"report: {folder / 'conformance.md'}" in done.stdout, done.stdout[-3000:]
    doc = json.loads((folder / "conformance.json").read_text())
    outcomes = {row["check"]: row["outcome"] for row in doc["results"] if row["cell_id"] == "tiny-llama[float32-cpu-dynamic]"}
    assert outcomes.get("parity") == "pass" and outcomes.get("kv_parity") == "pass", outcomes
    assert set(outcomes.values()) == {"pass"}, outcomes
    assert (folder / "conformance.md").read_text().splitlines()[2].startswith("> ✅ **No failures:")
    assert not (ROOT / "reports" / folder.name).exists()


def test_installed_plugin_stays_inert_in_another_project(installed: Installed, tmp_path: Path) -> None:
    """The pytest11 entry point loads the plugin into every pytest run of the venv: elsewhere it reads no matrix,
    imports no torch and writes no report."""
    (tmp_path / "test_other.py").write_text('import sys\n\n\ndef test_other():\n    assert "torch" not in sys.modules\n')
    done = installed.run(installed.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "kvconform" not in done.stdout and not (tmp_path / "reports").exists(), done.stdout


def test_entry_point_and_root_conftest_register_the_plugin_once(installed: Installed) -> None:
    """In the checkout with the plugin installed (as an editable install is), the root conftest.py's ``pytest_plugins``
    finds the entry point's plugin registered under the same name: no "Plugin already registered" error."""
    done = installed.run(installed.python, "-m", "pytest", "--collect-only", "-q", "--no-reports", "--matrix",
                         "tests/data/main.yaml", "tests/test_docs.py", cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "already registered" not in done.stdout + done.stderr


def test_editable_install_maps_the_suites_and_the_matrix_to_the_checkout(installed: Installed, tmp_path: Path) -> None:
    """``pip install -e .`` (CI's install): ``kvconform.suites`` is the checkout's suites/ and the default matrix its
    model_matrix.yaml, so ``kvconform --model`` reads the files one edits."""
    python = _fresh_venv(tmp_path / "venv")
    _pip("--python", python, "install", "--no-deps", "--no-index", "--no-build-isolation", "-q", "-e", installed.source)
    found = installed.run(python, "-c", "import kvconform.suites, kvconform.run_scope as s; print(kvconform.suites.__file__);"
                          "print(s.default_matrix())", cwd=tmp_path)
    assert found.stdout.split() == [str(installed.source / "suites" / "__init__.py"), str(installed.source / "model_matrix.yaml")], (
        found.stdout + found.stderr)

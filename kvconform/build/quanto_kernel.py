"""Where optimum-quanto compiles its CPU unpack kernel: kvconform's cache folder, not the installed package.

On its first int2/int4 unpack quanto compiles ``quanto_cpp`` (two C++ files against torch's headers, with ninja) into
its own package folder (``optimum/quanto/library/extensions/cpp/build``), so every fresh environment, such as each CI
job's venv, compiles it again: 60.5 s of both cores on the 2-vCPU machine (its ``.ninja_log``), spent inside the first
quanto cell while the other worker waits on the build's lock. Built under ``cache_dir()/quanto-cpp/<key>`` (Python,
torch and quanto versions, the machine, where torch is installed: its headers are in the compile command) it is
compiled once per environment path, so a venv made again in the same place (a CI job's) reuses it; torch's loader and
ninja still rebuild it when the sources or the compile command change, and quanto when torch's version does.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from importlib import metadata
from pathlib import Path

from kvconform.cache_root import cache_dir

#: The name quanto registers its CPU extension under (``optimum.quanto.library.extensions.cpp``).
EXTENSION = "quanto_cpp"


def shared_build_directory() -> Path:
    """The folder quanto's CPU kernel is built in: one per Python, torch and quanto version, machine and torch install."""
    import torch

    install = hashlib.sha256(str(Path(torch.__file__).resolve().parent).encode()).hexdigest()[:10]
    key = (f"py{sys.version_info.major}.{sys.version_info.minor}-torch{torch.__version__}-"
           f"quanto{metadata.version('optimum-quanto')}-{platform.machine()}-{install}")
    return cache_dir() / "quanto-cpp" / key


def share_quanto_build() -> None:
    """Point quanto's CPU extension at the shared build folder, unless it is loaded already (nothing to move then) or
    quanto is not installed (the quanto cells say so themselves)."""
    try:
        from optimum.quanto.library.extensions import get_extension
    except ImportError:
        return
    extension = get_extension(EXTENSION)
    if extension._lib is None:
        extension.build_directory = str(shared_build_directory())

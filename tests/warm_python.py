"""Run standalone scripts as ``python SCRIPT`` would, each in a fork of one interpreter that imported torch and
transformers once.

A repro script spends about 6 s of its run importing torch and transformers; the self-tests run dozens. Run as a
program, this module imports the two (never kvconform or the tests), then reads one JSON request per line on
standard input (``{"script", "cwd", "timeout"}``) and answers each with one JSON line
(``{"returncode", "stdout", "stderr"}``). Every script runs in a fresh ``fork``: its own ``__main__`` namespace,
working folder, ``sys.argv``, standard streams and exit status, and nothing a previous script did. The server runs
no tensor operation before forking, so each child starts torch's thread pools itself. ``WarmPython`` is the client
the self-tests hold, one per pytest process.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The exit status of a script killed at its timeout (as ``subprocess.run`` reports a SIGKILL).
KILLED = -signal.SIGKILL


@dataclass(frozen=True)
class ScriptRun:
    """What ``python SCRIPT`` would have returned."""

    returncode: int
    stdout: str
    stderr: str


class WarmPython:
    """A server process (this module run as a program), started at the first script and stopped by ``close``."""

    def __init__(self) -> None:
        self._server: subprocess.Popen[str] | None = None

    def run(self, script: Path, cwd: Path, timeout: float = 600) -> ScriptRun:
        """Run ``script`` in ``cwd`` as ``python script`` would; a script past ``timeout`` seconds is killed."""
        server = self._started()
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps({"script": str(script), "cwd": str(cwd), "timeout": timeout}) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        if not answer:
            raise RuntimeError(f"tests/warm_python.py stopped (exit {server.wait()}) while running {script}")
        return ScriptRun(**json.loads(answer))

    def close(self) -> None:
        if self._server is not None:
            assert self._server.stdin is not None
            self._server.stdin.close()
            self._server.wait(timeout=60)
            self._server = None

    def _started(self) -> subprocess.Popen[str]:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True)
        return self._server


def _exit_status(code: Any) -> int:
    """The process exit status of ``sys.exit(code)``, printing a non-integer code as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _child(script: str, cwd: str, out: str, err: str, protocol: int) -> None:
    """In the fork: the standard streams to files, the script as ``__main__``, then exit with its status."""
    os.close(protocol)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    os.chdir(cwd)
    sys.argv = [script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:  # noqa: BLE001 - reported as python reports an uncaught exception
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _wait(pid: int, timeout: float) -> int:
    """The child's exit status (``-signal`` if a signal ended it), killing it after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return KILLED
        time.sleep(0.02)


def serve() -> None:
    """Answer each request line on standard input with the run of its script."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # a stray print of an import goes to standard error, never into the answers
    import torch  # noqa: F401 - the imports every script shares, paid once
    import transformers.cache_utils
    import transformers.generation
    import transformers.modeling_utils  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.TemporaryDirectory() as folder:
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            protocol.flush()
            pid = os.fork()
            if pid == 0:
                _child(request["script"], request["cwd"], out, err, protocol.fileno())
            returncode = _wait(pid, request["timeout"])
            streams = [Path(path).read_text(errors="replace") if os.path.exists(path) else "" for path in (out, err)]
        protocol.write(json.dumps({"returncode": returncode, "stdout": streams[0], "stderr": streams[1]}) + "\n")
        protocol.flush()


if __name__ == "__main__":
    serve()

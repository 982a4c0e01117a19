"""Running the build's tools away from the user's folder: pip isolated, output into a log.

Every Python tool runs as ``python -I`` (``pip_argv``) in a folder of ours
(``work_dir``, the cache): ``python -m pip`` would otherwise put the working
folder first on ``sys.path``, and a ``pip.py`` where the user stands would run
instead of pip.  ``stream`` is the one way a long tool (cmake, ninja, ``pip
download``) runs: every line into the log, each line shown to a callback (for
progress), the last lines kept for the error message, and the child killed if
we are interrupted (Ctrl-C included), so no compiler or download outlives us.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO


def pip_argv(*args: str) -> list[str]:
    """This Python's pip, isolated: ``-I`` keeps the working folder (and PYTHON* variables)
    off ``sys.path``, so no ``pip.py`` lying around can stand in for pip."""
    return [sys.executable, "-I", "-m", "pip", *args]


def work_dir() -> Path:
    """A folder of ours to start tools in (the cache), never the user's working folder."""
    from localllm import paths

    folder = paths.cache().absolute()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def stream(
    argv: list[str],
    log: IO[str],
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    keep: int = 40,
) -> tuple[int, list[str]]:
    """Run ``argv`` in ``work_dir`` with its output in ``log``: (exit status, last lines)."""
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    tail: list[str] = []
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        errors="replace",
        cwd=work_dir(),
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                tail = [*tail, line.rstrip()][-keep:]
                if on_line:
                    on_line(line)
            rc = proc.wait()
        except BaseException:
            proc.kill()
            raise
    return rc, tail

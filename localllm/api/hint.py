"""The GPU hint as a person meets it: one line, at most once a day, on the user's own path.

A daemon that sees a GPU no plugin serves puts the line that fixes it in its
``/api/version`` answer (``gpu_hint``, ours; ``backends/advice.py`` writes it).
``run`` prints it on stderr, ``chat`` shows it in the status bar, and a ``serve``
in a terminal prints it at start.  Whichever comes first in a day shows it;
the others stay quiet until the next day.  The time it was last shown is kept
in the data folder (``<LOCALLLM_HOME>/hints.json``, beside the store the daemon
serves), written whole or not at all (a temporary file renamed over it), so two
commands at once cannot leave half a file.  ``LOCALLLM_NO_HINTS``
silences it.  Only a daemon on this machine is asked: the command the line names
must run where the GPU is.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from localllm import config, paths
from localllm.api.calls import Calls
from localllm.api.daemon import is_local_url
from localllm.errors import LocalLLMError

if TYPE_CHECKING:
    from localllm.api.client import AsyncClient, Client

DAY = 24 * 3600.0
KEY = "gpu"


def state_file() -> Path:
    return paths.home() / "hints.json"


def _last_shown() -> float:
    try:
        value = json.loads(state_file().read_text()).get(KEY, 0)
    except (OSError, ValueError, AttributeError):
        return 0.0
    return float(value) if isinstance(value, int | float) else 0.0


def _mark(now: float) -> None:
    """Remember ``now``: a temporary file in the same folder, renamed over the old one."""
    path = state_file()
    with contextlib.suppress(OSError):  # a read-only folder means the hint shows again
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hints-", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({KEY: now}, f)
            os.replace(tmp, path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            raise


def take(now: float | None = None) -> bool:
    """True (and the time remembered) when the hint may show now: not silenced, and not
    shown in the last day.  Clocks that went back count as a day gone by."""
    if config.NO_HINTS.get():
        return False
    now = time.time() if now is None else now
    last = _last_shown()
    if last <= now < last + DAY:
        return False
    _mark(now)
    return True


def _line(answer: object) -> str:
    line = answer.get("gpu_hint") if isinstance(answer, dict) else None
    return line if isinstance(line, str) else ""


def show(client: Client) -> None:
    """``run``'s part: the daemon's line on stderr, when it has one and it is due."""
    if not is_local_url(client.base_url):
        return
    with contextlib.suppress(LocalLLMError):  # a hint never fails the command
        line = _line(client._request(*Calls.version))
        if line and take():
            print(line, file=sys.stderr, flush=True)


async def line_for_status(client: AsyncClient) -> str:
    """``chat``'s part: the daemon's line for the status bar when it is due, else ""."""
    if not is_local_url(client.base_url):
        return ""
    try:
        line = _line(await client._request(*Calls.version))
    except LocalLLMError:
        return ""
    return line if line and take() else ""

"""What the daemon says about requests it bent or refused, naming the client.

Owned here:

- :func:`note_ignored`: one log line per client (``User-Agent``), route and
  ignored field (compat/fields.py's rules), once per daemon run, so an agent's
  every request does not repeat it: a warning for what may change the answer (a
  dropped tool, a field this daemon does not know), else info;
- :func:`note_refused`: a log line for each refused request (a 400) with the
  client and the message, and, with ``LOCALLLM_DEBUG_REQUESTS=DIR``, the request
  written to ``DIR`` (its body capped at :data:`MAX_BODY` bytes, the newest
  :data:`MAX_FILES` files kept, each private to the user) for a bug report.

The body is the one :func:`localllm.server.deps.parse_json` read, which it keeps
on ``request.state.raw_body``; a route that never read one writes none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path

from fastapi import Request

from localllm import config
from localllm.models.details import rfc3339

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
MAX_FILES = 50
_MAX_SEEN = 4096  # (client, route, field) lines remembered; past this, nothing more is said


def client(request: Request) -> str:
    return request.headers.get("user-agent", "")[:200] or "an unnamed client"


def note_ignored(request: Request, fields: list[str]) -> None:
    """Log each ignored field once per client and route."""
    if not fields:
        return
    seen: set[tuple[str, str, str]] = request.app.state.__dict__.setdefault("_ignored_seen", set())
    who, path = client(request), request.url.path
    for field in fields:
        key = (who, path, field)
        if key in seen or len(seen) >= _MAX_SEEN:
            continue
        seen.add(key)
        level = logging.WARNING if _notable(field) else logging.INFO
        log.log(level, "%s from %s: ignored %s", path, who, field)


def _notable(field: str) -> bool:
    """A dropped tool or an unknown field: what a user may miss in the answer."""
    return field.endswith("(unknown field)") or field.startswith(("tools.", "a '", "mcp_"))


async def note_refused(request: Request, status: int, message: str) -> None:
    """Log a refused request with its client; keep it on disk where asked to."""
    who = client(request)
    method, path = request.method, request.url.path
    log.warning("%s %s from %s refused (%d): %s", method, path, who, status, message)
    folder = config.DEBUG_REQUESTS.get()
    if not folder:
        return
    raw: bytes | None = getattr(request.state, "raw_body", None)
    record = {
        "time": rfc3339(time.time(), utc=True, timespec="seconds"),
        "method": request.method,
        "path": request.url.path,
        "query": request.url.query,
        "user_agent": who,
        "status": status,
        "error": message,
        "body_bytes": None if raw is None else len(raw),
        "body": None if raw is None else raw[:MAX_BODY].decode("utf-8", "replace"),
    }
    try:
        await asyncio.to_thread(_write, Path(folder), record)
    except OSError as exc:
        log.warning("LOCALLLM_DEBUG_REQUESTS: could not write to %s: %s", folder, exc)


def _write(folder: Path, record: dict[str, object]) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = f"refused-{time.time_ns()}.json"
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
    old = sorted(folder.glob("refused-*.json"))
    for path in old[: max(len(old) - MAX_FILES, 0)]:
        path.unlink(missing_ok=True)

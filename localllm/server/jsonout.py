"""Response bodies as JSON, rendered in a worker thread a piece at a time.

Starlette's ``JSONResponse`` renders its content with one ``json.dumps`` call on
the event loop: for a thousand 768-dimension embeddings (15 MB) that is ~150 ms
with the interpreter lock held.  ``dumps`` gives the same bytes (the same
separators, ``ensure_ascii=False``, NaN refused) but walks containers in Python
and hands ``json`` only runs of at most ``LEAVES`` scalars or ``SLICE``
characters of a string at a time, so the loop gets the lock back between
pieces; ``json_response`` runs it in one of the app's worker threads and sends a
large body a chunk at a time.  ``json_result`` answers so once a piece of work
(a generation, folded) is done, unless its client left first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from localllm.inference.release import dismantle
from localllm.server.deps import offload
from localllm.server.disconnect import ClientGone, gone_response, until_disconnect

T = TypeVar("T")

LEAVES = 4096
SLICE = 1 << 20
CHUNK = 256 << 10  # what a large response is sent in
_ENC = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_CONTAINERS = (dict, list, tuple)


def dumps(content: Any) -> bytes:
    """``content`` as compact UTF-8 JSON, as ``JSONResponse`` renders it."""
    out: list[bytes] = []
    _emit(content, out)
    return b"".join(out)


def _emit(value: Any, out: list[bytes]) -> None:
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            out.append(_ENC.encode(value).encode("utf-8"))  # json's own key conversions
            return
        out.append(b"{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(b",")
            out.append(_ENC.encode(key).encode("utf-8") + b":")
            _emit(item, out)
        out.append(b"}")
    elif isinstance(value, (list, tuple)):
        out.append(b"[")
        for start in range(0, len(value), LEAVES):
            part = value[start : start + LEAVES]
            if start:
                out.append(b",")
            if any(
                isinstance(v, _CONTAINERS) or (isinstance(v, str) and len(v) > SLICE) for v in part
            ):
                for i, item in enumerate(part):
                    if i:
                        out.append(b",")
                    _emit(item, out)
            elif part:
                out.append(_ENC.encode(list(part))[1:-1].encode("utf-8"))
        out.append(b"]")
    elif isinstance(value, str) and len(value) > SLICE:
        # Escaping is per character, so a long string can be escaped a slice at a time.
        out.append(b'"')
        for start in range(0, len(value), SLICE):
            out.append(_ENC.encode(value[start : start + SLICE])[1:-1].encode("utf-8"))
        out.append(b'"')
    else:
        out.append(_ENC.encode(value).encode("utf-8"))


def dumps_chunks(content: Any) -> list[bytes]:
    """``dumps(content)`` as pieces of about ``CHUNK`` bytes (joined in the thread)."""
    out: list[bytes] = []
    _emit(content, out)
    chunks: list[bytes] = []
    group: list[bytes] = []
    size = 0
    for piece in out:
        group.append(piece)
        size += len(piece)
        if size >= CHUNK:
            chunks.append(b"".join(group))
            group, size = [], 0
    if group or not chunks:
        chunks.append(b"".join(group))
    return chunks


def _render(box: list[Any]) -> list[bytes]:
    content = box.pop()
    chunks = dumps_chunks(content)
    dismantle(content)
    return chunks


async def json_response(request: Request, content: Any, status_code: int = 200) -> Response:
    """A JSON response rendered off the event loop; a large one is sent a chunk at a time,
    so the transport never copies the whole body at once."""
    # The thread takes the only reference, so a large document (20,000 embeddings: 7M
    # floats, 100 ms to free) is freed there, not on the loop when the route returns.
    box = [content]
    del content
    chunks = await offload(request, _render, box)
    if len(chunks) == 1:
        return Response(chunks[0], status_code=status_code, media_type="application/json")

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return StreamingResponse(
        body(),
        status_code=status_code,
        media_type="application/json",
        headers={"Content-Length": str(sum(len(c) for c in chunks))},
    )


def _same(result: Any) -> Any:
    return result


async def json_result(
    request: Request, work: Awaitable[T], shape: Callable[[T], Any] = _same
) -> Response:
    """``shape(work's result)`` as JSON; the client leaving first cancels ``work`` (a 499)."""
    try:
        result = await until_disconnect(request, work)
    except ClientGone:
        return gone_response()
    return await json_response(request, shape(result))

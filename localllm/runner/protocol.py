"""The framed message protocol between the daemon and a runner child.

Transport: the child's own stdin (daemon -> runner) and stdout (runner -> daemon).
Pipes rather than a Unix socket pair because the kernel closes the daemon's end
of the stdin pipe whenever the daemon dies, SIGKILL included, so the child reads
EOF and exits on its own: no orphan runners, no socket path to create, secure
or clean up, and asyncio's subprocess support gives us both ends for free.  The
child moves fd 1 out of the way first (see ``worker``) so that native code which
prints cannot corrupt the stream.

Framing: a 4-byte big-endian unsigned length, then that many bytes of UTF-8 JSON
holding one object with a ``"type"`` key.  With the length's top bit set, the
body is a 4-byte JSON length, the JSON, then the message's attachments: its
images, long texts, long token lists and embedding vectors as raw bytes
(``runner.attach``).  A frame over ``MAX_FRAME`` bytes, a body that is not a
JSON object, an unknown type or a missing field raises ``ProtocolError``; the
stream is then unusable and the peer is treated as broken.

Messages (parent -> child): ``load``, ``complete``, ``cancel``, ``embed``,
``rerank``, ``score``, ``tokenize``, ``detokenize``, ``ping``, ``shutdown``.  (child ->
parent): ``loaded``, ``piece``, ``done``, ``failed``, ``embeddings``, ``scores``,
``option_scores``, ``tokens``, ``text``, ``pong``, ``adapter`` (a LoRA adapter was
loaded for a request: its path and load time), ``beat`` (the heartbeat: sent every ``heartbeat_s``
seconds, a ``load`` field, by a thread of the child; ``busy_ms`` is how long its
main thread has been in the current load, step or call, 0 when idle).
Each message's keys are its ``TypedDict`` in ``runner.frames``.
``failed`` with an empty ``id`` is about the load itself.  ``loaded`` carries
the engine's ``info``, its ``memory`` per device (llama.cpp's logged buffers),
``load_ns`` and, optionally, ``rss_before``: the child's resident bytes just
before the load (null without ``/proc``), which ``runner.resident`` uses.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, TypeVar, cast

from localllm import config
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.runner import attach
from localllm.runner.frames import (
    SCHEMA,
    AdapterFrame,
    BeatFrame,
    CompleteFrame,
    DoneFrame,
    FailedFrame,
    Frame,
    LoadFrame,
    PieceFrame,
    RerankBody,
    RerankFrame,
    ScoreFrame,
)
from localllm.runner.messages import (
    CompletionRequest,
    Done,
    Failed,
    LoadOptions,
    PairFormat,
    Piece,
    SamplingParams,
    from_dict,
    to_dict,
)

if TYPE_CHECKING:
    import asyncio

_HEADER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size
# The header's top bit: the body is a JSON length, the JSON, then its attachments.
_ATTACHED = 1 << 31
_SIZES = "\u0000sizes"
# Embedding batches are the biggest messages (JSON floats cost ~20 bytes each);
# 128 MiB holds ~1500 vectors of 4096 dims, while a corrupted header (which
# decodes to an arbitrary 32-bit length) still cannot make us allocate 4 GiB.
MAX_FRAME = 128 * 1024 * 1024

Message = Frame  # any frame (runner.frames), as the tests and both ends name it
_T = TypeVar("_T")


class ProtocolError(LocalLLMError):
    """The byte stream between daemon and runner is malformed."""


def encode(msg: Message, *, max_frame: int = MAX_FRAME) -> bytes:
    """One frame: header + JSON body (+ attachments).  Refuses invalid or oversize messages."""
    return b"".join(encode_parts(msg, max_frame=max_frame))


def encode_parts(msg: Message, *, max_frame: int = MAX_FRAME) -> list[bytes]:
    """One frame as the pieces to write in order; large values travel as attachments
    (``runner.attach``), each piece made by a short C call."""
    validate(msg)
    small, parts = attach.split(msg)
    sizes = [sum(len(c) for c in chunks) for chunks in parts]
    if parts:
        small[_SIZES] = sizes
    # NaN/Infinity stay allowed: both ends are Python, and a -inf logprob is legitimate.
    body = json.dumps(small, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if not parts:
        if len(body) > max_frame:
            raise ProtocolError(
                f"{msg['type']} message of {len(body)} bytes exceeds the "
                f"{max_frame}-byte frame limit"
            )
        return [_HEADER.pack(len(body)) + body]
    total = HEADER_SIZE + len(body) + sum(sizes)
    if total > max_frame:
        raise ProtocolError(
            f"{msg['type']} message of {total} bytes exceeds the {max_frame}-byte frame limit"
        )
    head = _HEADER.pack(total | _ATTACHED) + _HEADER.pack(len(body)) + body
    return [head, *(chunk for chunks in parts for chunk in chunks)]


def frame_length(header: bytes, *, max_frame: int = MAX_FRAME) -> tuple[int, bool]:
    """The body length a header announces, checked against the cap, and whether the
    body carries attachments."""
    if len(header) != HEADER_SIZE:
        raise ProtocolError("truncated frame header")
    (word,) = _HEADER.unpack(header)
    length = word & ~_ATTACHED
    if length > max_frame:
        raise ProtocolError(f"frame of {length} bytes exceeds the {max_frame}-byte limit")
    return int(length), bool(word & _ATTACHED)


def decode(body: bytes, attached: bool = False) -> Message:
    """Parse and validate one frame body."""
    blobs: list[memoryview] = []
    if attached:
        if len(body) < HEADER_SIZE:
            raise ProtocolError("truncated attachment header")
        (size,) = _HEADER.unpack(body[:HEADER_SIZE])
        view = memoryview(body)
        text, rest = view[HEADER_SIZE : HEADER_SIZE + size], view[HEADER_SIZE + size :]
    else:
        text = memoryview(body)
    try:
        msg = json.loads(bytes(text).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("frame is not a JSON object")
    if attached:
        sizes = msg.pop(_SIZES, None)
        if (
            not isinstance(sizes, list)
            or not all(isinstance(n, int) and n >= 0 for n in sizes)
            or sum(sizes) != len(rest)
        ):
            raise ProtocolError("frame attachments do not match their sizes")
        start = 0
        for n in sizes:
            blobs.append(rest[start : start + n])
            start += n
        try:
            msg = attach.join(msg, blobs)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"bad attachment: {exc}") from None
    validate(msg)
    return cast(Message, msg)


def validate(msg: Mapping[str, object]) -> None:
    kind = msg.get("type")
    if not isinstance(kind, str) or kind not in SCHEMA:
        raise ProtocolError(f"unknown message type {kind!r}")
    missing = [name for name in SCHEMA[kind] if name not in msg]
    if missing:
        raise ProtocolError(f"{kind} message lacks {', '.join(missing)}")


# -- blocking I/O (the child) -------------------------------------------------


def _read_exact(stream: IO[bytes], n: int) -> bytes | None:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"stream ended inside a frame ({got} of {n} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream: IO[bytes], *, max_frame: int = MAX_FRAME) -> Message | None:
    """Read one message; ``None`` on a clean EOF between frames."""
    header = _read_exact(stream, HEADER_SIZE)
    if header is None:
        return None
    length, attached = frame_length(header, max_frame=max_frame)
    body = _read_exact(stream, length) if length else b""
    if body is None:
        raise ProtocolError("stream ended after a frame header")
    return decode(body, attached)


# -- asyncio I/O (the daemon) -------------------------------------------------


async def read_frame_async(
    reader: asyncio.StreamReader, *, max_frame: int = MAX_FRAME
) -> Message | None:
    """Read one message; ``None`` on a clean EOF between frames."""
    import asyncio  # here: the runner child reads synchronously and never pays for it

    try:
        header = await reader.readexactly(HEADER_SIZE)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProtocolError("stream ended inside a frame header") from None
    length, attached = frame_length(header, max_frame=max_frame)
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise ProtocolError(f"stream ended inside a frame of {length} bytes") from None
    return decode(body, attached)


# -- message builders and parsers ----------------------------------------------


def load_msg(
    model_paths: list[str], opts: LoadOptions, heartbeat_s: float | None = None
) -> LoadFrame:
    msg: LoadFrame = {"type": "load", "model_paths": list(model_paths), "options": to_dict(opts)}
    if heartbeat_s is not None:
        msg["heartbeat_s"] = float(heartbeat_s)
    return msg


def beat_msg(busy_ms: int) -> BeatFrame:
    return {"type": "beat", "busy_ms": int(busy_ms)}


def complete_msg(req: CompletionRequest) -> CompleteFrame:
    # The images stay bytes: they travel as attachments, not as base64 in the JSON.
    return {"type": "complete", "request": to_dict(req)}


def adapter_msg(path: str, load_ns: int) -> AdapterFrame:
    return {"type": "adapter", "path": path, "load_ns": int(load_ns)}


def piece_msg(piece: Piece) -> PieceFrame:
    return {"type": "piece", "piece": to_dict(piece)}


def done_msg(done: Done) -> DoneFrame:
    return {"type": "done", "done": to_dict(done)}


def failed_msg(failed: Failed) -> FailedFrame:
    return {"type": "failed", "failed": to_dict(failed)}


def event_msg(event: Piece | Done | Failed) -> PieceFrame | DoneFrame | FailedFrame:
    if isinstance(event, Piece):
        return piece_msg(event)
    if isinstance(event, Done):
        return done_msg(event)
    return failed_msg(event)


def parse_options(msg: LoadFrame) -> LoadOptions:
    return _build(LoadOptions, msg["options"])


def parse_request(msg: CompleteFrame) -> CompletionRequest:
    data = _object(msg["request"], "request")
    req = _build(CompletionRequest, data)
    req.sampling = _build(SamplingParams, data.get("sampling") or {})
    if isinstance(req.prompt, list):
        req.prompt = [int(t) for t in req.prompt]
    elif not isinstance(req.prompt, str):
        raise ProtocolError("request prompt must be text or a list of token ids")
    if not isinstance(req.adapters, list) or not all(isinstance(p, str) for p in req.adapters):
        raise ProtocolError("request adapters must be a list of paths")
    if not isinstance(req.markers, list) or not all(isinstance(m, str) for m in req.markers):
        raise ProtocolError("request markers must be a list of strings")
    req.images = _images(req.images)
    return req


def _images(value: object) -> list[bytes]:
    """The request's images (attachments), within the count and size limits."""
    if not isinstance(value, list) or not all(isinstance(v, bytes) for v in value):
        raise ProtocolError("request images must be attached bytes")
    if len(value) > config.MAX_IMAGES or sum(len(v) for v in value) > config.MAX_IMAGES_BYTES:
        # A well-formed request (too many images) fails alone, not the stream.
        raise InvalidRequest(
            f"too many images or image bytes in one request (at most "
            f"{config.MAX_IMAGES} images, {config.MAX_IMAGES_BYTES} bytes)"
        )
    return list(value)


def rerank_msg(query: str, documents: list[str], fmt: PairFormat, truncate: bool) -> RerankBody:
    """A ``rerank`` call without its id (``Traffic.call`` adds one, last)."""
    return {
        "type": "rerank",
        "query": query,
        "documents": list(documents),
        "format": to_dict(fmt),
        "truncate": bool(truncate),
    }


def parse_rerank(msg: RerankFrame) -> tuple[str, list[str], PairFormat]:
    """A ``rerank`` message's query, documents and pair format, checked for type."""
    query, docs = msg["query"], msg["documents"]
    if (
        not isinstance(query, str)
        or not isinstance(docs, list)
        or not all(isinstance(d, str) for d in docs)
    ):
        raise ProtocolError("rerank takes a query string and a list of document strings")
    fmt = _build(PairFormat, msg["format"])
    if not isinstance(fmt.template, str) or not isinstance(fmt.sep, int):
        raise ProtocolError("malformed PairFormat")
    return query, docs, fmt


def parse_score(msg: ScoreFrame) -> tuple[list[str], list[list[str]]]:
    """A ``score`` message's prompts and each one's options, checked for type."""
    prompts, options = msg["prompts"], msg["options"]
    if (
        not isinstance(prompts, list)
        or not isinstance(options, list)
        or len(prompts) != len(options)
        or not all(isinstance(p, str) for p in prompts)
        or not all(isinstance(o, list) and all(isinstance(t, str) for t in o) for o in options)
    ):
        raise ProtocolError("score takes prompt strings and, for each, a list of option strings")
    return prompts, options


def parse_piece(msg: PieceFrame) -> Piece:
    piece = _build(Piece, msg["piece"])
    if piece.top_logprobs is not None:
        # JSON has no tuples; restore the (text, logprob) pairs the type promises.
        piece.top_logprobs = [(str(t), float(p)) for t, p in piece.top_logprobs]
    return piece


def parse_done(msg: DoneFrame) -> Done:
    return _build(Done, msg["done"])


def parse_failed(msg: FailedFrame) -> Failed:
    return _build(Failed, msg["failed"])


def _object(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object")
    return value


def _build(cls: type[_T], value: object) -> _T:
    try:
        built: _T = from_dict(cls, _object(value, cls.__name__))
        return built
    except TypeError as exc:  # a required field is missing
        raise ProtocolError(f"malformed {cls.__name__}: {exc}") from None

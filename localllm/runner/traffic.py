"""The message traffic with one runner child (asyncio): requests out, events routed back.

:class:`Traffic` writes framed requests to the child's stdin (a large one framed in a
thread), reads the frames of its stdout (each a sign of life for the watchdog) and routes
every event to the request waiting for it: a queue per generation stream, a future per
call (embed, rerank, score, tokenize, detokenize, ping).  Whether the child lives, and why it
died, is :class:`~localllm.runner.process.RunnerProcess`'s: the traffic asks it through
:class:`Peer`, and it fails what is in flight (:meth:`Traffic.fail_all`) when the child
is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeGuard

from localllm.errors import InvalidRequest, LocalLLMError
from localllm.runner import protocol as P
from localllm.runner.frames import Call, Frame, Reply
from localllm.runner.lastwords import scrub_paths
from localllm.runner.messages import CompletionRequest, Done, Failed, PairFormat, Piece, error_for
from localllm.runner.watchdog import Watchdog

log = logging.getLogger("localllm.runner")

# A request's text, token ids or images can be tens of MB: these are framed in a thread.
_BIG = ("complete", "embed", "rerank", "score", "tokenize", "detokenize")
# the answers to calls
_RESULTS = ("embeddings", "scores", "option_scores", "tokens", "text", "pong")

Event = Piece | Done | Failed | BaseException  # what a stream's queue holds


class Peer(Protocol):
    """The child at the other end, as far as its traffic needs it."""

    @property
    def pid(self) -> int: ...

    @property
    def alive(self) -> bool: ...

    def death_error(self) -> LocalLLMError:
        """What a request gets once the child is gone."""
        ...

    async def lost(self) -> LocalLLMError | None:
        """After a write failed: once the reader has seen the child's end, the request's
        error; None while there is no reader yet (during the load)."""
        ...


class Traffic:
    """The requests in flight to one child and the pipes they travel on."""

    def __init__(self, proc: asyncio.subprocess.Process, peer: Peer, watchdog: Watchdog) -> None:
        self._proc = proc
        self._peer = peer
        self._watchdog = watchdog
        self.adapter_loads: dict[str, int] = {}  # LoRA path -> ns its load took in the child
        self._streams: dict[str, asyncio.Queue[Event]] = {}
        self._calls: dict[str, asyncio.Future[Reply]] = {}
        self._wire: dict[str, str] = {}  # request id -> wire id of its running stream
        self._ids = itertools.count(1)
        self._drain_lock = asyncio.Lock()

    # -- requests ------------------------------------------------------------

    async def complete(self, req: CompletionRequest) -> AsyncGenerator[Piece | Done, None]:
        """Stream one generation: pieces, then one ``Done`` (see ``RunnerProcess.complete``)."""
        self._check_alive()
        if req.id in self._wire:
            raise InvalidRequest(f"request id {req.id!r} is already running")
        # A private wire id per stream: late events of an earlier request that
        # reused this id (e.g. the Done of an abandoned stream) cannot leak in.
        wire = f"{req.id}@{next(self._ids)}"
        q: asyncio.Queue[Event] = asyncio.Queue()
        self._streams[wire] = q
        self._wire[req.id] = wire
        finished = False
        try:
            await self.send(P.complete_msg(dataclasses.replace(req, id=wire)))
            while True:
                event = await q.get()
                if isinstance(event, BaseException):
                    finished = True
                    raise event
                event.id = req.id
                if isinstance(event, Failed):
                    finished = True
                    raise self._failure(event)
                if isinstance(event, Done):
                    finished = True
                    yield event
                    return
                yield event
        finally:
            self._streams.pop(wire, None)
            self._wire.pop(req.id, None)
            if not finished and self._peer.alive:
                with contextlib.suppress(ConnectionError):
                    self.write_nowait({"type": "cancel", "id": wire})

    async def cancel(self, req_id: str) -> None:
        """Ask the engine to stop ``req_id``; its stream ends with ``Done(reason="cancel")``."""
        wire = self._wire.get(req_id)
        if wire is not None and self._peer.alive:
            await self.send({"type": "cancel", "id": wire})

    async def embed(
        self, inputs: list[str], truncate: bool = True
    ) -> tuple[Sequence[Sequence[float]], int]:
        reply = await self.call(
            {"type": "embed", "inputs": list(inputs), "truncate": truncate, "id": self._id("embed")}
        )
        if reply["type"] != "embeddings":
            raise _unexpected(reply)
        # float32 rows: Python floats made in a thread
        return await asyncio.to_thread(reply["vectors"].tuples), int(reply["n_tokens"])

    async def rerank(
        self, query: str, documents: list[str], fmt: PairFormat, truncate: bool = True
    ) -> tuple[list[float], int]:
        reply = await self.call(
            {**P.rerank_msg(query, documents, fmt, truncate), "id": self._id("rerank")}
        )
        if reply["type"] != "scores":
            raise _unexpected(reply)
        return [float(s) for s in reply["scores"]], int(reply["n_tokens"])

    async def score(
        self, prompts: list[str], options: list[list[str]]
    ) -> tuple[list[list[float]], int, int]:
        reply = await self.call(
            {
                "type": "score",
                "prompts": list(prompts),
                "options": [list(o) for o in options],
                "id": self._id("score"),
            }
        )
        if reply["type"] != "option_scores":
            raise _unexpected(reply)
        logprobs = [[float(v) for v in row] for row in reply["logprobs"]]
        return logprobs, int(reply["n_tokens"]), int(reply["n_evaluated"])

    async def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        reply = await self.call(
            {
                "type": "tokenize",
                "text": text,
                "add_special": add_special,
                "parse_special": parse_special,
                "id": self._id("tokenize"),
            }
        )
        if reply["type"] != "tokens":
            raise _unexpected(reply)
        return [int(t) for t in reply["tokens"]]

    async def detokenize(self, tokens: list[int], special: bool = False) -> str:
        reply = await self.call(
            {
                "type": "detokenize",
                "tokens": [int(t) for t in tokens],
                "special": special,
                "id": self._id("detokenize"),
            }
        )
        if reply["type"] != "text":
            raise _unexpected(reply)
        return str(reply["text"])

    async def ping(self) -> float:
        """Round-trip seconds; the child answers between engine steps."""
        t0 = time.monotonic()
        await self.call({"type": "ping", "id": self._id("ping")})
        return time.monotonic() - t0

    def _id(self, kind: str) -> str:
        """A fresh id for a call (its id goes last: the frame's keys keep their order)."""
        return f"{kind}-{next(self._ids)}"

    async def call(self, msg: Call) -> Reply:
        """Send ``msg`` (under a fresh id, ``_id``) and wait for its answer."""
        self._check_alive()
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._calls[msg["id"]] = fut
        try:
            await self.send(msg)
            return await fut
        finally:
            self._calls.pop(msg["id"], None)

    def _check_alive(self) -> None:
        if not self._peer.alive:
            raise self._peer.death_error()

    # -- the pipes -----------------------------------------------------------

    def write_nowait(self, msg: Frame | list[bytes]) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            raise ConnectionResetError("runner stdin is closed")
        for part in P.encode_parts(msg) if isinstance(msg, dict) else msg:
            stdin.write(part)

    async def send(self, msg: Frame) -> None:
        big = msg["type"] in _BIG
        parts = await asyncio.to_thread(P.encode_parts, msg) if big else P.encode_parts(msg)
        try:
            self.write_nowait(parts)
            async with self._drain_lock:
                assert self._proc.stdin is not None
                await self._proc.stdin.drain()
        except ConnectionError:
            error = await self._peer.lost()
            if error is None:
                raise
            raise error from None

    async def read(self) -> Frame | None:
        assert self._proc.stdout is not None
        msg = await P.read_frame_async(self._proc.stdout)
        if msg is not None:
            self._watchdog.saw(msg)
        return msg

    async def read_loaded(self) -> Frame | None:
        """The first frame that is not a beat; TimeoutError once the child is silent too long."""
        bound = self._watchdog.timeout if self._watchdog.enabled else None
        while True:
            msg = await asyncio.wait_for(self.read(), bound)
            if msg is None or msg["type"] != "beat":
                return msg

    async def pump(self) -> None:
        """Route every frame the child writes until its stdout ends; a malformed frame
        (or a bug in routing one) raises."""
        while (msg := await self.read()) is not None:
            self._dispatch(msg)

    def fail_all(self, error: Callable[[], LocalLLMError]) -> None:
        """Fail every request in flight with a fresh ``error()``."""
        for q in self._streams.values():
            q.put_nowait(error())
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(error())

    # -- routing -------------------------------------------------------------

    def _failure(self, event: Failed) -> LocalLLMError:
        """A request's ``failed`` event as its error; a server-side one loses its paths."""
        if event.status >= 500:  # a 4xx is about the request: the client's own words back
            log.error("runner %d: request failed: %s", self._peer.pid, event.message)
            event = dataclasses.replace(event, message=scrub_paths(event.message))
        return error_for(event)

    def _dispatch(self, msg: Frame) -> None:
        if msg["type"] in ("piece", "done", "failed"):
            event: Piece | Done | Failed = (
                P.parse_piece(msg)
                if msg["type"] == "piece"
                else P.parse_done(msg)
                if msg["type"] == "done"
                else P.parse_failed(msg)
            )
            fut = self._calls.get(event.id)
            if isinstance(event, Failed) and fut is not None:
                if not fut.done():
                    fut.set_exception(self._failure(event))
                return
            q = self._streams.get(event.id)
            if q is not None:  # else the consumer already left: drop it
                q.put_nowait(event)
        elif msg["type"] == "adapter":
            path, ns = str(msg["path"]), int(msg["load_ns"])
            self.adapter_loads[path] = ns
            log.info(
                "runner %d loaded adapter %s in %.1f ms", self._peer.pid, Path(path).name, ns / 1e6
            )
        elif msg["type"] == "beat":
            pass  # a sign of life; ``read`` told the watchdog
        elif _is_reply(msg):
            fut = self._calls.get(str(msg["id"]))
            if fut is not None and not fut.done():
                fut.set_result(msg)
        else:
            log.warning("runner %d sent an unexpected %s message", self._peer.pid, msg["type"])


def _is_reply(msg: Frame) -> TypeGuard[Reply]:
    return msg["type"] in _RESULTS


def _unexpected(reply: Reply) -> P.ProtocolError:
    """A call answered by another call's kind of frame: the child is out of step."""
    return P.ProtocolError(f"the runner answered a call with a {reply['type']} message")

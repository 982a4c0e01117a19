"""The runner child: owns one loaded model and serves the daemon over stdin/stdout.

Lifecycle: read ``load``, build the engine, answer ``loaded`` (or ``failed`` with
an empty id, then exit 1), then loop: while the engine has work, take whatever
messages have arrived without blocking, run one ``engine.step()`` and forward its
events; when idle, block on the next message.  Embeddings, scoring and
tokenization run between steps.  The child exits on ``shutdown``, when stdin closes (the daemon
died, even by SIGKILL), or when it can no longer write to stdout.

Heartbeat: when the ``load`` message asks for one (``heartbeat_s``), a thread of
its own sends a ``beat`` frame that often from before the load until exit, with
how long the main thread has been in its current load, step or call.  It runs
while the main thread is inside a long native call (cffi releases the GIL), so
the daemon's watchdog (``runner.watchdog``) reads silence as "stopped or
frozen", never as "busy".  Two threads write frames now, so ``Worker.send``
holds a lock around each write.

The engine class is ``localllm.engine.engine:Engine`` unless the test-only
setting ``LOCALLLM_RUNNER_ENGINE=module:Class`` (``config.RUNNER_ENGINE``) names
another (tests use a fake one to provoke crashes and slow loads).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import IO, NoReturn

from localllm import config
from localllm.errors import LocalLLMError
from localllm.runner import protocol as P
from localllm.runner.attach import Floats
from localllm.runner.engine_api import EngineAPI, EngineFactory
from localllm.runner.frames import Frame, LoadedFrame
from localllm.runner.messages import CACHE_FLUSH_S, CompletionRequest, Failed, Piece
from localllm.runner.resident import rss_bytes

log = logging.getLogger("localllm.runner.worker")

# After stdin closes the main thread may be inside a long native call (a load or
# a big prefill) and unable to look at its inbox; past this grace period the
# reader thread ends the process itself so a dead daemon never leaves a runner.
EXIT_GRACE_S = 2.0
# Once the main loop has begun closing the engine, it is writing the prompt cache's last
# copies to disk (engine/park.py): they get that long more.
_closing = threading.Event()


# What the reader thread hands the main loop: a frame, the error that ended the stream,
# or None at EOF.
Inbox = queue.Queue[Frame | P.ProtocolError | None]


class ParentGone(Exception):
    """stdout is closed: nobody is listening any more."""


def engine_class() -> EngineFactory:
    # The setting checks the module:Class shape (a malformed one falls back to the
    # real engine with a warning); a name that does not import still fails here.
    module_name, _, attr = config.RUNNER_ENGINE.get().partition(":")
    factory: EngineFactory = getattr(importlib.import_module(module_name), attr)
    return factory


def claim_stdout() -> IO[bytes]:
    """Keep fd 1 for frames only: protocol output gets a private dup, fd 1 becomes stderr.

    llama.cpp and ggml print from C to fd 1 on some paths; pointing fd 1 at the
    log means such output can never corrupt a frame.
    """
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "wb")


def read_stdin(stream: IO[bytes], inbox: Inbox, grace: float = EXIT_GRACE_S) -> None:
    """Reader thread: frames -> inbox; EOF -> ``None``, then a deadline for the whole process."""
    try:
        while True:
            msg = P.read_frame(stream)
            if msg is None:
                break
            inbox.put(msg)
    except P.ProtocolError as exc:
        inbox.put(exc)
    except (OSError, ValueError) as exc:
        log.warning("reading stdin failed: %s", exc)
    inbox.put(None)
    time.sleep(grace)
    if _closing.is_set():
        time.sleep(CACHE_FLUSH_S)
    log.warning("stdin closed and the main loop did not stop within %.1fs; exiting", grace)
    os._exit(0)


def heartbeat(worker: Worker, interval: float, stop: threading.Event) -> None:
    """Heartbeat thread: a ``beat`` frame every ``interval`` seconds until ``stop`` or EOF."""
    while not stop.wait(interval):
        try:
            worker.send(P.beat_msg(worker.busy_ms()))
        except ParentGone:
            return


class Worker:
    """The message loop around one engine."""

    def __init__(self, out: IO[bytes], inbox: Inbox) -> None:
        self.out = out
        self.inbox = inbox
        self.active: set[str] = set()  # completion ids the engine still owes an end to
        # One frame at a time: the heartbeat thread writes too.
        self._write_lock = threading.Lock()
        self._busy_since: float | None = None  # monotonic start of the current step or call
        self._stop_beats = threading.Event()

    def busy_ms(self) -> int:
        since = self._busy_since
        return 0 if since is None else int((time.monotonic() - since) * 1000)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        self._busy_since = time.monotonic()
        try:
            yield
        finally:
            self._busy_since = None

    def start_heartbeat(self, interval: float) -> None:
        threading.Thread(
            target=heartbeat,
            args=(self, interval, self._stop_beats),
            name="runner-heartbeat",
            daemon=True,
        ).start()

    def send(self, *msgs: P.Message) -> None:
        """Write frames with one flush: a step's events for all slots cost one syscall."""
        data = b"".join(P.encode(m) for m in msgs)
        try:
            with self._write_lock:
                self.out.write(data)
                self.out.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError) as exc:
            # ValueError: write to a closed file; either way the daemon is gone.
            raise ParentGone(str(exc)) from None

    def fail(self, req_id: str, exc: BaseException) -> None:
        status = exc.status if isinstance(exc, LocalLLMError) else 500
        message = str(exc) or type(exc).__name__
        self.send(P.failed_msg(Failed(id=req_id, message=message, status=status)))

    def run(self) -> int:
        try:
            return self._run()
        finally:
            self._stop_beats.set()

    def _run(self) -> int:
        first = self.inbox.get()
        if first is None:
            return 0
        if isinstance(first, P.ProtocolError) or first["type"] != "load":
            self.fail("", P.ProtocolError(f"expected a load message, got {first!r:.200}"))
            return 2
        paths = [str(p) for p in first["model_paths"]]
        beat = first.get("heartbeat_s")
        if isinstance(beat, (int, float)) and beat > 0:
            self.start_heartbeat(float(beat))
        t0 = time.monotonic_ns()
        rss_before: int | None = None
        try:
            with self.busy():
                cls = engine_class()
                # After the engine's imports: the growth from here on is the model's.
                rss_before = rss_bytes()
                engine = cls(paths, P.parse_options(first))
        except Exception as exc:
            if isinstance(exc, LocalLLMError):
                log.error("load failed: %s", exc)  # an expected refusal: no traceback
            else:
                traceback.print_exc()
            self.fail("", exc)
            return 1
        try:
            loaded: LoadedFrame = {
                "type": "loaded",
                "info": engine.info(),
                "memory": engine.memory_report(),
                "load_ns": time.monotonic_ns() - t0,
                "rss_before": rss_before,
            }
            self.send(loaded)
            return self.serve(engine)
        finally:
            _closing.set()
            engine.close()

    def serve(self, engine: EngineAPI) -> int:
        while True:
            for msg in self._drain(block=not engine.has_work()):
                if msg is None or (
                    not isinstance(msg, P.ProtocolError) and msg["type"] == "shutdown"
                ):
                    return 0
                if isinstance(msg, P.ProtocolError):
                    # The stream is out of sync; nothing after this can be trusted.
                    log.error("bad frame from the daemon: %s", msg)
                    return 2
                with self.busy():
                    self.handle(engine, msg)
            if engine.has_work():
                try:
                    with self.busy():
                        events = engine.step()
                except Exception as exc:
                    # The engine's state is unknown now: fail what is in flight and
                    # exit, so the daemon loads the model afresh.
                    traceback.print_exc()
                    for req_id in sorted(self.active):
                        self.fail(req_id, LocalLLMError(f"engine error: {exc}"))
                    return 70
                for event in events:
                    if not isinstance(event, Piece):
                        self.active.discard(event.id)
                if events:
                    self.send(*(P.event_msg(event) for event in events))

    def _drain(self, *, block: bool) -> list[Frame | P.ProtocolError | None]:
        msgs: list[Frame | P.ProtocolError | None] = []
        if block:
            msgs.append(self.inbox.get())
        while True:
            try:
                msgs.append(self.inbox.get_nowait())
            except queue.Empty:
                return msgs

    def handle(self, engine: EngineAPI, msg: Frame) -> None:
        kind = msg["type"]
        req_id = str(msg.get("id", ""))
        try:
            if msg["type"] == "complete":
                if isinstance(msg["request"], dict):  # so a refused request fails by its id
                    req_id = str(msg["request"].get("id", ""))
                req = P.parse_request(msg)
                req_id = req.id
                self._complete(engine, req)
            else:
                self._call(engine, msg, req_id)
        except ParentGone:
            raise
        except Exception as exc:
            # One bad request (too long, bad grammar, NaN embedding) fails alone.
            log.warning("%s %s failed: %s", kind, req_id, exc)
            self.fail(req_id, exc)

    def _complete(self, engine: EngineAPI, req: CompletionRequest) -> None:
        engine.submit(req)
        self.active.add(req.id)
        if req.adapters:
            loads = engine.adapters.take_loads()
            if loads:
                self.send(*(P.adapter_msg(path, ns) for path, ns in loads))

    def _call(self, engine: EngineAPI, msg: Frame, req_id: str) -> None:
        """Every message but ``complete``: a cancel, or a call answered under ``req_id``
        (its id as text) at once."""
        if msg["type"] == "cancel":
            engine.cancel(req_id)
        elif msg["type"] == "embed":
            vectors, n_tokens = engine.embed(
                [str(s) for s in msg["inputs"]], truncate=bool(msg["truncate"])
            )
            # float32 rows as one attachment: no JSON floats to print and parse.
            self.send(
                {
                    "type": "embeddings",
                    "id": req_id,
                    "n_tokens": int(n_tokens),
                    "vectors": Floats.pack(vectors),
                }
            )
        elif msg["type"] == "rerank":
            query, docs, fmt = P.parse_rerank(msg)
            scores, n_tokens = engine.rerank(query, docs, fmt, truncate=bool(msg["truncate"]))
            self.send(
                {
                    "type": "scores",
                    "id": req_id,
                    "n_tokens": int(n_tokens),
                    "scores": [float(s) for s in scores],
                }
            )
        elif msg["type"] == "score":
            prompts, options = P.parse_score(msg)
            logprobs, n_tokens, n_evaluated = engine.score(prompts, options)
            self.send(
                {
                    "type": "option_scores",
                    "id": req_id,
                    "logprobs": [[float(v) for v in row] for row in logprobs],
                    "n_tokens": int(n_tokens),
                    "n_evaluated": int(n_evaluated),
                }
            )
        elif msg["type"] == "tokenize":
            tokens = engine.tokenize(
                msg["text"],
                add_special=bool(msg["add_special"]),
                parse_special=bool(msg["parse_special"]),
            )
            self.send({"type": "tokens", "id": req_id, "tokens": [int(t) for t in tokens]})
        elif msg["type"] == "detokenize":
            ids = [int(t) for t in msg["tokens"]]
            text = engine.detokenize(ids, special=bool(msg.get("special")))
            self.send({"type": "text", "id": req_id, "text": text})
        elif msg["type"] == "ping":
            self.send({"type": "pong", "id": req_id})
        else:
            raise P.ProtocolError(f"a runner does not accept {msg['type']!r} messages")


def run() -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"runner[{os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )
    out = claim_stdout()
    inbox: Inbox = queue.Queue()
    threading.Thread(
        target=read_stdin, args=(sys.stdin.buffer, inbox), name="runner-stdin", daemon=True
    ).start()
    try:
        return Worker(out, inbox).run()
    except ParentGone as exc:
        log.info("daemon went away (%s); exiting", exc)
        return 0


def main() -> NoReturn:
    from localllm.children import adopt

    adopt()
    try:
        code = run()
    except BaseException:  # whatever it was: report it, then exit below
        traceback.print_exc()
        code = 1
    # os._exit, not SystemExit: the stdin reader thread may sit in a blocking
    # read, and interpreter finalization aborts on a daemon thread holding the
    # stdin buffer lock.  Everything worth keeping is flushed first.
    for stream in (sys.stderr, sys.__stdout__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    os._exit(code)

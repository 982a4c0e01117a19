"""Daemon side of a runner: spawn ``python -m localllm.runner`` and talk to it (asyncio).

One ``RunnerProcess`` is one child holding one loaded model.  A reader task
routes the child's events to per-request queues (streams) or futures (calls).
When the child dies for any reason other than ``close()`` (segfault, OOM kill,
``kill -9``), every request in flight gets ``RunnerCrashed`` and ``alive``
turns False; the scheduler then drops this runner and loads afresh.  The
child's stderr (llama.cpp's log) is drained continuously into the
``localllm.runner`` logger at DEBUG; a failure logs its last lines whole and
tells the client how it ended and why, in one line (see ``runner.lastwords``).

A child that stops showing signs of life (its heartbeat thread goes silent:
SIGSTOP, a native call holding the GIL, a hung driver) for
``LOCALLLM_RUNNER_TIMEOUT`` is killed and treated as crashed, with a message
saying it stopped responding; ``close()`` kills a silent child after a few
missed beats instead of waiting out the grace period (see ``runner.watchdog``).

This module is the child's life: start and load, state, close, wait, kill, and
what its death means.  The requests and their frames are ``runner.traffic``'s;
the request methods hand over to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path

from localllm import children, config
from localllm.errors import LocalLLMError, ModelLoadError, RunnerCrashed, ShuttingDown
from localllm.runner import protocol as P
from localllm.runner.frames import LoadedFrame
from localllm.runner.lastwords import Tail, for_log, lost_workers, scrub_paths, with_reason
from localllm.runner.loadwait import wait_loaded
from localllm.runner.messages import CompletionRequest, Done, LoadOptions, PairFormat, Piece
from localllm.runner.resident import held_now
from localllm.runner.traffic import Traffic
from localllm.runner.watchdog import CLOSE_MISSED_BEATS, Watchdog

log = logging.getLogger("localllm.runner")


class RunnerProcess:
    """A live runner child.  Build with ``await RunnerProcess.start(...)``."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        model_paths: list[str],
        opts: LoadOptions,
        runner_timeout: float = math.inf,
    ) -> None:
        self._proc = proc
        self.model_paths = list(model_paths)
        self.options = opts
        self.info: Mapping[str, object] = {}  # the engine's ``info()``, as it sent it
        self.logged_memory: dict[str, dict[str, int]] = {}  # llama.cpp's buffers, per device
        self.rss_before: int | None = None  # the child's resident bytes before the load
        self.load_duration = 0  # ns, spawn to loaded, as the parent saw it
        self._tail = Tail(self.pid)
        self._alive = True
        self._closing = False
        self._death: str | None = None
        self._stderr_task = asyncio.ensure_future(self._tail.drain(proc.stderr))
        self._pump_task: asyncio.Future[None] | None = None
        self._watchdog = Watchdog(runner_timeout)
        self._traffic = Traffic(proc, self, self._watchdog)
        self._watch_task: asyncio.Future[None] | None = None

    # -- start ---------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        model_paths: list[str],
        opts: LoadOptions,
        *,
        load_timeout: float | None = None,
        runner_timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> RunnerProcess:
        """Spawn a child, load the model, return once it answered ``loaded``.

        Raises ``ModelLoadError`` (with the log's line that says why; the whole
        tail goes to the daemon's log) when the load fails, the child dies,
        ``load_timeout`` (default LOCALLLM_LOAD_TIMEOUT) passes without the load
        making progress (see ``runner.loadwait``), or the child shows
        no sign of life for ``runner_timeout`` (default LOCALLLM_RUNNER_TIMEOUT);
        the child is gone by then.
        """
        if runner_timeout is None:
            runner_timeout = config.RUNNER_TIMEOUT.get()
        timeout = config.LOAD_TIMEOUT.get() if load_timeout is None else load_timeout
        t0 = time.monotonic_ns()
        proc = await children.spawn_async(
            "localllm.runner",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # Own session: a Ctrl-C meant for the daemon must not kill runners
            # behind its back; the daemon ends them itself.
            start_new_session=True,
        )
        runner = cls(proc, model_paths, opts, runner_timeout)
        msg = await runner._load(timeout)
        runner._serve(msg, t0)
        return runner

    async def _load(self, timeout: float) -> LoadedFrame:
        """Send ``load`` and wait for ``loaded``; on any failure end the child and raise
        ``ModelLoadError`` saying why (see ``start``)."""
        name = self._model_file()
        try:
            await self._traffic.send(
                P.load_msg(self.model_paths, self.options, self._watchdog.interval)
            )
            msg = await wait_loaded(
                self._traffic.read_loaded(),
                self.pid,
                timeout,
                last_output=lambda: self._tail.last_output,
            )
        except TimeoutError:
            await self._abandon(wait=0)
            bound = self._watchdog.timeout
            if self._watchdog.enabled and self._watchdog.silent_for() > bound:
                raise self._load_error(
                    f"loading {name} failed: the model runner stopped responding (no sign of "
                    f"life for {self._watchdog.silent_for():.1f}s, LOCALLLM_RUNNER_TIMEOUT is "
                    f"{bound:g}s)"
                ) from None
            raise self._load_error(
                f"loading {name} timed out after {timeout:g}s without progress"
            ) from None
        except (P.ProtocolError, ConnectionError) as exc:
            await self._abandon(wait=1.0)
            raise self._load_error(f"loading {name} failed: {exc}", why=True) from None
        except BaseException:
            await self._abandon(wait=0)  # cancelled by the scheduler: leave nothing behind
            raise
        if msg is None or msg["type"] != "loaded":
            # Let the child finish on its own first, so its exit status is its own.
            await self._abandon(wait=5.0)
            if msg is not None and msg["type"] == "failed":
                # The engine said why; the log would only repeat it.
                raise self._load_error(f"failed to load {name}: {P.parse_failed(msg).message}")
            raise self._load_error(
                f"failed to load {name}: model runner exited during load "
                f"({children.describe_exit(self._proc.returncode)})",
                why=True,
            )
        return msg

    def _serve(self, msg: LoadedFrame, t0: int) -> None:
        """Loaded (``msg``): keep what the child said, start reading it and watching it."""
        self.info = dict(msg["info"])
        self.logged_memory = dict(msg["memory"])
        before = msg.get("rss_before")
        self.rss_before = before if isinstance(before, int) and before > 0 else None
        self.load_duration = time.monotonic_ns() - t0
        self._pump_task = asyncio.ensure_future(self._pump())
        self._watch_task = asyncio.ensure_future(
            self._watchdog.watch(self._stopped_responding, pid=self.pid, on_stuck=self._stuck)
        )
        log.info(
            "runner %d loaded %s in %.2fs", self.pid, self._model_file(), self.load_duration / 1e9
        )

    # -- state ---------------------------------------------------------------

    @property
    def pid(self) -> int:
        return int(self._proc.pid)

    @property
    def alive(self) -> bool:
        return self._alive and self._proc.returncode is None

    @property
    def memory(self) -> dict[str, dict[str, int]]:
        """Bytes per device the model holds now (see ``runner.resident``)."""
        pid = self.pid if self.alive else None
        return held_now(self.logged_memory, self.rss_before, pid)

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @property
    def adapter_loads(self) -> dict[str, int]:
        """LoRA path -> nanoseconds its load took in the child."""
        return self._traffic.adapter_loads

    @property
    def death(self) -> str | None:
        """Why the child died when it was not ended by ``close()``; None otherwise."""
        if self._closing or self.alive:
            return None
        how = children.describe_exit(self._proc.returncode)
        return self._death or f"model runner exited ({how})"

    def _load_error(self, message: str, *, why: bool = False) -> ModelLoadError:
        """The client's error for a failed load (``why``: add the log's reason line);
        the daemon's log gets the message as it was and the child's whole tail."""
        log.error("runner %d: %s%s", self.pid, message, for_log(self.stderr_tail()))
        text = scrub_paths(message)
        return ModelLoadError(with_reason(text, self.stderr_tail()) if why else text)

    def stderr_tail(self) -> list[str]:
        """The child's last log lines (llama.cpp's included)."""
        return list(self._tail.lines)

    # -- requests (``runner.traffic`` carries them) ----------------------------

    def complete(self, req: CompletionRequest) -> AsyncGenerator[Piece | Done, None]:
        """Stream one generation: pieces, then one ``Done``.

        A ``failed`` event raises ``LocalLLMError`` with its status; the child
        dying raises ``RunnerCrashed``.  Leaving the loop early cancels the request.
        """
        return self._traffic.complete(req)

    async def cancel(self, req_id: str) -> None:
        """Ask the engine to stop ``req_id``; its stream ends with ``Done(reason="cancel")``."""
        await self._traffic.cancel(req_id)

    async def embed(
        self, inputs: list[str], truncate: bool = True
    ) -> tuple[Sequence[Sequence[float]], int]:
        return await self._traffic.embed(inputs, truncate)

    async def rerank(
        self, query: str, documents: list[str], fmt: PairFormat, truncate: bool = True
    ) -> tuple[list[float], int]:
        return await self._traffic.rerank(query, documents, fmt, truncate)

    async def score(
        self, prompts: list[str], options: list[list[str]]
    ) -> tuple[list[list[float]], int, int]:
        return await self._traffic.score(prompts, options)

    async def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return await self._traffic.tokenize(text, add_special, parse_special)

    async def detokenize(self, tokens: list[int], special: bool = False) -> str:
        return await self._traffic.detokenize(tokens, special)

    async def ping(self) -> float:
        """Round-trip seconds; the child answers between engine steps."""
        return await self._traffic.ping()

    # -- shutdown ------------------------------------------------------------

    async def close(self, grace: float = 5.0) -> None:
        """Ask the child to exit, then SIGTERM, then SIGKILL.  Idempotent."""
        self._closing = True
        # A healthy child exits within moments and beats until then; one that
        # misses a few beats now is stopped or frozen: kill it, don't wait it out.
        quick = None
        if self._pump_task is not None and self._proc.returncode is None:
            quick = asyncio.ensure_future(
                self._watchdog.watch(
                    self._stopped_responding,
                    pid=self.pid,
                    timeout=CLOSE_MISSED_BEATS * self._watchdog.interval,
                )
            )
        if self._proc.returncode is None:
            with contextlib.suppress(Exception):
                self._traffic.write_nowait({"type": "shutdown"})
                if self._proc.stdin is not None:
                    self._proc.stdin.close()
            for sig, wait in ((None, grace), (signal.SIGTERM, 2.0), (signal.SIGKILL, None)):
                if sig is not None:
                    with contextlib.suppress(ProcessLookupError):
                        self._proc.send_signal(sig)
                try:
                    await asyncio.wait_for(self._proc.wait(), wait)
                    break
                except TimeoutError:
                    continue
        if self._pump_task is not None:
            await self._pump_task
        else:
            self._on_death()
        for task in (quick, self._watch_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 2.0)

    async def wait(self) -> int:
        """Until the child has exited and every request in flight was failed; its exit status."""
        if self._pump_task is not None:
            await asyncio.shield(self._pump_task)
        return await self._proc.wait()

    def kill(self) -> None:
        """SIGKILL the child now (the reader task then fails what is in flight)."""
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()

    # -- internals -----------------------------------------------------------

    def death_error(self) -> LocalLLMError:
        """What a request gets once the child is gone (see ``runner.traffic.Peer``)."""
        if self._closing:
            return ShuttingDown("the model was unloaded while the request was running")
        return RunnerCrashed(self._death or "model runner exited unexpectedly")

    async def lost(self) -> LocalLLMError | None:
        """After a failed write: the error once the reader learnt how the child died."""
        if self._pump_task is None:
            return None
        await asyncio.shield(self._pump_task)  # learn how it died
        return self.death_error()

    def _stopped_responding(self, silence: float) -> None:
        """The watchdog's verdict: kill the child; the reader then fails what is in flight."""
        if self._proc.returncode is not None:
            return
        if self._death is None:
            bound = (
                "while it was being unloaded"
                if self._closing
                else f"LOCALLLM_RUNNER_TIMEOUT is {self._watchdog.timeout:g}s"
            )
            self._death = (
                f"model runner stopped responding (no sign of life for "
                f"{silence:.1f}s; {bound}) and was killed"
            )
            log.error("runner %d (%s): %s", self.pid, self._model_file(), self._death)
        self.kill()

    def _stuck(self, busy: float) -> None:
        """One step ran far past its kind (see ``runner.watchdog``): kill as for silence."""
        if self._proc.returncode is not None:
            return
        if self._death is None:
            self._death = (
                f"model runner stuck: one engine step ran {busy:.0f}s, past "
                f"{self._watchdog.step_bound():.0f}s (8x its slowest step, and at "
                "least 10x LOCALLLM_RUNNER_TIMEOUT); it was killed"
            )
            log.error("runner %d (%s): %s", self.pid, self._model_file(), self._death)
        self.kill()

    def _model_file(self) -> str:
        return Path(self.model_paths[0]).name if self.model_paths else "<no model>"

    async def _pump(self) -> None:
        try:
            await self._traffic.pump()
        except Exception as exc:  # a malformed frame, or a bug in dispatching one
            log.exception("runner %d: bad message from the runner; killing it", self.pid)
            self._death = f"model runner sent a malformed message ({exc}); it was stopped"
            self.kill()
        self._alive = False
        await self._proc.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        # Connecting to each worker takes up to half a second: not on the event loop.
        lost = (
            await asyncio.to_thread(lost_workers, self.options.rpc_workers)
            if self._death is None and not self._closing and self.options.rpc_workers
            else ""
        )
        self._on_death(lost)

    def _on_death(self, lost: str = "") -> None:
        self._alive = False
        if self._death is None:
            ended = f"model runner exited unexpectedly ({children.describe_exit(self.returncode)})"
            # Why: a lost worker (ggml aborts then), else the log's line; SIGKILL leaves none.
            killed = self.returncode == -signal.SIGKILL
            self._death = ended + lost if lost or killed else with_reason(ended, self.stderr_tail())
            if not self._closing:
                log.error("runner %d: %s%s", self.pid, ended + lost, for_log(self.stderr_tail()))
        self._traffic.fail_all(self.death_error)

    async def _abandon(self, wait: float) -> None:
        """End a child that did not load (after ``wait`` seconds) and collect its last words."""
        self._closing = True
        self._alive = False
        with contextlib.suppress(Exception):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        if wait > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._proc.wait(), wait)
        if self._proc.returncode is None:
            self.kill()
            await self._proc.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 2.0)

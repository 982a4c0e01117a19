"""RunnerProcess against a fake engine: streaming, calls, cancel, crashes, timeouts."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket

import pytest

from localllm.errors import (
    InvalidRequest,
    LocalLLMError,
    ModelLoadError,
    RunnerCrashed,
    ShuttingDown,
)
from localllm.runner.messages import Done, LoadOptions, Piece
from localllm.runner.process import RunnerProcess
from tests.support.fake_engine import HOME_PATH, LAST_WORDS
from tests.support.procs import children_of
from tests.support.runners import FAKE_ENV, arun, collect, greedy, pid_alive, running, start_fake


def test_stream_calls_and_close() -> None:
    async def go() -> None:
        async with running(start_fake()) as runner:
            assert runner.alive and runner.pid > 0
            assert runner.info == {"engine": "fake", "n_ctx": 128}
            assert runner.memory["CPU"]["kv"] == 20
            assert runner.load_duration > 0
            pieces: list[Piece] = []
            done: Done | None = None
            async for ev in runner.complete(greedy("a", "hi", 4)):
                if isinstance(ev, Piece):
                    pieces.append(ev)
                else:
                    done = ev
            assert "".join(p.text for p in pieces) == "0 1 2 3 "
            assert pieces[0].top_logprobs == [("0 ", -0.5)]
            assert done is not None and done.reason == "length" and done.eval_count == 4
            # Rows are tuples (the collector stops tracking them).
            assert await runner.embed(["ab", "cde"]) == ([(2.0, 1.0), (3.0, 1.0)], 5)
            assert await runner.tokenize("hi") == [1, 104, 105]
            assert await runner.tokenize("hi", add_special=False) == [104, 105]
            assert await runner.detokenize([1, 104, 105]) == "hi"
            assert await runner.ping() < 5
            # The fake printed to fd 1 while loading: the stream survived, the text is logged.
            assert any("native noise" in line for line in runner.stderr_tail())
        assert not runner.alive and runner.returncode == 0
        assert any("fake engine closed" in line for line in runner.stderr_tail())
        await runner.close()  # idempotent

    arun(go())


def test_concurrent_requests_and_errors() -> None:
    async def go() -> None:
        async with running(start_fake(n_parallel=3)) as runner:
            results = await asyncio.gather(
                *(collect(runner, greedy(f"r{i}", "x", 3 + i)) for i in range(3))
            )
            assert [text for text, _ in results] == ["0 1 2 ", "0 1 2 3 ", "0 1 2 3 4 "]
            with pytest.raises(InvalidRequest, match="bad prompt"):
                await collect(runner, greedy("b", "bad", 3))
            with pytest.raises(InvalidRequest, match="empty prompt"):  # submit raised
                await collect(runner, greedy("e", "", 3))
            with pytest.raises(InvalidRequest, match="empty input"):
                await runner.embed(["", "x"])
            # Errors failed only their own request: the runner still serves.
            assert (await collect(runner, greedy("ok", "x", 2)))[0] == "0 1 "

    arun(go())


def test_cancel_and_early_exit() -> None:
    async def go() -> None:
        async with running(start_fake()) as runner:
            stream = runner.complete(greedy("c", "x", -1))
            seen = 0
            async for ev in stream:
                if isinstance(ev, Piece):
                    seen += 1
                    if seen == 3:
                        await runner.cancel("c")
                else:
                    assert ev.reason == "cancel" and ev.eval_count >= 3
            # Breaking out of a stream cancels it in the engine.
            gen = runner.complete(greedy("d", "x", -1))
            async for _ in gen:
                break
            await gen.aclose()
            # The id can be used again at once: the old stream's late Done(cancel)
            # does not leak into the new one.
            assert (await collect(runner, greedy("d", "x", 2)))[0] == "0 1 "

    arun(go())


def test_duplicate_request_id_refused() -> None:
    async def go() -> None:
        async with running(start_fake()) as runner:
            gen = runner.complete(greedy("same", "x", -1))
            await gen.__anext__()
            with pytest.raises(InvalidRequest, match="already running"):
                await collect(runner, greedy("same", "x", 2))
            await gen.aclose()

    arun(go())


def test_kill_9_mid_stream_then_fresh_runner() -> None:
    async def go() -> None:
        runner = await start_fake()
        other = asyncio.ensure_future(collect(runner, greedy("other", "x", -1)))
        n = 0
        with pytest.raises(RunnerCrashed, match=r"signal 9, SIGKILL"):
            async for _ in runner.complete(greedy("k", "x", -1)):
                n += 1
                if n == 2:
                    os.kill(runner.pid, signal.SIGKILL)
        with pytest.raises(RunnerCrashed):
            await other  # every request in flight gets it
        assert not runner.alive
        with pytest.raises(RunnerCrashed):
            await runner.tokenize("x")
        await runner.close()
        async with running(start_fake()) as fresh:
            assert (await collect(fresh, greedy("k", "x", 2)))[0] == "0 1 "

    arun(go())


def test_segfault_and_engine_exception_fail_in_flight() -> None:
    async def go() -> None:
        runner = await start_fake()
        with pytest.raises(RunnerCrashed, match="SIGSEGV"):
            await collect(runner, greedy("s", "segv", -1))
        runner = await start_fake()
        with pytest.raises(LocalLLMError, match="engine error: boom"):
            await collect(runner, greedy("b", "boom", -1))
        assert await runner.wait() == 70 and not runner.alive
        await runner.close()

    arun(go())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_load_failures(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="localllm.runner")

    async def go() -> None:
        with pytest.raises(ModelLoadError, match=r"failed to load x-failload\.gguf: .*not a GGUF"):
            await start_fake("/m/x-failload.gguf")
        with pytest.raises(ModelLoadError, match=r"exited during load \(signal 11, SIGSEGV\)"):
            await start_fake("/m/crashload.gguf")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        # Long enough for the child to start and log under load, short for the suite.
        with pytest.raises(ModelLoadError, match=r"timed out after 2s") as info:
            await start_fake("/m/slowload.gguf", load_timeout=2)
        assert loop.time() - t0 < 20
        # The log tail explains it in the daemon's log, not in the client's message.
        assert "fake engine loading" not in str(info.value)
        assert "fake engine loading /m/slowload.gguf" in caplog.text

    arun(go())


# -- what a failure tells the client: how and why, never the log tail or a path --------


def _no_log_tail(message: str) -> None:
    assert "/home/alice" not in message and "#28" not in message and "0x0000" not in message
    assert "last log lines" not in message and "\n" not in message


def test_a_load_that_aborts_says_why_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        with pytest.raises(ModelLoadError) as info:
            await start_fake("/home/alice/models/abortload.gguf")
        message = str(info.value)
        assert message == (
            "failed to load abortload.gguf: model runner exited during load "
            "(signal 6, SIGABRT): ggml_backend_cpu_buffer_type_alloc_buffer: "
            "failed to allocate buffer of size 1099511627776"
        )
        _no_log_tail(message)
        # The daemon's log has all of it.
        assert all(line in caplog.text for line in LAST_WORDS)

    caplog.set_level(logging.ERROR, logger="localllm.runner")
    arun(go())


def test_a_runner_that_dies_mid_stream_tells_the_client_how_not_its_backtrace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="localllm.runner")

    async def go() -> None:
        # ggml aborts the runner when an RPC worker vanishes: that worker is the reason.
        gone = f"127.0.0.1:{free_port()}"
        runner = await RunnerProcess.start(
            ["/m/fake.gguf"],
            LoadOptions(n_ctx=128, n_parallel=2, n_threads=1, rpc_workers=[gone]),
            env=FAKE_ENV,
        )
        with pytest.raises(RunnerCrashed) as info:
            await collect(runner, greedy("a", "abort", -1))
        assert str(info.value) == (
            f"model runner exited unexpectedly (signal 6, SIGABRT): lost RPC worker {gone}"
        )
        await runner.close()
        # Without workers, the log's line that says why, paths cut to file names.
        runner = await start_fake()
        with pytest.raises(RunnerCrashed) as info:
            await collect(runner, greedy("a", "abort", -1))
        message = str(info.value)
        assert message.startswith("model runner exited unexpectedly (signal 6, SIGABRT): ")
        assert "failed to allocate buffer" in message
        _no_log_tail(message)
        await runner.close()
        assert all(line in caplog.text for line in LAST_WORDS)
        # SIGKILL (the OOM killer, kill -9) leaves the child no time to say why: an
        # earlier error line in its log is not the reason.
        runner = await start_fake()
        n = 0
        with pytest.raises(RunnerCrashed) as info:
            async for _ in runner.complete(greedy("n", "noisy", -1)):
                n += 1
                if n == 4:
                    os.kill(runner.pid, signal.SIGKILL)
        assert any("transient failure" in line for line in runner.stderr_tail())
        assert str(info.value) == "model runner exited unexpectedly (signal 9, SIGKILL)"
        await runner.close()

    arun(go())


def test_a_failed_request_loses_its_paths_not_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="localllm.runner")

    async def go() -> None:
        async with running(start_fake()) as runner:
            with pytest.raises(LocalLLMError) as info:
                await collect(runner, greedy("p", "pathboom", -1))
            assert info.value.status == 500
            assert str(info.value) == "engine error: cannot read sha256-1234abcd.lora"
        assert f"cannot read {HOME_PATH}.lora" in caplog.text

    arun(go())


def test_cancelled_load_leaves_no_child() -> None:
    async def go() -> None:
        task = asyncio.ensure_future(start_fake("/m/slowload.gguf"))
        for _ in range(100):  # until the child exists
            if children_of(os.getpid()):
                break
            await asyncio.sleep(0.05)
        assert children_of(os.getpid())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Killed and reaped before the cancellation reached us.
        assert not [pid for pid in children_of(os.getpid()) if pid_alive(pid)]

    arun(go())


def test_close_during_a_stream_ends_it_cleanly() -> None:
    async def go() -> None:
        runner = await start_fake()
        stream = runner.complete(greedy("long", "x", -1))
        await stream.__anext__()
        await runner.close()
        with pytest.raises(ShuttingDown, match="unloaded"):
            async for _ in stream:
                pass
        assert runner.returncode == 0
        with pytest.raises(ShuttingDown):
            await runner.tokenize("x")

    arun(go())


def test_garbage_from_the_child_fails_requests_and_stops_it() -> None:
    async def go() -> None:
        runner = await start_fake()
        stream = runner.complete(greedy("g", "x", -1))
        await stream.__anext__()
        # Freeze the child, let the reader consume every whole frame it wrote
        # (each is one small atomic pipe write), then forge a malformed one.
        os.kill(runner.pid, signal.SIGSTOP)
        await asyncio.sleep(0.3)
        assert runner._proc.stdout is not None
        runner._proc.stdout.feed_data(b"\x00\x00\x00\x03}}}")
        with pytest.raises(RunnerCrashed, match="malformed message"):
            async for _ in stream:
                pass
        assert await runner.wait() == -signal.SIGKILL and not runner.alive
        await runner.close()

    arun(go())

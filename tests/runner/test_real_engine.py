"""The runner around the real engine on the tiny deterministic model
(tests/support/tinymodel.py)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
from pathlib import Path

import pytest

from localllm.errors import ModelLoadError, RunnerCrashed
from localllm.runner.messages import Done, LoadOptions, Piece
from localllm.runner.process import RunnerProcess
from tests.support import tinymodel as tm
from tests.support.orphans import check_parent_sigkill
from tests.support.runners import arun, collect, greedy, running

REPO = Path(__file__).resolve().parents[2]

OPTS = LoadOptions(n_ctx=512, n_parallel=4, n_batch=256, n_ubatch=256, n_threads=2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tm.make_tiny_model(tmp_path_factory.mktemp("tiny")))


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


async def start(path: str, opts: LoadOptions = OPTS, timeout: float = 60) -> RunnerProcess:
    return await RunnerProcess.start([path], opts, load_timeout=timeout)


def test_greedy_stream_timings_and_calls(tiny: str) -> None:
    async def go() -> None:
        async with running(start(tiny)) as runner:
            assert runner.alive and runner.load_duration > 0 and runner.memory
            pieces: list[Piece] = []
            done: Done | None = None
            async for ev in runner.complete(greedy("g", "hello")):
                if isinstance(ev, Piece):
                    pieces.append(ev)
                else:
                    done = ev
            assert "".join(p.text for p in pieces) == tm.GREEDY["hello"]
            assert done is not None and done.reason == "stop"
            assert done.prompt_tokens == 1 + len("hello")
            assert done.eval_count >= len(tm.GREEDY["hello"])
            assert done.prompt_eval_ns > 0 and done.eval_ns > 0
            # Multi-byte characters arrive whole, though split over tokens.
            assert (await collect(runner, greedy("u", "0")))[0] == tm.GREEDY["0"]
            text, done = await collect(runner, greedy("n", "A", 5))
            assert text == "AAAAA" and done.reason == "length"
            tokens = await runner.tokenize("ab")
            assert tokens == [tm.BOS, tm.token_id("a"), tm.token_id("b")]
            assert await runner.tokenize("ab", add_special=False) == tokens[1:]
            assert await runner.detokenize(tokens[1:]) == "ab"
            # Control tokens are left out, or written out when asked (/api/detokenize).
            assert await runner.detokenize(tokens) == "ab"
            assert await runner.detokenize(tokens, special=True) == "<s>ab"
        assert runner.returncode == 0

    arun(go(), 120)


def test_concurrent_requests_share_one_runner(tiny: str) -> None:
    prompts = ["a", "x", "hello", "0", "5", "."]

    async def go() -> None:
        async with running(start(tiny)) as runner:
            results = await asyncio.gather(
                *(collect(runner, greedy(f"c{i}", p)) for i, p in enumerate(prompts))
            )
            assert [t for t, _ in results] == [tm.GREEDY[p] for p in prompts]

    arun(go(), 120)


def test_cancel_mid_stream(tiny: str) -> None:
    async def go() -> None:
        async with running(start(tiny)) as runner:
            n = 0
            done: Done | None = None
            async for ev in runner.complete(greedy("c", "A")):  # loops until cancelled
                if isinstance(ev, Piece):
                    n += 1
                    if n == 3:
                        await runner.cancel("c")
                else:
                    done = ev
            assert done is not None and done.reason == "cancel"
            assert (await collect(runner, greedy("after", "x")))[0] == "yz"

    arun(go(), 120)


def test_embeddings(tmp_path: Path) -> None:
    path = str(tm.make_tiny_model(tmp_path, pooling="mean"))

    async def go() -> None:
        opts = LoadOptions(n_ctx=256, n_parallel=1, n_threads=2, embedding=True)
        async with running(start(path, opts)) as runner:
            vectors, n_tokens = await runner.embed(["ab", "ab", "cd"])
            assert len(vectors) == 3 and len(vectors[0]) == tm.N_EMBD
            assert n_tokens == 9  # BOS + 2 characters, three times
            assert cosine(vectors[0], vectors[1]) == pytest.approx(1.0, abs=1e-3)
            # Mean-pooled one-hot tokens: only BOS is shared among 3 tokens each.
            assert cosine(vectors[0], vectors[2]) == pytest.approx(1 / 3, abs=1e-2)

    arun(go(), 120)


@pytest.mark.parametrize("damage", ["truncated", "not_gguf"])
def test_bad_gguf_is_a_clear_load_error(tiny: str, tmp_path: Path, damage: str) -> None:
    bad = tmp_path / "bad.gguf"
    data = Path(tiny).read_bytes()
    bad.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"hello world" * 100)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(ModelLoadError, match=r"failed to load bad\.gguf") as info:
            await start(str(bad), timeout=60)
        assert loop.time() - t0 < 30
        message = str(info.value)
        assert "Traceback" not in message and len(message) < 2000
        assert ("corrupted" if damage == "truncated" else "GGUF") in message
        # The file by its name: the folders above it (the user's home) stay in the log.
        assert str(tmp_path) not in message and "last log lines" not in message

    arun(go(), 90)


def test_load_timeout(tiny: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound is on a stall (runner/loadwait.py): with the child's progress hidden,
    # a load longer than it is given up.
    from localllm.runner import loadwait

    monkeypatch.setattr(loadwait, "activity", lambda pid: (0, 0, 0))

    async def go() -> None:
        with pytest.raises(ModelLoadError, match="timed out"):
            await start(tiny, timeout=0.05)

    arun(go(), 60)


def test_kill_9_mid_stream_then_reload(tiny: str) -> None:
    opts = LoadOptions(n_ctx=2048, n_parallel=1, n_threads=2)

    async def go() -> None:
        runner = await start(tiny, opts)
        n = 0
        with pytest.raises(RunnerCrashed, match=r"exited unexpectedly \(signal 9, SIGKILL\)"):
            async for ev in runner.complete(greedy("k", "A")):  # ~2000 tokens if not killed
                assert isinstance(ev, Piece)
                n += 1
                if n == 2:
                    os.kill(runner.pid, signal.SIGKILL)
        assert not runner.alive
        await runner.close()
        async with running(start(tiny, opts)) as fresh:
            assert (await collect(fresh, greedy("k", "hello")))[0] == tm.GREEDY["hello"]

    arun(go(), 120)


def test_parent_sigkill_child_exits_real(tiny: str) -> None:
    check_parent_sigkill(tiny, "real")

"""Offload through ggml's device machinery: the engine on loopback RPC "GPUs" (see rpcworker).

Each test compares against the same model run on the CPU alone: greedy text
and logprobs must match, because the remote device runs the same kernels.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.runner.messages import (
    CompletionRequest,
    Done,
    LoadOptions,
    Piece,
    SamplingParams,
)
from tests.support.rpcworker import Worker, start_worker
from tests.support.tinymodel import expected_greedy, make_tiny_model

pytestmark = pytest.mark.gpu

N_LAYER = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("rpc-model"), attention=True, n_layer=N_LAYER)


@pytest.fixture
def workers(
    rpc_backends: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Worker, Worker]]:
    monkeypatch.setenv("LOCALLLM_BACKENDS", str(rpc_backends))
    with start_worker(rpc_backends, tmp_path) as a, start_worker(rpc_backends, tmp_path) as b:
        yield a, b


def generate(
    model: Path, opts: LoadOptions, prompt: str = "abc"
) -> tuple[str, list[float], dict[str, dict[str, int]]]:
    with Engine([str(model)], opts) as e:
        e.submit(
            CompletionRequest(
                id="r",
                prompt=prompt,
                num_predict=12,
                logprobs=1,
                sampling=SamplingParams(temperature=0),
            )
        )
        text, lps = "", []
        for _ in range(500):
            for ev in e.step():
                if isinstance(ev, Piece):
                    text += ev.text
                    lps.append(ev.logprob or 0.0)
                elif isinstance(ev, Done):
                    return text, lps, e.memory_report()
    raise AssertionError("no Done event")


def test_all_layers_on_one_rpc_device_match_the_cpu(
    model: Path, workers: tuple[Worker, Worker]
) -> None:
    a, _ = workers
    cpu_text, cpu_lps, cpu_mem = generate(model, LoadOptions(n_ctx=128))
    text, lps, mem = generate(
        model,
        LoadOptions(
            n_ctx=128,
            n_gpu_layers=N_LAYER + 1,
            devices=[a.device],
            split_mode="none",
            rpc_workers=[a.endpoint],
        ),
    )
    assert text == cpu_text == expected_greedy("abc", 12)
    assert lps == pytest.approx(cpu_lps, abs=1e-4)
    remote = [d for d in mem if a.endpoint in d]
    assert remote and mem[remote[0]].get("model", 0) > 0 and mem[remote[0]].get("kv", 0) > 0
    assert not any(a.endpoint in d for d in cpu_mem)


def test_layers_split_over_two_workers_and_the_cpu(
    model: Path, workers: tuple[Worker, Worker]
) -> None:
    a, b = workers
    cpu_text, cpu_lps, _ = generate(model, LoadOptions(n_ctx=128))
    # llama.cpp's count: 4 = three repeating layers + the output layer; the first layer
    # stays on the CPU.  Shares 1:3 over those 4 give a layer 1, b layers 2-3 and the output.
    text, lps, mem = generate(
        model,
        LoadOptions(
            n_ctx=128,
            n_gpu_layers=4,
            devices=[a.device, b.device],
            tensor_split=[1.0, 3.0],
            rpc_workers=[a.endpoint, b.endpoint],
        ),
    )
    assert text == cpu_text
    assert lps == pytest.approx(cpu_lps, abs=1e-4)
    kv = {
        ep: sum(v.get("kv", 0) for d, v in mem.items() if ep in d)
        for ep in (a.endpoint, b.endpoint)
    }
    cpu_kv = sum(v.get("kv", 0) for d, v in mem.items() if "RPC" not in d)
    # KV is per layer: one layer's worth on a, two on b, one on the CPU (the log rounds
    # to 0.01 MiB, hence approx).
    assert kv[a.endpoint] > 0
    assert kv[b.endpoint] == pytest.approx(2 * kv[a.endpoint], rel=0.02)
    assert cpu_kv == pytest.approx(kv[a.endpoint], rel=0.02)


def test_tensor_overrides_keep_matching_weights_in_host_memory(
    model: Path, workers: tuple[Worker, Worker]
) -> None:
    """The MoE mechanism (``n_cpu_moe``'s buffer overrides), shown on dense FFN weights."""
    from localllm.engine.model import Model

    a, _ = workers
    from localllm.engine import plugins

    plugins.prepare([a.endpoint])
    (idx,) = plugins.resolve([a.device])
    plain = Model([str(model)], n_gpu_layers=N_LAYER + 1, devices=[idx], split_mode="none")
    kept = Model(
        [str(model)],
        n_gpu_layers=N_LAYER + 1,
        devices=[idx],
        split_mode="none",
        cpu_patterns=[r"blk\.[0-9]+\.ffn_(up|down|gate)"],
    )
    try:
        from localllm.engine.model import buffer_sizes

        def host(log: str) -> int:
            return sum(v.get("model", 0) for d, v in buffer_sizes(log).items() if "RPC" not in d)

        # Four layers of three FFN matrices (64 x 384 f32 each) moved to RAM.
        assert host(kept.load_log) - host(plain.load_log) >= 4 * 3 * 64 * 384 * 4 * 0.9
    finally:
        plain.close()
        kept.close()


def test_a_missing_worker_fails_the_load_with_its_name(
    model: Path, workers: tuple[Worker, Worker]
) -> None:
    from localllm.errors import LocalLLMError
    from tests.support.rpcworker import free_port

    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(LocalLLMError, match=dead):
        Engine(
            [str(model)],
            LoadOptions(
                n_ctx=128, n_gpu_layers=N_LAYER + 1, devices=[f"RPC[{dead}]"], rpc_workers=[dead]
            ),
        )

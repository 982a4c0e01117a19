"""What ``ps`` says a model holds: llama.cpp's buffers, host compute as far as it is resident.

The real-runner tests load a generated model of ~65 MB of f32 weights plus
~70 MB of KV cache (the tiny model with 24 layers) and compare the runner's
report with its resident-set growth, read independently from
``/proc/<pid>/status``: ``VmRSS`` now minus ``VmRSS`` just before the load
(sent by the child).  ``VmRSS`` is ``RssAnon + RssFile + RssShmem``, so weights
loaded with mmap count through their file-backed pages (llama.cpp reads every
page at load); with ``use_mmap`` off they are anonymous memory instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from localllm.runner.messages import LoadOptions
from localllm.runner.process import RunnerProcess
from localllm.runner.resident import (
    held_now,
    is_host,
    resident_memory,
    rss_bytes,
    with_gpu_runtime,
)
from tests.support import tinymodel as tm
from tests.support.runners import arun, collect, greedy, running

MiB = 1 << 20
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_host_compute_counts_only_what_is_resident() -> None:
    logged = {
        "CPU": {"model": 300, "kv": 100, "compute": 500},
        "CUDA0": {"model": 1000, "kv": 50, "compute": 200},
    }
    # 450 resident: weights and KV (400) in full, 50 of the compute reserve.
    got = resident_memory(logged, 450)
    assert got["CPU"] == {"model": 300, "kv": 100, "compute": 50}
    assert got["CUDA0"] == logged["CUDA0"]  # a GPU allocation is memory taken
    # Never more than llama.cpp allocated, never below weights and KV.
    assert resident_memory(logged, 10_000)["CPU"]["compute"] == 500
    assert resident_memory(logged, 100)["CPU"] == {"model": 300, "kv": 100, "compute": 0}
    # Unknown growth (no /proc): the logged sizes stand.
    assert resident_memory(logged, None) == logged
    assert logged["CPU"]["compute"] == 500  # not mutated


def test_the_prompt_cache_counts_as_it_fills_after_the_compute_reserve() -> None:
    logged = {"CPU": {"model": 300, "kv": 100, "compute": 500, "cache": 1000}}
    assert resident_memory(logged, 450)["CPU"] == {
        "model": 300,
        "kv": 100,
        "compute": 50,
        "cache": 0,
    }
    assert resident_memory(logged, 1200)["CPU"]["cache"] == 300
    assert resident_memory(logged, 10_000)["CPU"]["cache"] == 1000  # never past its budget


def test_the_cuda_runtime_s_own_bytes_are_added_to_the_cuda_devices() -> None:
    logged = {
        "CPU": {"model": 100},
        "CUDA0": {"model": 600, "kv": 100, "compute": 100},
        "CUDA1": {"model": 200},
        "CUDA_Host": {"compute": 50},
    }
    # NVML's figure for the runner, per GPU in its own order: 1,600 bytes in all,
    # 600 more than the 1,000 llama.cpp allocated on the two GPUs.
    held = with_gpu_runtime(logged, [400, 1200])
    assert held["CUDA0"]["runtime"] == 480 and held["CUDA1"]["runtime"] == 120
    assert "runtime" not in held["CPU"] and "runtime" not in held["CUDA_Host"]
    assert sum(sum(held[d].values()) for d in ("CUDA0", "CUDA1")) == 1600
    assert "runtime" not in logged["CUDA0"]  # a copy
    # Unknown (no NVIDIA driver), or nothing beyond the buffers: the logged sizes stand.
    assert with_gpu_runtime(logged, None) == logged
    assert with_gpu_runtime(logged, [500, 400]) == logged
    assert with_gpu_runtime({"CPU": {"model": 1}}, [100]) == {"CPU": {"model": 1}}


def test_host_device_names() -> None:
    assert all(is_host(d) for d in ("CPU", "CPU_Mapped", "CUDA_Host", "BLAS"))
    assert not any(is_host(d) for d in ("CUDA0", "Metal", "RPC0[gpu-box:50052]"))


@linux_only
def test_rss_of_a_process() -> None:
    own = rss_bytes()
    assert own is not None and own > MiB
    assert rss_bytes(2**22 + 12345) is None  # no such process
    assert held_now({"CPU": {"compute": 5}}, None, 1) == {"CPU": {"compute": 5}}


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tm.make_tiny_model(tmp_path_factory.mktemp("deep"), n_layer=24))


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out


@linux_only
@pytest.mark.parametrize(
    ("mmap", "n_ctx", "fa"),
    [
        (True, 1024, "auto"),
        (False, 1024, "auto"),
        # Without flash attention the compute reserve holds a 512 x 4096-cell score
        # matrix per head (61 MiB): llama.cpp's logged total is ~24% over the RSS.
        (True, 2048, "off"),
    ],
)
def test_reported_size_is_within_10_percent_of_rss_growth(
    deep: str, mmap: bool, n_ctx: int, fa: str
) -> None:
    opts = LoadOptions(n_ctx=n_ctx, n_parallel=2, n_threads=1, use_mmap=mmap, flash_attn=fa)  # type: ignore[arg-type]

    async def go() -> None:
        async with running(RunnerProcess.start([deep], opts, load_timeout=120)) as runner:
            assert runner.rss_before is not None
            status = _status(runner.pid)
            growth = status["VmRSS"] - runner.rss_before
            logged = runner.logged_memory["CPU"]
            reported = runner.memory
            size = sum(sum(p.values()) for p in reported.values())
            assert abs(size - growth) <= 0.1 * growth, (reported, logged, status, growth)
            # Not an echo of the RSS: weights and KV alone (what llama.cpp logged,
            # uncapped) are within 10% of the growth too.
            held = logged["model"] + logged["kv"]
            assert abs(held - growth) <= 0.1 * growth, (logged, growth)
            assert logged["model"] > 60 * MiB and logged["kv"] == 24 * 3 * MiB * n_ctx // 1024
            if fa == "off":  # what ps said before: every logged byte
                assert sum(logged.values()) > 1.15 * growth, (logged, growth)
            if mmap:  # the weights are file-backed pages of the GGUF
                assert status["RssFile"] >= 0.9 * logged["model"], status
            else:
                assert status["RssAnon"] >= 0.9 * held, status
            # A request touches compute pages: the figure may grow, never past the log.
            await collect(runner, greedy("r", "hello"))
            after = runner.memory["CPU"]
            assert reported["CPU"]["compute"] <= after["compute"] <= logged["compute"]
            assert after["model"] == logged["model"] and after["kv"] == logged["kv"]

    arun(go(), timeout=180)

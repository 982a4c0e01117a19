"""Ollama's variables read when ours are unset, the way Ollama reads them, and each one's effect.

Per variable: the value syntax of Ollama's envconfig (Go's strconv rules, quotes
trimmed), then the place the setting takes effect: the planner's inputs
(GPU overhead, spread, library), the runner's load timeout, the store's pruning,
the log levels, the scheduler's queue.  The daemon end to end, with a copied
Ollama service environment, is tests/server/test_ollama_env_daemon.py; the
REPL's history is tests/cli/test_run_flags.py.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest

from localllm import config
from localllm.hardware.cpu import CPUInfo
from localllm.hardware.detect import Device, Hardware
from localllm.hardware.rpc import WorkerStatus, endpoint_of
from localllm.ollama_env import IGNORED
from localllm.runner.messages import LoadOptions
from localllm.scheduler.placement import make_plan_fn
from localllm.scheduler.plan_types import PlanOptions
from localllm.scheduler.scheduler import ModelSpec, Placement
from localllm.store.local import Store
from localllm.store.manifests import Manifest, Media
from localllm.store.names import parse_name
from tests.support.shapes import ALL_SHAPES, GiB, cpu, cuda, gpu, rpc

L8B = ALL_SHAPES["llama3.1-8b"]


@pytest.fixture(autouse=True)
def _no_localllm_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ours win over Ollama's: none of ours may be set for these tests.
    for setting in config.REGISTRY:
        if setting.ollama:
            monkeypatch.delenv(setting.name, raising=False)


# -- value syntax: what Ollama's envconfig makes of each value ----------------------

CASES: list[tuple[str, str, Any]] = [
    ("OLLAMA_KV_CACHE_TYPE", "q8_0", "q8_0"),
    ("OLLAMA_KV_CACHE_TYPE", "Q4_0", "q4_0"),  # Ollama lower-cases it
    ("OLLAMA_KV_CACHE_TYPE", '"q8_0"', "q8_0"),  # quotes trimmed (a compose file keeps them)
    ("OLLAMA_MAX_QUEUE", "64", 64),
    ("OLLAMA_MAX_QUEUE", "1k", 512),  # Go's ParseUint refuses it: Ollama's default
    ("OLLAMA_LOAD_TIMEOUT", "10m", 600.0),
    ("OLLAMA_LOAD_TIMEOUT", "600", 600.0),  # a bare integer is seconds
    ("OLLAMA_LOAD_TIMEOUT", "0", math.inf),  # zero or negative: no limit
    ("OLLAMA_LOAD_TIMEOUT", "-1s", math.inf),
    ("OLLAMA_GPU_OVERHEAD", "1073741824", 1 << 30),
    ("OLLAMA_GPU_OVERHEAD", "1GiB", 0),  # bytes only for Ollama: ignored, as there
    ("OLLAMA_SCHED_SPREAD", "1", True),
    ("OLLAMA_SCHED_SPREAD", "F", False),
    ("OLLAMA_SCHED_SPREAD", "yes", True),  # not a Go boolean: true, as in Ollama
    ("OLLAMA_SCHED_SPREAD", "no", True),
    ("OLLAMA_NOPRUNE", "true", True),
    ("OLLAMA_NOPRUNE", "0", False),
    ("OLLAMA_NOHISTORY", "TRUE", True),
    ("OLLAMA_NOHISTORY", "False", False),
    ("OLLAMA_DEBUG", "1", 1),
    ("OLLAMA_DEBUG", "true", 1),
    ("OLLAMA_DEBUG", "2", 2),  # TRACE
    ("OLLAMA_DEBUG", "-1", -1),  # WARN
    ("OLLAMA_DEBUG", "false", 0),
    ("OLLAMA_DEBUG", "verbose", 0),  # Ollama: neither a bool nor a number = INFO
    ("OLLAMA_LLM_LIBRARY", "cuda_v12", "cuda"),
    ("OLLAMA_LLM_LIBRARY", "cuda_jetpack6", "cuda"),
    ("OLLAMA_LLM_LIBRARY", "rocm_v6", "rocm"),
    ("OLLAMA_LLM_LIBRARY", "vulkan", "vulkan"),
    ("OLLAMA_LLM_LIBRARY", "cpu_avx2", "cpu"),
    ("OLLAMA_LLM_LIBRARY", "mlx_cuda_v13", ""),  # Ollama's GGML discovery ignores mlx_*
    ("OLLAMA_LLM_LIBRARY", "opencl", "cpu"),  # no such library folder: Ollama finds no GPU
]
BY_OLLAMA = {s.ollama: s for s in config.REGISTRY if s.ollama}


@pytest.mark.parametrize(("var", "raw", "want"), CASES, ids=[f"{v}={r}" for v, r, _ in CASES])
def test_ollama_value_syntax(
    var: str, raw: str, want: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    setting = BY_OLLAMA[var]
    monkeypatch.setenv(var, raw)
    assert setting.get() == want
    assert (setting.name, var) in config.ollama_fallbacks()  # the start-up log names it
    monkeypatch.setenv(setting.name, str(setting.default) or "auto")
    assert setting.get() == setting.default  # ours, even at its default, wins


def test_odd_values_say_what_they_became(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OLLAMA_NOPRUNE", "no")
    monkeypatch.setenv("OLLAMA_LLM_LIBRARY", "opencl")
    monkeypatch.setenv("OLLAMA_GPU_OVERHEAD", "1GiB")
    with caplog.at_level(logging.WARNING, logger="localllm.config"):
        config.NOPRUNE.get(), config.LLM_LIBRARY.get(), config.GPU_OVERHEAD.get()
    text = caplog.text
    assert "OLLAMA_NOPRUNE='no' is not a Go boolean: Ollama takes it as true" in text
    assert "OLLAMA_LLM_LIBRARY='opencl' names no GPU library" in text
    assert "ignoring OLLAMA_GPU_OVERHEAD='1GiB'" in text


def test_ours_take_our_syntax() -> None:
    assert config.parse_debug_level("trace") == 2 and config.parse_debug_level("on") == 1
    assert config.parse_llm_library("HIP") == "rocm" and config.parse_llm_library("auto") == ""
    with pytest.raises(ValueError):
        config.parse_llm_library("opencl")  # ours refuses (warning, then every device)


def test_unused_ollama_variables_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_VULKAN", "1")
    monkeypatch.setenv("OLLAMA_NO_CLOUD", " ")  # blank: not set
    ignored = dict(config.ollama_ignored())
    assert list(ignored) == ["OLLAMA_VULKAN"]
    assert "Vulkan is used when its plugin is installed" in ignored["OLLAMA_VULKAN"]
    # None of them is a variable we read.
    assert not set(IGNORED) & set(BY_OLLAMA)


# -- where each takes effect ---------------------------------------------------------


def test_kv_cache_type_reaches_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_KV_CACHE_TYPE", "q8_0")
    monkeypatch.setenv("OLLAMA_FLASH_ATTENTION", "1")
    o = PlanOptions.from_config()
    assert (o.kv_type, o.flash_attention) == ("q8_0", "on")


def _plan(devices: list[Device], **opts: Any) -> Placement:
    workers = tuple(WorkerStatus(ep, "ready") for d in devices if (ep := endpoint_of(d.name)))
    hw = Hardware(
        devices=tuple(devices),
        cpu=CPUInfo("test", "x86_64", 2, 2, 64 * GiB, 64 * GiB, ()),
        native_ok=True,
        native_error="",
        system_info="",
        workers=workers,
    )
    spec = ModelSpec(name="m", key="m", model_paths=("m",), info=L8B)
    # n_gpu_layers -1: the planner chooses (LoadOptions' own default, 0, is CPU only).
    return make_plan_fn(lambda: hw)(spec, LoadOptions(n_ctx=4096, n_gpu_layers=-1, **opts), [])


def test_gpu_overhead_leaves_room_on_each_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    devs = [cuda(0, 6), cpu()]
    base = _plan(devs)
    monkeypatch.setenv("OLLAMA_GPU_OVERHEAD", str(2 * GiB))
    less = _plan(devs)
    assert less.opts.n_gpu_layers < base.opts.n_gpu_layers
    assert less.size_vram <= base.size_vram - 1 * GiB


def test_sched_spread_uses_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    devs = [cuda(0, 24), cuda(1, 24), cpu()]
    assert _plan(devs).opts.devices == ["CUDA0"]  # one GPU holds it
    monkeypatch.setenv("OLLAMA_SCHED_SPREAD", "1")
    spread = _plan(devs)
    assert spread.opts.devices == ["CUDA0", "CUDA1"] and "spread over 2 GPUs" in spread.reason


def test_llm_library_keeps_models_to_one_library(monkeypatch: pytest.MonkeyPatch) -> None:
    devs = [cuda(0, 4), gpu("Vulkan0", "Vulkan", 24), cpu()]
    assert _plan(devs).opts.devices == ["Vulkan0"]  # the roomier one
    monkeypatch.setenv("OLLAMA_LLM_LIBRARY", "cuda_v12")
    only_cuda = _plan(devs)
    assert only_cuda.opts.devices == ["CUDA0"]
    assert only_cuda.opts.n_gpu_layers < L8B.n_layers + 1  # 4 GiB of CUDA holds part of it
    monkeypatch.setenv("OLLAMA_LLM_LIBRARY", "cpu")
    on_cpu = _plan(devs)
    assert (on_cpu.opts.devices, on_cpu.opts.n_gpu_layers, on_cpu.size_vram) == ([], 0, 0)
    # RPC workers are named one by one (LOCALLLM_RPC_WORKERS): no library choice drops them.
    far = _plan([rpc("10.0.0.2:50052", 24), cuda(0, 24), cpu()])
    assert far.opts.devices == ["RPC[10.0.0.2:50052]"]
    assert far.opts.rpc_workers == ["10.0.0.2:50052"]


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="progress is read from /proc")
def test_load_timeout_bounds_a_stalled_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.errors import ModelLoadError
    from localllm.runner.process import RunnerProcess
    from tests.support.fake_engine import READ_S
    from tests.support.runners import FAKE_ENV, arun

    opts = LoadOptions(n_ctx=128, n_parallel=1, n_threads=1)

    async def load(path: str) -> None:
        runner = await RunnerProcess.start([path], opts, env=FAKE_ENV)  # no timeout given
        await runner.close()

    monkeypatch.setenv("OLLAMA_LOAD_TIMEOUT", "2s")
    t0 = time.monotonic()
    with pytest.raises(ModelLoadError, match=r"timed out after 2s without progress"):
        arun(load("/m/slowload.gguf"))  # the fake engine sleeps 60 s: no progress
    assert time.monotonic() - t0 < 20
    # As Ollama's, the timeout restarts while the load moves: a load that reads for
    # READ_S (twice the timeout) finishes.
    t0 = time.monotonic()
    arun(load("/m/readload.gguf"))
    assert time.monotonic() - t0 >= READ_S
    monkeypatch.setenv("OLLAMA_LOAD_TIMEOUT", "0")  # no limit, as in Ollama (ours was 0 s)
    arun(load("/m/longload.gguf"))


def test_activity_is_read_from_proc() -> None:
    from localllm.runner.loadwait import activity

    mark = activity(os.getpid())
    if not Path("/proc/self/io").exists():
        assert mark is None or mark[:2] == (0, 0)
        return
    assert mark is not None and mark[0] > 0 and mark[2] > 0  # read_bytes may be 0 (cached)
    Path("/proc/self/status").read_bytes()  # reading adds to rchar
    later = activity(os.getpid())
    assert later is not None and later[0] > mark[0]


def _blob_model(store: Store, name: str, payload: bytes) -> Manifest:
    layer = store.put_bytes(Media.MODEL, payload, name="m.gguf")
    manifest = Manifest(store.put_config({"model_format": "gguf", "w": payload.hex()}), [layer])
    store.commit(parse_name(name), manifest)
    return manifest


def test_noprune_keeps_blobs_as_ollama_does(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store()
    monkeypatch.setenv("OLLAMA_NOPRUNE", "1")
    orphan = store.blobs.write_bytes(b"orphan")
    assert store.prune(grace_seconds=0) == [] and store.blobs.exists(orphan)  # start-up
    old = _blob_model(store, "m", b"v1")
    _blob_model(store, "m", b"v2")  # a pull replacing the model keeps v1's blobs
    assert all(store.blobs.exists(d) for d in old.digests())
    current = store.manifests.read(parse_name("m")).manifest
    store.delete(parse_name("m"))  # ... but deleting a model frees its space, as Ollama's rm
    assert not any(store.blobs.exists(d) for d in current.digests())
    monkeypatch.setenv("OLLAMA_NOPRUNE", "false")
    assert orphan in store.prune(grace_seconds=0)


def test_debug_levels_set_the_log_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.server.logs import setup_logging
    from localllm.server.serve import uvicorn_settings

    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    try:
        for raw, level, uvicorn in (
            ("2", config.TRACE, "trace"),
            ("1", logging.DEBUG, "debug"),
            ("0", logging.INFO, "warning"),
            ("-1", logging.WARNING, "warning"),
            ("-2", logging.ERROR, "error"),
        ):
            monkeypatch.setenv("OLLAMA_DEBUG", raw)
            setup_logging()
            assert (root.level, uvicorn_settings()["log_level"]) == (level, uvicorn), raw
        assert logging.getLevelName(config.TRACE) == "TRACE"
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.setLevel(saved[0])
        for handler in saved[1]:
            root.addHandler(handler)


def test_max_queue_sizes_the_schedulers_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.server.app import create_app

    monkeypatch.setenv("OLLAMA_MAX_QUEUE", "7")
    assert create_app(Store()).state.scheduler.max_queue == 7


def test_the_ollama_tests_start_clean() -> None:
    # tests/conftest.py drops every OLLAMA_* variable of the developer's own setup.
    assert not [v for v in os.environ if v.startswith("OLLAMA_")]

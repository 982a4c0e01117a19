"""``search``, ``pull --dry-run``, ``show --remote`` and the fit check: the real CLI and daemon
against the Hub stand-in.

The accuracy check of issue #27: for three generated models of different shapes, the dry
run's memory estimate is within 10% of what ``ps`` reports after the real pull and load.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from localllm import paths
from tests.support.daemon import Daemon
from tests.support.ggufmeta import SHAPES, Shape, write_gguf
from tests.support.hubstub import HubStub

TINY = "hf.co/someone/Tiny-GGUF"
FIT_WORDS = re.compile(r"CPU only|all \d+ layers on GPU|\d+/\d+ layers on GPU")
# Three shapes: a wide GQA llama in Q8_0, a deep qwen2 with tied output and biases in F16,
# a llama with full multi-head attention (as many KV heads as heads) in Q4_K_M.
ACCURACY = {
    "wide-llama": (Shape("llama", "wide", 8, 1024, 16, 4, 4096, 4096, 4096), "Q8_0"),
    "deep-qwen2": (
        Shape("qwen2", "deep", 24, 512, 8, 2, 2048, 8192, 8192, tied_output=True, attn_bias=True),
        "F16",
    ),
    "mha-llama": (Shape("llama", "mha", 12, 768, 12, 12, 3072, 2048, 2048), "Q4_K_M"),
}


def _store_files() -> list[Path]:
    return [p for p in paths.models().rglob("*") if p.is_file()]


def test_dry_run_memory_is_within_10_percent_of_ps_after_the_real_load(
    hub: HubStub, hub_daemon: Daemon, tmp_path: Path
) -> None:
    for name, (shape, quant) in ACCURACY.items():
        hub.add_file(
            f"fit/{name}-GGUF",
            f"{name}-{quant}.gguf",
            write_gguf(tmp_path / f"{name}.gguf", shape, quant),
        )
    http = hub_daemon.keep(httpx.Client(base_url=hub_daemon.url, timeout=300))
    plans = {
        name: http.post(
            "/api/pull", json={"model": f"hf.co/fit/{name}-GGUF", "dry_run": True, "stream": False}
        ).json()
        for name in ACCURACY
    }
    assert _store_files() == []  # dry runs write nothing
    measured = {}
    for name, plan in plans.items():
        model = f"hf.co/fit/{name}-GGUF"
        estimate = sum(plan["fit"]["memory"].values())
        pulled = hub_daemon.cli("pull", model)
        assert pulled.returncode == 0, pulled.stderr
        assert (
            http.post(
                "/api/chat", json={"model": model, "messages": [], "stream": False}
            ).status_code
            == 200
        )
        (ps,) = [m for m in http.get("/api/ps").json()["models"] if m["name"].startswith(model)]
        assert ps["context_length"] == plan["fit"]["context"]
        measured[name] = (estimate, ps["size"])
        http.post("/api/generate", json={"model": model, "keep_alive": 0, "stream": False})
    for name, (estimate, actual) in measured.items():
        assert abs(estimate - actual) / actual < 0.10, (name, estimate, actual)


def test_search_prints_each_quant_with_its_fit(hub: HubStub, hub_daemon: Daemon) -> None:
    hub.set_meta("someone/Tiny-GGUF", downloads=1_234_567, likes=89)
    out = hub_daemon.cli("search", "tiny")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(TINY)
    assert "1.2M downloads · 89 likes" in lines[1] and "context 2048" in lines[1]
    assert lines[2].split() == ["QUANT", "SIZE", "FIT"]
    for line, quant in zip(lines[3:5], ("Q4_K_M", "Q8_0"), strict=True):
        assert line.split()[0] == quant and FIT_WORDS.search(line), line
        assert re.search(r"\d+(\.\d)? [KMG]B at 2048 tokens", line), line
    none = hub_daemon.cli("search", "no-such-model-anywhere")
    assert none.returncode == 0 and "no GGUF models found" in none.stdout


def test_search_json_is_the_api_answer(hub: HubStub, hub_daemon: Daemon) -> None:
    out = hub_daemon.cli("search", "tiny", "--json", "-n", "3")
    assert out.returncode == 0, out.stderr
    (m,) = json.loads(out.stdout)["models"]
    assert m["name"] == TINY and [q["tag"] for q in m["quants"]] == ["Q4_K_M", "Q8_0"]
    fit = m["quants"][0]["fit"]
    assert fit["status"] in ("gpu", "partial", "cpu") and FIT_WORDS.fullmatch(fit["summary"])
    bad = hub_daemon.cli("search", "tiny", "-n", "0")
    assert bad.returncode == 1 and "limit must be between 1 and 50" in bad.stderr


def test_pull_dry_run_and_show_remote_download_nothing(hub: HubStub, hub_daemon: Daemon) -> None:
    for args in (("pull", TINY, "--dry-run"), ("show", f"{TINY}:Q8_0", "--remote")):
        out = hub_daemon.cli(*args)
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert "dry run: nothing downloaded" in text
        assert re.search(r"placement\s+(CPU only|all 3 layers on GPU|\d+/3 layers on GPU)", text)
        assert re.search(r"memory\s+\S+ \d", text) and re.search(r"context\s+2048 tokens", text)
        assert re.search(r"architecture\s+llama", text)
    assert "Q8_0" in text and "tiny-Q8_0.gguf" in text
    assert _store_files() == []
    assert hub_daemon.cli("list").stdout.count("\n") <= 1  # the header line alone


def test_a_model_that_cannot_fit_is_refused_before_downloading(
    hub: HubStub, hub_daemon: Daemon, tmp_path: Path
) -> None:
    # A 70B in F32: 282 GB (sparse here), more than RAM and VRAM anywhere these tests run.
    huge = write_gguf(tmp_path / "huge-F32.gguf", SHAPES["70b"], "F32")
    hub.add_file("big/Huge-GGUF", "huge-F32.gguf", huge, sha256="9" * 64)
    out = hub_daemon.cli("pull", "hf.co/big/Huge-GGUF")
    assert out.returncode == 1
    assert "does not fit on this machine" in out.stderr and "--force" in out.stderr
    assert _store_files() == []
    assert hub.served["huge-F32.gguf"] < 8 << 20  # its header, nothing more
    plan = hub_daemon.cli("pull", "hf.co/big/Huge-GGUF", "--dry-run")
    assert plan.returncode == 0 and re.search(r"placement\s+too big", plan.stdout)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_async_client_searches_too(hub: HubStub, hub_daemon: Daemon) -> None:
    from localllm.api.client import AsyncClient

    async with AsyncClient(hub_daemon.url) as client:
        models = await client.search("tiny", 2)
    assert [m["repo"] for m in models] == ["someone/Tiny-GGUF"]

"""The scripted daemon of tests/support/tui_fakes.py, answering ``GET /api/search`` too, for the
snapshots of the search screen: fixed repos, quants and fits (a machine with one 8 GB GPU),
so nothing that varies between runs reaches the screen.

Its ``/api/pull`` refuses ``TOO_BIG`` unless the request says ``"force": true``, in the
daemon's own words (models/remote.preflight; tests/tui/test_search_flow.py checks the real
daemon says the same).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.tui_fakes import FakeDaemon

GB = 1_000_000_000
REPO = "bartowski/Llama-3.2-3B-Instruct-GGUF"
TOO_BIG = f"hf.co/{REPO}:F32"
REFUSAL = (
    f"{TOO_BIG} does not fit on this machine (too big: needs 14.1 GB of RAM, "
    f"12.0 GB available); to pull it anyway: localllm pull {TOO_BIG} --force "
    '(API: "force": true)'
)


def fit(
    status: str,
    summary: str,
    layers_on_gpu: int,
    memory: dict[str, int],
    reason: str,
    context: int = 4096,
) -> dict[str, Any]:
    return {
        "status": status,
        "summary": summary,
        "layers_on_gpu": layers_on_gpu,
        "layers": 29,
        "memory": memory,
        "context": context,
        "max_context": 0,
        "reason": reason,
    }


def quant(tag: str, size: int, the_fit: dict[str, Any]) -> dict[str, Any]:
    return {
        "tag": tag,
        "files": [f"Llama-3.2-3B-Instruct-{tag}.gguf"],
        "size": size,
        "fit": the_fit,
    }


QUANTS = [
    quant(
        "Q4_K_M",
        2_019_377_696,
        fit(
            "gpu",
            "all 29 layers on GPU",
            29,
            {"CUDA0": int(2.6 * GB), "CPU": int(0.3 * GB)},
            "all 29 layers on CUDA0 (2.6 GB of 7.8 GB free)",
        ),
    ),
    quant(
        "Q8_0",
        3_421_899_232,
        fit(
            "gpu",
            "all 29 layers on GPU",
            29,
            {"CUDA0": int(4.1 * GB), "CPU": int(0.4 * GB)},
            "all 29 layers on CUDA0 (4.1 GB of 7.8 GB free)",
        ),
    ),
    quant(
        "F16",
        6_433_688_544,
        fit(
            "partial",
            "22/29 layers on GPU",
            22,
            {"CUDA0": int(7.6 * GB), "CPU": int(2.1 * GB)},
            "22/29 layers on CUDA0, rest on CPU: KV cache for 4096 tokens needs 448.0 MB, "
            "weights 6.4 GB, 7.8 GB free",
        ),
    ),
    quant(
        "F32",
        12_853_624_192,
        fit(
            "too_big",
            "too big",
            0,
            {"CPU": int(14.1 * GB)},
            "does not fit: needs 14.1 GB of RAM, 12.0 GB available",
            context=2048,
        ),
    ),
    quant(
        "IQ2_M",
        1_388_000_000,
        {"status": "unknown", "summary": "unknown", "reason": "the header was not read in time"},
    ),
]

RESULTS: list[dict[str, Any]] = [
    {
        "name": f"hf.co/{REPO}",
        "repo": REPO,
        "catalog": ["llama3.2", "llama3.2:3b"],
        "downloads": 1_234_567,
        "likes": 340,
        "updated": "2025-01-15T10:00:00.000Z",
        "capabilities": ["completion", "tools"],
        "context_length": 131072,
        "quants": QUANTS,
        "error": None,
    },
    {
        "name": "hf.co/unsloth/Llama-3.2-1B-Instruct-GGUF",
        "repo": "unsloth/Llama-3.2-1B-Instruct-GGUF",
        "catalog": [],
        "downloads": 45_600,
        "likes": 12,
        "updated": "2025-03-02T08:00:00.000Z",
        "capabilities": ["completion", "tools"],
        "context_length": 131072,
        "quants": [
            quant(
                "Q4_K_M",
                807_694_464,
                fit(
                    "gpu",
                    "all 17 layers on GPU",
                    17,
                    {"CUDA0": int(1.3 * GB), "CPU": int(0.2 * GB)},
                    "all 17 layers on CUDA0 (1.3 GB of 7.8 GB free)",
                ),
            )
        ],
        "error": None,
    },
    {
        "name": "hf.co/someone/[bold]Odd-GGUF",
        "repo": "someone/[bold]Odd-GGUF",
        "catalog": [],
        "downloads": 3,
        "likes": 0,
        "updated": "2024-11-30T00:00:00Z",
        "capabilities": ["completion"],
        "context_length": 0,
        "quants": [],
        "error": "the Hub answered 500 [internal]",
    },
]


@dataclass
class SearchFake(FakeDaemon):
    results: list[dict[str, Any]] | None = None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/search":
            self.requests.append((request.method, path, dict(request.url.params)))
            return httpx.Response(
                200, json={"models": RESULTS if self.results is None else self.results}
            )
        if path == "/api/pull":
            body = json.loads(request.content)
            self.requests.append((request.method, path, body))
            return httpx.Response(200, content=self._pull_of(body))
        return await super().handle(request)

    async def _pull_of(self, body: dict[str, Any]) -> AsyncIterator[bytes]:
        lines: list[dict[str, Any]] = [
            {"status": "pulling manifest"},
            {"status": "checking the model fits (reading its header)"},
        ]
        if body["model"] == TOO_BIG and body.get("force") is not True:
            lines.append({"error": REFUSAL})
        else:
            if body["model"] == TOO_BIG:
                lines.append({"status": f"warning: {REFUSAL.split('; to pull', 1)[0]}"})
            lines += [
                {
                    "status": "pulling abc123",
                    "digest": "sha256:abc",
                    "total": 100,
                    "completed": 100,
                },
                {"status": "success"},
            ]
        for line in lines:
            yield (json.dumps(line) + "\n").encode()

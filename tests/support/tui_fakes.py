"""A scripted stand-in for the daemon, served in-process through ``httpx.MockTransport``.

Used where the real daemon cannot help: snapshots (nothing timing-dependent
may reach the screen) and replies the tiny model cannot produce (thinking,
tool calls).  Behaviour tests use the real daemon (``conftest.tui_daemon``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from localllm.tui.app import LocalLLMApp
from localllm.tui.sessions import ChatSettings, Sessions, StoredMessage

FAKE_URL = "http://fake-daemon:11434"
FIXED_TIME = 1_750_000_000.0


def model_entry(name: str, size: int, quant: str, params: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "modified_at": "2025-06-15T12:00:00Z",
        "size": size,
        "digest": "0" * 64,
        "details": {
            "format": "gguf",
            "family": "llama",
            "parameter_size": params,
            "quantization_level": quant,
        },
    }


@dataclass
class FakeDaemon:
    models: list[dict[str, Any]] = field(
        default_factory=lambda: [
            model_entry("qwen2.5:0.5b", 397_807_936, "Q4_K_M", "494M"),
            model_entry("llama3.2:1b", 807_694_464, "Q8_0", "1.2B"),
        ]
    )
    loaded: dict[str, int] = field(default_factory=lambda: {"qwen2.5:0.5b": 4096})
    chat_chunks: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    pull_steps: int = 0  # > 0: /api/pull streams this many slow progress events
    pull_closed: bool = False

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        path = request.url.path
        if path == "/":
            return httpx.Response(200, text="localllm is running")
        if path == "/api/tags":
            return httpx.Response(200, json={"models": self.models})
        if path == "/api/ps":
            return httpx.Response(
                200,
                json={
                    "models": [
                        {
                            **m,
                            "size_vram": m["size"] // 2,
                            "context_length": self.loaded[m["name"]],
                            "expires_at": "2318-01-01T00:00:00Z",
                        }
                        for m in self.models
                        if m["name"] in self.loaded
                    ]
                },
            )
        if path == "/api/show":
            return httpx.Response(
                200,
                json={
                    "details": {
                        "family": "llama",
                        "parameter_size": "494M",
                        "quantization_level": "Q4_K_M",
                    },
                    "model_info": {"general.architecture": "llama", "llama.context_length": 32768},
                    "capabilities": ["completion"],
                    "parameters": "temperature 0.7",
                    "template": "{{ .Prompt }}",
                },
            )
        if path == "/api/chat":
            lines = "".join(json.dumps(c) + "\n" for c in self.chat_chunks)
            return httpx.Response(200, content=lines.encode())
        if path == "/api/pull":
            return httpx.Response(200, content=self._pull())
        return httpx.Response(404, json={"error": f"no route {path}"})

    async def _pull(self) -> AsyncIterator[bytes]:
        total = 10_000_000
        try:
            yield b'{"status": "pulling manifest"}\n'
            for i in range(1, self.pull_steps + 1):
                await asyncio.sleep(0.05)
                event = {
                    "status": "pulling abc123",
                    "digest": "sha256:abc",
                    "total": total,
                    "completed": total * i // (self.pull_steps * 4),
                }
                yield (json.dumps(event) + "\n").encode()
            yield b'{"status": "success"}\n'
        finally:
            self.pull_closed = True


def chat_reply(
    content: str = "", thinking: str = "", tool_calls: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The chunks of a streamed reply: one per word, then the final one with stats."""
    chunks: list[dict[str, Any]] = []
    for word in thinking.split(" ") if thinking else []:
        chunks.append(
            {"message": {"role": "assistant", "content": "", "thinking": word + " "}, "done": False}
        )
    for word in content.split(" ") if content else []:
        chunks.append({"message": {"role": "assistant", "content": word + " "}, "done": False})
    if tool_calls:
        chunks.append(
            {
                "message": {"role": "assistant", "content": "", "tool_calls": tool_calls},
                "done": False,
            }
        )
    chunks.append(
        {
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 20,
            "eval_count": 30,
            "eval_duration": 500_000_000,
            "prompt_eval_duration": 10_000_000,
            "total_duration": 600_000_000,
            "load_duration": 1_000_000,
        }
    )
    return chunks


SAMPLE_REPLY = """\
Here is a function that reverses a string:

```python
def reverse(text: str) -> str:
    return text[::-1]
```

It uses **slicing** with a step of `-1`."""


def seeded_sessions(path: Path) -> Sessions:
    """A chat store with fixed timestamps and one finished conversation."""
    sessions = Sessions(path, clock=lambda: FIXED_TIME)
    chat = sessions.create(
        "qwen2.5:0.5b",
        "Reverse a string in Python",
        ChatSettings(system="You are terse.", temperature=0.2),
    )
    sessions.add(chat.id, StoredMessage("user", "How do I reverse a string in Python?"))
    sessions.add(
        chat.id,
        StoredMessage(
            "assistant",
            SAMPLE_REPLY,
            thinking="The user wants slicing.",
            stats={"ttft": 0.12, "tok_s": 48.3, "tokens": 30, "prompt_tokens": 20},
        ),
    )
    sessions.create("llama3.2:1b", "Haiku about autumn")
    return sessions


def fake_app(tmp_path: Path, fake: FakeDaemon | None = None, **kw: Any) -> LocalLLMApp:
    return LocalLLMApp(
        FAKE_URL,
        transport=(fake or FakeDaemon()).transport(),
        sessions=seeded_sessions(tmp_path / "chats.sqlite3"),
        export_dir=tmp_path / "exports",
        **kw,
    )

"""Request bodies and stream parsing for the two wire protocols a target may speak.

``ollama``: ``/api/chat`` or ``/api/generate`` (``raw``), NDJSON lines, the last
one ``"done": true`` with token counts and server timings in nanoseconds.
``openai``: ``/v1/chat/completions`` or ``/v1/completions``, Server-Sent Events
ending with ``data: [DONE]``; ``stream_options.include_usage`` asks for a last
chunk with token counts.

"completion" mode sends the prompt as-is (no chat template), which is what
comparing two servers on one model needs: both then see identical tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from localllm.api import wire
from localllm.api.bodies import Options
from localllm.api.daemon import json_object

APIS = ("ollama", "openai")
MODES = ("chat", "completion")

Messages = list[dict[str, str]]
Prompt = str | Messages


@dataclass(frozen=True)
class Target:
    """Where to send requests and how."""

    url: str
    model: str
    api: str = "ollama"
    mode: str = "chat"
    api_key: str = ""
    # Sampling options sent with every request (temperature, seed, top_k ...).
    options: Options = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, not {self.api!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def build_request(target: Target, prompt: Prompt, max_tokens: int) -> tuple[str, wire.JSONObject]:
    """The path and JSON body of one streamed request (one of four APIs' shapes, with
    the target's options passed through: JSON, not one typed body)."""
    if target.mode == "completion" and not isinstance(prompt, str):
        raise ValueError("completion mode takes a plain prompt, not messages")
    messages: Messages = (
        [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    )
    if target.api == "ollama":
        body: wire.JSONObject = {
            "model": target.model,
            "stream": True,
            "options": {**target.options, "num_predict": max_tokens},
        }
        if target.mode == "chat":
            return "/api/chat", {**body, "messages": messages}
        return "/api/generate", {**body, "prompt": prompt, "raw": True}
    body = {
        "model": target.model,
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
        **target.options,
    }
    if target.mode == "chat":
        return "/v1/chat/completions", {**body, "messages": messages}
    return "/v1/completions", {**body, "prompt": prompt}


@dataclass
class Chunk:
    """What one stream line said: text, the end, an error, counts (any may be empty)."""

    text: str = ""
    done: bool = False
    error: str = ""
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    prefill_s: float | None = None
    decode_s: float | None = None


def parse_line(api: str, line: str) -> Chunk | None:
    """Parse one line of a stream; None for lines that carry nothing (blank, SSE comments)."""
    return _parse_ollama(line) if api == "ollama" else _parse_openai(line)


def _parse_ollama(line: str) -> Chunk | None:
    if not line.strip():
        return None
    obj = json_object(line)
    if "error" in obj:
        return Chunk(error=str(obj["error"]), done=True)
    # Another server's line, read as /api/chat's or /api/generate's (api/wire.py): what
    # is not checked here (a text's type) is made a str, and counts go through _int/_ns.
    chat, generated = cast(wire.ChatChunk, obj), cast(wire.GenerateChunk, obj)
    message = chat.get("message")
    text = (
        message.get("content") or ""
        if isinstance(message, dict)
        else (generated.get("response") or "")
    )
    # Thinking text is output the user waits for as well.
    if isinstance(message, dict) and message.get("thinking"):
        text = message["thinking"] + text
    elif generated.get("thinking"):
        text = generated["thinking"] + text
    chunk = Chunk(text=str(text), done=bool(chat.get("done")))
    if chunk.done:
        chunk.prompt_tokens = _int(chat.get("prompt_eval_count"))
        chunk.output_tokens = _int(chat.get("eval_count"))
        chunk.prefill_s = _ns(chat.get("prompt_eval_duration"))
        chunk.decode_s = _ns(chat.get("eval_duration"))
    return chunk


def _parse_openai(line: str) -> Chunk | None:
    line = line.strip()
    if not line.startswith("data:"):
        return None  # blank separators, ": keep-alive" comments, event: lines
    data = line[5:].strip()
    if data == "[DONE]":
        return Chunk(done=True)
    obj = json_object(data)
    if "error" in obj:
        err = obj["error"]
        return Chunk(
            error=str(err.get("message", err) if isinstance(err, dict) else err), done=True
        )
    text = ""
    for choice in obj.get("choices") or []:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text += (delta.get("reasoning_content") or "") + (delta.get("content") or "")
        else:
            text += choice.get("text") or ""
    chunk = Chunk(text=text)
    usage = obj.get("usage")
    if isinstance(usage, dict):
        chunk.prompt_tokens = _int(usage.get("prompt_tokens"))
        chunk.output_tokens = _int(usage.get("completion_tokens"))
    return chunk


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ns(value: Any) -> float | None:
    return value / 1e9 if isinstance(value, (int, float)) and value > 0 else None

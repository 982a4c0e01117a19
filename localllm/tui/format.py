"""Pure helpers for what the TUI shows: context, speeds, reply stats, pull lines,
image attachments, exports.

Kept free of Textual so they are cheap to import and easy to test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from localllm.api.wire import Metrics
from localllm.format import format_bytes, format_duration, format_file_size
from localllm.tui.sessions import Attachment, Chat, ReplyStats, StoredMessage


def context_length(show: Mapping[str, Any]) -> int | None:
    """The training context from ``show``'s ``model_info`` (``<arch>.context_length``)."""
    info = show.get("model_info") or {}
    arch = info.get("general.architecture", "")
    value = info.get(f"{arch}.context_length")
    if value is None:  # architectures with unexpected prefixes
        value = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    return int(value) if isinstance(value, int | float) else None


def reply_stats(final: Metrics, ttft: float | None) -> ReplyStats:
    """The stats kept with a reply, from the final chat chunk (durations in ns).

    ``ttft`` is measured by the client (request sent -> first token seen), which
    is what the user waited; tokens/s comes from the daemon's own clock.
    """
    eval_count = int(final.get("eval_count") or 0)
    eval_ns = int(final.get("eval_duration") or 0)
    return {
        "prompt_tokens": int(final.get("prompt_eval_count") or 0),
        "tokens": eval_count,
        "tok_s": eval_count / (eval_ns / 1e9) if eval_ns > 0 else None,
        "ttft": ttft,
        "done_reason": final.get("done_reason", ""),
    }


def stats_text(stats: ReplyStats) -> str:
    """``TTFT 0.12s · 48.3 tok/s`` (parts that are unknown are left out)."""
    parts = []
    if stats.get("ttft") is not None:
        parts.append(f"TTFT {stats['ttft']:.2f}s")
    if stats.get("tok_s") is not None:
        parts.append(f"{stats['tok_s']:.1f} tok/s")
    return " · ".join(parts)


def pull_line(event: Mapping[str, Any], rate: float | None) -> str:
    """One line under the progress bar: status, bytes done/total, speed, ETA."""
    status = str(event.get("status", ""))
    total, done = event.get("total"), event.get("completed")
    if not total:
        return status
    text = f"{status}  {format_bytes(done or 0)} / {format_bytes(total)}"
    if rate:
        remaining = max(0, total - (done or 0)) / rate
        text += f"  {format_bytes(rate)}/s  ETA {format_duration(remaining)}"
    return text


def tool_call_text(call: Mapping[str, Any]) -> str:
    """``get_weather(city="Paris")`` for a tool call as a chat chunk carries it."""
    fn = call.get("function") or {}
    args = fn.get("arguments") or {}
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items())
    else:
        inner = str(args)
    return f"{fn.get('name', '?')}({inner})"


def attachment_text(image: Attachment) -> str:
    """``📎 cat.png · 12.3 KiB``: sized as ``localllm run`` reports an attached image."""
    return f"📎 {image.name} · {format_file_size(image.size)}"


def export_markdown(chat: Chat, messages: list[StoredMessage]) -> str:
    lines = [f"# {chat.title}", "", f"Model: `{chat.model}`", ""]
    if chat.settings.system:
        lines += ["## System", "", chat.settings.system, ""]
    for m in messages:
        lines += [f"## {m.role.capitalize()}", ""]
        if m.thinking:
            lines += ["<details><summary>Thinking</summary>", "", m.thinking, "", "</details>", ""]
        if m.content:
            lines += [m.content, ""]
        for image in m.images:
            lines += [f"Image: `{image.name}` ({format_file_size(image.size)})", ""]
        for call in m.tool_calls:
            lines += [f"Tool call: `{tool_call_text(call)}`", ""]
        if m.partial:
            lines += ["*(reply interrupted)*", ""]
    return "\n".join(lines).rstrip() + "\n"


def export_json(chat: Chat, messages: list[StoredMessage]) -> str:
    data = {
        "title": chat.title,
        "model": chat.model,
        "settings": asdict(chat.settings),
        "created_at": chat.created_at,
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "thinking": m.thinking,
                "tool_calls": m.tool_calls,
                "stats": m.stats,
                "partial": m.partial,
                "created_at": m.created_at,
                # Names and sizes only: the bytes would swamp the file, and are in the store.
                **(
                    {"images": [{"name": a.name, "size": a.size} for a in m.images]}
                    if m.images
                    else {}
                ),
            }
            for m in messages
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

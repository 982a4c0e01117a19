"""The TUI's pure parts: the chat store, formatting, exports, settings parsing, Reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localllm.cli.chat import host_url
from localllm.format import format_bytes, format_duration, processor
from localllm.tui.format import (
    context_length,
    export_json,
    export_markdown,
    pull_line,
    stats_text,
)
from localllm.tui.reply import Reply
from localllm.tui.screens.settings import parse_settings
from localllm.tui.sessions import ChatSettings, Sessions, StoredMessage


def test_sessions_round_trip_and_order(tmp_path: Path) -> None:
    now = [100.0]
    store = Sessions(tmp_path / "sub" / "chats.sqlite3", clock=lambda: now[0])
    assert not (tmp_path / "sub").exists()  # nothing on disk until first use
    a = store.create("m1", "first", ChatSettings(system="s", seed=3))
    now[0] = 200.0
    b = store.create("m2", "second")
    assert [c.title for c in store.chats()] == ["second", "first"]
    now[0] = 300.0
    user = store.add(a.id, StoredMessage("user", "hi"))
    reply = store.add(
        a.id,
        StoredMessage(
            "assistant",
            "yo",
            thinking="hmm",
            tool_calls=[{"function": {"name": "f"}}],
            stats={"tok_s": 9.5},
        ),
    )
    assert [c.title for c in store.chats()] == ["first", "second"]  # used last
    reply.partial = True
    store.update(reply)
    again = Sessions(store.path)
    got = again.messages(a.id)
    assert [(m.role, m.content, m.thinking, m.partial) for m in got] == [
        ("user", "hi", "", False),
        ("assistant", "yo", "hmm", True),
    ]
    assert got[1].tool_calls == [{"function": {"name": "f"}}] and got[1].stats == {"tok_s": 9.5}
    assert again.get(a.id).settings == ChatSettings(system="s", seed=3)
    store.truncate(a.id, user.id)
    assert store.messages(a.id) == []
    store.rename(b.id, "renamed")
    store.set_model(b.id, "m3")
    assert (store.get(b.id).title, store.get(b.id).model) == ("renamed", "m3")
    store.add(b.id, StoredMessage("user", "x"))
    store.delete(b.id)
    assert [c.id for c in store.chats()] == [a.id]
    assert store.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0  # cascaded
    with pytest.raises(KeyError):
        store.get(b.id)


def test_settings_options_only_what_is_set() -> None:
    assert ChatSettings().options() == {}
    assert ChatSettings(temperature=0.0, num_ctx=256).options() == {
        "temperature": 0.0,
        "num_ctx": 256,
    }
    assert ChatSettings.from_json('{"seed": 4, "unknown": 1}') == ChatSettings(seed=4)
    assert ChatSettings.from_json("not json") == ChatSettings()


def test_parse_settings() -> None:
    got = parse_settings(
        "sys",
        {"temperature": " 0.5 ", "top_p": "", "num_ctx": "1024", "seed": "9", "keep_alive": "-1"},
    )
    assert got == ChatSettings("sys", 0.5, None, 1024, 9, "-1")
    with pytest.raises(ValueError, match="num_ctx"):
        parse_settings("", {"num_ctx": "big"})
    with pytest.raises(ValueError, match="positive"):
        parse_settings("", {"num_ctx": "0"})


def test_formatting() -> None:
    assert format_bytes(812) == "812 B" and format_bytes(4_100_000) == "4.1 MB"
    assert format_duration(42) == "42s" and format_duration(185) == "3m5s"
    assert format_duration(3720) == "1h2m"
    assert processor(100, 0) == "100% CPU" and processor(100, 100) == "100% GPU"
    assert processor(100, 70) == "30%/70% CPU/GPU" and processor(0, 0) == "Unknown"
    assert (
        context_length(
            {"model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}}
        )
        == 32768
    )
    assert context_length({"model_info": {"x.context_length": 8}}) == 8
    assert context_length({}) is None
    assert stats_text({"ttft": 0.123, "tok_s": 48.26}) == "TTFT 0.12s · 48.3 tok/s"
    assert stats_text({}) == ""
    assert pull_line({"status": "pulling manifest"}, None) == "pulling manifest"
    assert (
        pull_line({"status": "pulling x", "total": 2_000_000, "completed": 1_000_000}, 500_000)
        == "pulling x  1.0 MB / 2.0 MB  500 KB/s  ETA 2s"
    )
    assert host_url(None) is None and host_url(":9000") == "http://127.0.0.1:9000"
    assert host_url("box:1") == "http://box:1" and host_url("https://x/") == "https://x"


def test_reply_accumulates_and_times() -> None:
    ticks = iter([10.0, 10.25])
    reply = Reply(clock=lambda: next(ticks))
    reply.feed({"message": {"content": "", "thinking": "hm"}, "done": False})
    reply.feed({"message": {"content": "Hi"}, "done": False})
    reply.feed({"message": {"tool_calls": [{"function": {"name": "f"}}]}, "done": False})
    assert reply.stats() == {"ttft": 0.25}
    reply.feed(
        {
            "message": {"content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 5,
            "eval_count": 10,
            "eval_duration": 500_000_000,
        }
    )
    assert (reply.content, reply.thinking, len(reply.tool_calls)) == ("Hi", "hm", 1)
    assert reply.stats() == {
        "prompt_tokens": 5,
        "tokens": 10,
        "tok_s": 20.0,
        "ttft": 0.25,
        "done_reason": "stop",
    }


def test_exports(tmp_path: Path) -> None:
    store = Sessions(tmp_path / "c.sqlite3", clock=lambda: 1.0)
    chat = store.create("m", "T", ChatSettings(system="be kind"))
    msgs = [
        StoredMessage("user", "q"),
        StoredMessage(
            "assistant",
            "a",
            thinking="t",
            partial=True,
            tool_calls=[{"function": {"name": "f", "arguments": {"x": 1}}}],
        ),
    ]
    md = export_markdown(chat, msgs)
    assert md.startswith("# T\n\nModel: `m`\n\n## System\n\nbe kind\n\n## User\n\nq\n")
    assert "<summary>Thinking</summary>" in md and "Tool call: `f(x=1)`" in md
    assert md.endswith("*(reply interrupted)*\n")
    data = json.loads(export_json(chat, msgs))
    assert data["settings"]["system"] == "be kind"
    assert [m["partial"] for m in data["messages"]] == [False, True]

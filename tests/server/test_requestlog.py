"""What the daemon says about requests it bent or refused (server/requestlog.py): the client
named, ignored fields once per client, and refused bodies kept with LOCALLLM_DEBUG_REQUESTS."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import httpx
import pytest

from localllm.server import requestlog

pytestmark = pytest.mark.anyio
AGENT = {"user-agent": "claude-cli/9.9.9 (external, sdk-cli)"}


async def test_a_refusal_names_the_field_and_the_client_and_keeps_the_body(
    client: httpx.AsyncClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tmp_path / "refused"
    monkeypatch.setenv("LOCALLLM_DEBUG_REQUESTS", str(folder))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "audio": {"voice": "x"}}
    with caplog.at_level(logging.WARNING, logger="localllm.server.requestlog"):
        r = await client.post("/v1/chat/completions", json=body, headers=AGENT)
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("audio: audio output is not supported")
    assert any(
        "POST /v1/chat/completions from claude-cli/9.9.9 (external, sdk-cli) refused (400): audio:"
        in rec.getMessage()
        for rec in caplog.records
    ), caplog.text
    (saved,) = folder.iterdir()
    record = json.loads(saved.read_text())
    assert json.loads(record["body"]) == body
    assert record["user_agent"] == AGENT["user-agent"] and record["status"] == 400
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


async def test_refused_bodies_are_capped_in_size_and_count(
    client: httpx.AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "refused"
    monkeypatch.setenv("LOCALLLM_DEBUG_REQUESTS", str(folder))
    monkeypatch.setattr(requestlog, "MAX_FILES", 3)
    monkeypatch.setattr(requestlog, "MAX_BODY", 100)
    for i in range(5):
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 500}], "audio": i}
        assert (await client.post("/v1/chat/completions", json=big)).status_code == 400
    kept = sorted(folder.iterdir())
    assert len(kept) == 3
    last = json.loads(kept[-1].read_text())
    assert len(last["body"]) == 100 and last["body_bytes"] > 500
    assert last["user_agent"].startswith("python-httpx/")


async def test_no_folder_no_files(
    client: httpx.AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCALLLM_DEBUG_REQUESTS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert (await client.post("/v1/messages", json={"model": "m"})).status_code == 400
    assert os.listdir(tmp_path) == []


async def test_ignored_fields_are_said_once_per_client(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    # The model is missing (404), but the fields were read and judged first.
    body = {
        "model": "missing",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"user_id": "u"},
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        "a_field_from_next_year": True,
    }
    with caplog.at_level(logging.INFO, logger="localllm.server.requestlog"):
        for _ in range(3):
            await client.post("/v1/messages", json=body, headers=AGENT)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "ignored" in r.getMessage()]
    who = "/v1/messages from claude-cli/9.9.9 (external, sdk-cli): ignored"
    assert sorted(lines) == sorted(
        [
            ("INFO", f"{who} metadata (user ids are for Anthropic's abuse checks)"),
            ("WARNING", f"{who} a_field_from_next_year (unknown field)"),
            ("WARNING", f"{who} tools.0 ('web_search_20250305': a server tool)"),
        ]
    )

"""``localllm.mcp``: the config file, and a ToolHub against the official ``mcp`` package's
server (tests/support/mcpserver.py) over stdio and over streamable HTTP."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from localllm.errors import InvalidRequest, ToolServerError
from localllm.mcp.blocking import open_hub
from localllm.mcp.hub import ToolHub
from localllm.mcp.servers import HttpServer, StdioServer, read_servers
from tests.support.mcpserver import http_server, stdio_config


def test_the_config_file_is_read_and_checked(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    (spec,) = read_servers(stdio_config(tmp_path, calls))
    assert isinstance(spec, StdioServer) and spec.name == "calc"
    assert spec.command == sys.executable and spec.env == {"MCP_CALLS": str(calls)}
    bad = tmp_path / "bad.json"
    for doc, words in [
        ({"servers": {}}, '"mcpServers" object'),
        ({"mcpServers": {"x": {"command": "a", "url": "http://b"}}}, "either a command"),
        ({"mcpServers": {"x": {"url": "ftp://b"}}}, "mcpServers.x.url"),
        ({"mcpServers": {"x": {"command": "a", "args": [1]}}}, "mcpServers.x.args"),
        ({"mcpServers": {"x": {"url": "http://b", "headers": {"a": 1}}}}, "mcpServers.x.headers"),
    ]:
        bad.write_text(json.dumps(doc))
        with pytest.raises(InvalidRequest, match=words):
            read_servers(bad)
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        bad.write_text("{")
        read_servers(bad)
    (http,) = [
        *read_servers(_write(tmp_path, {"u": {"url": "http://h/mcp", "headers": {"A": "b"}}}))
    ]
    assert http == HttpServer("u", "http://h/mcp", {"A": "b"})


def _write(folder: Path, servers: dict[str, object]) -> Path:
    path = folder / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def test_stdio_tools_listed_converted_and_called(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    with open_hub(read_servers(stdio_config(tmp_path, calls)), call_timeout=30) as hub:
        assert sorted(hub.tools) == ["add", "fail", "shout"]
        (add,) = [t for t in hub.native_tools() if t["function"]["name"] == "add"]
        assert add["function"]["description"] == "Add two integers."
        assert add["function"]["parameters"]["required"] == ["a", "b"]
        assert hub.tools["shout"].read_only and not hub.tools["add"].read_only
        done = hub.call("add", {"a": 2, "b": 3})
        assert (done.text, done.error) == ("sum=5", None)
        broke = hub.call("fail", {})
        assert broke.error == "tool" and "Error executing tool fail" in broke.text
    assert calls.read_text() == "add 2 3\n"


def test_http_tools_and_a_second_server_with_the_same_names(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"

    async def main(url: str) -> None:
        servers = [HttpServer("one", url), HttpServer("two", url)]
        async with ToolHub(servers) as hub:
            assert {"add", "two__add"} <= set(hub.tools)
            assert hub.tools["two__add"].remote == "add"
            assert (await hub.call("two__add", {"a": 1, "b": 1})).text == "sum=2"
            assert (await hub.call("shout", {"text": "hi"})).text == "HI"

    with http_server(tmp_path, calls) as url:
        anyio.run(main, url)
    assert calls.read_text() == "add 1 1\n"


def test_a_server_that_fails_to_start_is_named(tmp_path: Path) -> None:
    async def main() -> None:
        async with ToolHub([StdioServer("ghost", str(tmp_path / "missing"))]):
            pass

    with pytest.raises(ToolServerError, match=r"MCP server 'ghost' .* failed to start"):
        anyio.run(main)

    async def dies() -> None:
        async with ToolHub([StdioServer("dies", sys.executable, ("-c", "pass"))]):
            pass

    with pytest.raises(ToolServerError, match="MCP server 'dies'"):
        anyio.run(dies)

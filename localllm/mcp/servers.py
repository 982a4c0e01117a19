"""The MCP servers a user names: the ``mcpServers`` file ``run --mcp FILE`` reads.

The shape is the one Claude Desktop, Cursor, LM Studio and most MCP clients share::

    {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}},
                    "OTHER": {"url": "https://...", "headers": {...}}}}

A ``command`` server is started as a child speaking MCP on its stdin/stdout; a
``url`` server is reached over streamable HTTP.  Every value is checked here, so a
typo is an error naming the server and the field before anything starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from localllm.errors import InvalidRequest


@dataclass(frozen=True)
class StdioServer:
    """A server started as a child process, speaking MCP over its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpServer:
    """A server reached over MCP's streamable HTTP transport."""

    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


ServerSpec = StdioServer | HttpServer


def _strings(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidRequest(f"{where} must be an object of strings")
    return dict(value)


def server_spec(name: str, entry: object) -> ServerSpec:
    """One ``mcpServers`` entry, checked."""
    where = f"mcpServers.{name}"
    if not isinstance(entry, Mapping):
        raise InvalidRequest(f"{where} must be an object")
    url, command = entry.get("url"), entry.get("command")
    if (url is None) == (command is None):
        raise InvalidRequest(f"{where} needs either a command (stdio) or a url (HTTP)")
    if url is not None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidRequest(f"{where}.url must be an http:// or https:// URL")
        return HttpServer(name, url, _strings(entry.get("headers"), f"{where}.headers"))
    if not isinstance(command, str) or not command:
        raise InvalidRequest(f"{where}.command must be a non-empty string")
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InvalidRequest(f"{where}.args must be an array of strings")
    return StdioServer(name, command, tuple(args), _strings(entry.get("env"), f"{where}.env"))


def read_servers(path: Path) -> list[ServerSpec]:
    """The servers of an ``mcpServers`` file, in the file's order."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidRequest(f"cannot read the MCP config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvalidRequest(f"the MCP config {path} is not valid JSON: {exc}") from None
    servers = doc.get("mcpServers") if isinstance(doc, Mapping) else None
    if not isinstance(servers, Mapping):
        raise InvalidRequest(f'the MCP config {path} has no "mcpServers" object')
    return [server_spec(str(name), entry) for name, entry in servers.items()]

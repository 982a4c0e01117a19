"""Sessions with MCP servers, their tools as native tools, and the calls, bounded.

One :class:`ToolHub` opens a session with each server (the official ``mcp``
package's ``Client``: stdio for a command, streamable HTTP for a URL), lists
every server's tools, and calls them.  A server that fails to start or to list
is a :class:`~localllm.errors.ToolServerError` naming it; a call has a time limit,
and a call that fails (a protocol error, a timeout, a tool's own ``isError``) is
an outcome, not an exception, because the model should read it and go on.

Tool names: the model sees each tool by its own name; when two servers offer
the same name, the later one's is prefixed with its server's (``server__tool``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from localllm.api.bodies import FunctionSpec, Tool
from localllm.api.wire import JSONObject
from localllm.errors import ToolServerError
from localllm.mcp.servers import HttpServer, ServerSpec

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import Tool as ListedTool

START_TIMEOUT = 30.0  # seconds a server has to answer its handshake and list its tools
CALL_TIMEOUT = 60.0  # seconds a tool call may take


@dataclass(frozen=True)
class McpTool:
    server: str  # the server's name (or, in the Responses API, its label)
    name: str  # the name the model calls it by
    remote: str  # its name on the server
    description: str | None
    schema: JSONObject  # the tool's input JSON schema
    read_only: bool  # the server's readOnlyHint

    def native(self) -> Tool:
        fn: FunctionSpec = {"name": self.name, "parameters": self.schema}
        if self.description:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class CallOutcome:
    """What a call gave: the text for the model, and whether it failed (and how)."""

    text: str
    error: str | None = None  # None | "tool" (the tool said isError) | "protocol"
    code: int = 0  # the MCP error code of a protocol error


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _result_text(result: object) -> str:
    """A ``CallToolResult``'s content as text: its text blocks, else its structured content."""
    texts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        texts.append(block.text if kind == "text" else f"[{kind} content]")
    structured = getattr(result, "structured_content", None)
    if not texts and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(texts)


class ToolHub:
    """Open sessions with ``servers`` (``async with``), list their tools, call them."""

    def __init__(
        self,
        servers: Sequence[ServerSpec],
        *,
        start_timeout: float = START_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        errlog: TextIO | None = None,
    ) -> None:
        self.servers = list(servers)
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.errlog = errlog  # where stdio servers' stderr goes (the terminal by default)
        self.tools: dict[str, McpTool] = {}
        self.listed: dict[str, list[McpTool]] = {}  # per server, in the server's order
        self._clients: dict[str, Client] = {}
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> ToolHub:
        try:
            for spec in self.servers:
                await self._open(spec)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    def _client(self, spec: ServerSpec) -> Client:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        if isinstance(spec, HttpServer):
            http = create_mcp_http_client(headers=spec.headers or None)
            self._stack.push_async_callback(http.aclose)
            return Client(
                streamable_http_client(spec.url, http_client=http),
                read_timeout_seconds=self.start_timeout,
            )
        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=spec.env)
        return Client(
            stdio_client(params, errlog=self.errlog or sys.stderr),
            read_timeout_seconds=self.start_timeout,
        )

    async def _open(self, spec: ServerSpec) -> None:
        where = spec.url if isinstance(spec, HttpServer) else spec.command
        try:
            client = await self._stack.enter_async_context(self._client(spec))
            listed = await self._list(client)
        except Exception as exc:
            leaf = _leaf(exc)
            raise ToolServerError(
                f"MCP server {spec.name!r} ({where}) failed to start or list its tools: "
                f"{type(leaf).__name__}: {leaf}"
            ) from None
        self._clients[spec.name] = client
        self.listed[spec.name] = []
        for tool in listed:
            name = tool.name if tool.name not in self.tools else f"{spec.name}__{tool.name}"
            notes = tool.annotations
            entry = McpTool(
                server=spec.name,
                name=name,
                remote=tool.name,
                description=tool.description,
                schema=dict(tool.input_schema or {"type": "object", "properties": {}}),
                read_only=bool(notes is not None and notes.read_only_hint),
            )
            self.tools[name] = entry
            self.listed[spec.name].append(entry)

    async def _list(self, client: Client) -> list[ListedTool]:
        tools: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(100):  # a server whose pages never end cannot hang us
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def native_tools(self, names: Sequence[str] | None = None) -> list[Tool]:
        """The tools (all, or those named) as ``/api/chat`` tools."""
        chosen = self.tools.values() if names is None else [self.tools[n] for n in names]
        return [t.native() for t in chosen]

    async def call(self, name: str, arguments: JSONObject) -> CallOutcome:
        """Call tool ``name``; a failure is an outcome the model can read."""
        from mcp.shared.exceptions import MCPError

        tool = self.tools[name]
        try:
            result = await self._clients[tool.server].call_tool(
                tool.remote, dict(arguments), read_timeout_seconds=self.call_timeout
            )
        except MCPError as exc:
            return CallOutcome(f"error: {exc.error.message}", "protocol", exc.code)
        except TimeoutError:
            return CallOutcome(
                f"error: the tool did not answer within {self.call_timeout:g} s", "protocol"
            )
        text = _result_text(result)
        return CallOutcome(text, "tool" if result.is_error else None)

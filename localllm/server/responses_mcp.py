"""``POST /v1/responses`` with ``mcp`` tools: the daemon lists the servers' tools and makes
the calls itself, round after round, until the model answers.

A request whose ``tools`` hold an ``mcp`` entry comes here from
:mod:`localllm.server.routes_responses`.  The request is converted as any other
(:mod:`localllm.compat.responses.request`, with the ``mcp`` entries taken out
by :mod:`localllm.compat.responses.mcp`); each ``server_url`` must start with
one of ``LOCALLLM_MCP_ALLOW``'s prefixes, or the request is a 400 naming that
setting, since the daemon would otherwise fetch any URL a client names.  Then:

1. a session with each server (``localllm.mcp.hub``, streamable HTTP), whose
   tools (those ``allowed_tools`` names) are offered to the model; an
   ``mcp_list_tools`` item says which, unless the input already holds one for
   that server (a follow-up that sends the whole conversation back);
2. the approved calls of ``mcp_approval_response`` input items are made;
3. the model runs (the usual chat plan, folded); each call it makes to an MCP
   tool is an ``mcp_call`` item with the output or the error, and its result
   goes back to the model as a tool message, for at most ``MAX_ROUNDS`` rounds.
   A call that needs approval (``require_approval``: ``always`` unless said
   otherwise, as OpenAI's) ends the response with ``mcp_approval_request`` items.

The rounds run in one task of their own that owns the MCP sessions (their task
groups must be left by the task that entered them), handing each item to the
response as it is done: streamed, an item's events go out when it is finished,
and the model's text arrives when its round ends, not a token at a time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from fastapi import Request
from fastapi.responses import Response

from localllm import config
from localllm.api.bodies import ChatMessage
from localllm.api.wire import ChatChunk, JSONObject, StreamError, ToolCall
from localllm.compat.frames import new_id, sse
from localllm.compat.responses.mcp import (
    Approval,
    McpItem,
    McpResponsesStream,
    McpServerTool,
    approval_request_item,
    approvals,
    call_item,
    list_tools_item,
    split_tools,
)
from localllm.compat.responses.request import ResponsesConversion, responses_request_to_native
from localllm.compat.responses.types import (
    Event,
    McpCallError,
    McpListedTool,
    ResponsesRequest,
)
from localllm.errors import InvalidRequest
from localllm.mcp.hub import CallOutcome, McpTool, ToolHub
from localllm.mcp.servers import HttpServer
from localllm.server import foreign
from localllm.server.deps import inference_service, offload, parse_json
from localllm.server.disconnect import ClientGone, gone_response, until_disconnect
from localllm.server.jsonout import json_response
from localllm.server.requestlog import note_ignored
from localllm.server.streaming import sse_response

MAX_ROUNDS = 8  # rounds of MCP calls one response may take
CALL_TIMEOUT = 60.0  # seconds one call may take
Step = McpItem | ChatChunk
Put = Callable[[Step], Awaitable[None]]  # hands a finished item (or the last chunk) on


def _has_mcp(raw: bytes) -> bool:
    if b'"mcp"' not in raw:
        return False
    try:
        body = json.loads(raw)
    except ValueError:
        return False  # the usual path says what is wrong
    tools = body.get("tools") if isinstance(body, dict) else None
    return isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") == "mcp" for t in tools
    )


async def wants_mcp(request: Request) -> bool:
    """Whether the body offers an ``mcp`` tool (read once; the route reads it again from
    Starlette's cache)."""
    return await offload(request, _has_mcp, await request.body())


def _convert(body: Any) -> tuple[ResponsesConversion, list[McpServerTool]]:
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    for key in ("previous_response_id", "conversation"):
        if body.get(key) is not None:  # the loop below does not read stored history
            raise InvalidRequest(
                f"{key} is not supported with mcp tools: send the whole conversation in input"
            )
    rest, servers = split_tools(body.get("tools"))
    allow = config.MCP_ALLOW.get()
    for server in servers:
        if not any(server.url.startswith(prefix) for prefix in allow):
            raise InvalidRequest(
                f"MCP server {server.label!r} ({server.url}) is not allowed: the daemon "
                "calls only servers whose URL starts with a prefix in LOCALLLM_MCP_ALLOW"
            )
    conv = responses_request_to_native(cast(ResponsesRequest, {**body, "tools": rest}))
    conv.echo["tools"] = [*conv.echo.get("tools", []), *(s.spec for s in servers)]
    return conv, servers


def _listed(tool: McpTool) -> McpListedTool:
    notes: JSONObject | None = {"read_only": True} if tool.read_only else None
    return {
        "name": tool.remote,
        "description": tool.description,
        "input_schema": tool.schema,
        "annotations": notes,
    }


def _error(outcome: CallOutcome) -> McpCallError | None:
    if outcome.error is None:
        return None
    if outcome.error == "tool":
        return {"type": "mcp_tool_execution_error", "content": [outcome.text]}
    return {"type": "mcp_protocol_error", "code": outcome.code, "message": outcome.text}


@dataclass
class _Rounds:
    """The rounds of one response (see the module docstring), in the task that owns them."""

    request: Request
    conv: ResponsesConversion
    servers: list[McpServerTool]
    input: object
    tools: dict[str, McpTool] = field(default_factory=dict)  # offered, by the model's name

    def _server(self, tool: McpTool) -> McpServerTool:
        return next(s for s in self.servers if s.label == tool.server)

    async def _call(
        self, hub: ToolHub, tool: McpTool, args: JSONObject, approval: str | None = None
    ) -> tuple[McpItem, str]:
        """Make one call: its item, and the text the model reads."""
        outcome = await hub.call(tool.name, args)
        output = outcome.text if outcome.error is None else None
        item = call_item(tool.server, tool.remote, args, output, _error(outcome), approval)
        return item, outcome.text

    def _remember(self, content: str, made: Sequence[tuple[McpTool, JSONObject, str]]) -> None:
        """The model's history: one assistant turn with the calls, then each one's result."""
        if not made:
            return
        ids = [new_id("call_") for _ in made]
        calls: list[ToolCall] = [
            {"id": i, "function": {"name": tool.name, "arguments": args}}
            for i, (tool, args, _) in zip(ids, made, strict=True)
        ]
        messages = self.conv.native["messages"]
        messages.append({"role": "assistant", "content": content, "tool_calls": calls})
        messages.extend(
            _tool_message(i, tool.name, text) for i, (tool, _, text) in zip(ids, made, strict=True)
        )

    def _answered(
        self, hub: ToolHub, answers: Sequence[Approval]
    ) -> list[tuple[Approval, McpTool]]:
        found = []
        for answer in answers:
            tool = next(
                (
                    t
                    for t in self.tools.values()
                    if (t.server, t.remote) == (answer.label, answer.name)
                ),
                None,
            )
            if tool is None:
                raise InvalidRequest(
                    f"mcp_approval_response {answer.request_id!r}: {answer.name!r} is not a "
                    f"tool offered by MCP server {answer.label!r}"
                )
            found.append((answer, tool))
        return found

    async def run(self, put: Put) -> None:
        servers = [HttpServer(s.label, s.url, s.headers) for s in self.servers]
        listed_before = _listed_labels(self.input)
        async with ToolHub(servers, call_timeout=CALL_TIMEOUT) as hub:
            for server in self.servers:
                offered = [
                    t
                    for t in hub.listed[server.label]
                    if server.allowed is None or t.remote in server.allowed
                ]
                self.tools.update((t.name, t) for t in offered)
                if server.label not in listed_before:
                    await put(list_tools_item(server.label, [_listed(t) for t in offered]))
            native = self.conv.native
            native["tools"] = [
                *(native.get("tools") or []),
                *(t.native() for t in self.tools.values()),
            ]
            made = []
            for answer, tool in self._answered(hub, approvals(self.input)):
                text = "The user refused this tool call."
                if answer.approve:
                    item, text = await self._call(hub, tool, answer.arguments, answer.request_id)
                    await put(item)
                made.append((tool, answer.arguments, text))
            self._remember("", made)
            await self._rounds(hub, put)

    async def _rounds(self, hub: ToolHub, put: Put) -> None:
        svc = inference_service(self.request)
        for round_ in range(MAX_ROUNDS + 1):
            plan = await offload(self.request, foreign.chat, svc, self.conv)
            folded = await plan.result()
            message = folded.get("message") or {"role": "assistant", "content": ""}
            mine = [
                c for c in message.get("tool_calls") or [] if c["function"]["name"] in self.tools
            ]
            if mine:
                # The response's items are MCP items: these calls are not function calls.
                rest = [c for c in message.get("tool_calls") or [] if c not in mine]
                message = {**message, "tool_calls": rest}
                folded = {**folded, "message": message}
            if not mine or round_ == MAX_ROUNDS:
                await put(folded)
                return
            # Calls that need no approval are made now; the others are asked about, and
            # the response ends (the follow-up sends both back).
            ask = [c for c in mine if self._needs_approval(c)]
            made = []
            for call in mine:
                tool, args = self.tools[call["function"]["name"]], call["function"]["arguments"]
                if call in ask:
                    await put(approval_request_item(tool.server, tool.remote, args))
                    continue
                item, text = await self._call(hub, tool, args)
                await put(item)
                made.append((tool, args, text))
            self._remember(message.get("content") or "", made)
            if ask:
                await put(folded)
                return

    def _needs_approval(self, call: ToolCall) -> bool:
        tool = self.tools[call["function"]["name"]]
        return self._server(tool).needs_approval(tool.remote, tool.read_only)


def _tool_message(call_id: str, name: str, text: str) -> ChatMessage:
    return {"role": "tool", "content": text, "tool_call_id": call_id, "tool_name": name}


def _listed_labels(value: object) -> set[str]:
    if not isinstance(value, list):
        return set()
    return {
        str(item.get("server_label"))
        for item in value
        if isinstance(item, dict) and item.get("type") == "mcp_list_tools"
    }


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def _steps(rounds: _Rounds) -> AsyncIterator[Step]:
    """The rounds' items as they are done (the rounds run in a task of their own)."""
    queue: asyncio.Queue[Step | _Failed | None] = asyncio.Queue()  # None: the end

    async def work() -> None:
        try:
            await rounds.run(queue.put)
        except Exception as exc:
            await queue.put(_Failed(exc))
        finally:
            await queue.put(None)

    task = asyncio.ensure_future(work())
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _Shaper(McpResponsesStream):
    """The stream's frames: MCP items whole, the last round's chunk as the usual events."""

    def step(self, native: Step | StreamError) -> list[Event]:
        if "type" in native:  # an MCP item; chunks have no type
            return self.item(cast(McpItem, native))
        return self.events(cast("ChatChunk | StreamError", native))

    def feed(self, native: Step | StreamError) -> list[str]:
        return [sse(event, event["type"]) for event in self.step(native)]


async def create(request: Request) -> Response:
    """Answer a ``/v1/responses`` request that offers ``mcp`` tools."""
    body = (await parse_json(request, foreign.AnyBody)).root
    conv, servers = await offload(request, _convert, body)
    note_ignored(request, conv.ignored)
    rounds = _Rounds(request, conv, servers, body.get("input"))
    shaper = _Shaper(conv.native["model"], conv.echo)
    if conv.stream:
        return await sse_response(request, _steps(rounds), shaper)

    async def collect() -> None:
        async for step in _steps(rounds):
            shaper.step(step)

    try:
        await until_disconnect(request, collect())
    except ClientGone:
        return gone_response()
    return await json_response(request, shaper.response)

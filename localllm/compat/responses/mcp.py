"""The Responses API's ``mcp`` tool, as OpenAI defines it: read the request, write the items.

Pure, owned here; the daemon's loop that lists the servers' tools and makes the
calls is :mod:`localllm.server.responses_mcp`.  Read: ``tools[]`` entries of
``type: "mcp"`` (``server_label``, ``server_url``, ``headers``,
``allowed_tools`` as names or ``{"tool_names": [...]}``, ``require_approval``
as ``"always"``/``"never"`` or ``{"always"|"never": {"tool_names", "read_only"}}``,
``"always"`` when absent, as OpenAI's), and the ``mcp_approval_response`` items a
client sends back with the ``mcp_approval_request`` they answer.  Written: the
``mcp_list_tools``, ``mcp_call`` and ``mcp_approval_request`` output items, and
their stream events (:class:`McpResponsesStream`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from localllm.api.wire import JSONObject, JSONValue
from localllm.compat.frames import new_id, string_field
from localllm.compat.responses.stream import ResponsesStream
from localllm.compat.responses.types import (
    Event,
    McpApprovalRequestItem,
    McpCallError,
    McpCallItem,
    McpListedTool,
    McpListToolsItem,
    McpToolSpec,
    Where,
)
from localllm.errors import InvalidRequest

_bad = InvalidRequest


@dataclass(frozen=True)
class ToolFilter:
    """A ``{"tool_names": [...], "read_only": bool}`` filter; empty matches nothing."""

    names: tuple[str, ...] = ()
    read_only: bool | None = None

    def matches(self, name: str, read_only: bool) -> bool:
        return name in self.names or (self.read_only is not None and self.read_only == read_only)


@dataclass(frozen=True)
class McpServerTool:
    """One ``mcp`` tool of a request: a server, which of its tools, and their approval."""

    label: str
    url: str
    headers: dict[str, str]
    allowed: tuple[str, ...] | None  # None: every tool the server lists
    always: bool  # require_approval "always" (or absent); False: "never"
    approve: ToolFilter  # tools that need approval whatever ``always`` says
    skip: ToolFilter  # tools that need none
    spec: McpToolSpec  # the tool as sent, which the response repeats

    def needs_approval(self, name: str, read_only: bool) -> bool:
        if self.skip.matches(name, read_only):
            return False
        return self.always or self.approve.matches(name, read_only)


def _filter(value: object, where: str) -> ToolFilter:
    if value is None:
        return ToolFilter()
    if not isinstance(value, Mapping):
        raise _bad(f"{where} must be an object with tool_names or read_only")
    names = value.get("tool_names") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _bad(f"{where}.tool_names must be an array of strings")
    read_only = value.get("read_only")
    if read_only is not None and not isinstance(read_only, bool):
        raise _bad(f"{where}.read_only must be a boolean")
    return ToolFilter(tuple(names), read_only)


def _allowed(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        return tuple(value)
    if isinstance(value, Mapping):
        return _filter(value, "tools[].allowed_tools").names
    raise _bad("tools[].allowed_tools must be an array of tool names or {tool_names}")


def _server(tool: Mapping[str, object]) -> McpServerTool:
    label = string_field(tool.get("server_label"), "tools[].server_label")
    if tool.get("connector_id") is not None:
        raise _bad(f"MCP server {label!r}: connectors are OpenAI's; give a server_url")
    url = string_field(tool.get("server_url"), "tools[].server_url")
    if not url.startswith(("http://", "https://")):
        raise _bad(f"MCP server {label!r}: server_url must be an http(s) URL")
    headers = tool.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        raise _bad("tools[].headers must be an object of strings")
    rule = tool.get("require_approval")
    if rule is not None and not isinstance(rule, (str, Mapping)):
        raise _bad('tools[].require_approval must be "always", "never" or a filter object')
    if isinstance(rule, str) and rule not in ("always", "never"):
        raise _bad('tools[].require_approval must be "always", "never" or a filter object')
    filters = rule if isinstance(rule, Mapping) else {}
    spec: McpToolSpec = {"type": "mcp", "server_label": label, "server_url": url}
    # Echoed as sent (the headers are not: they may hold credentials).
    if tool.get("allowed_tools") is not None:
        spec["allowed_tools"] = cast("JSONValue", tool["allowed_tools"])
    if rule is not None:
        spec["require_approval"] = cast("JSONValue", rule)
    if isinstance(tool.get("server_description"), str):
        spec["server_description"] = str(tool["server_description"])
    return McpServerTool(
        label=label,
        url=url,
        headers=dict(headers),
        allowed=_allowed(tool.get("allowed_tools")),
        # A filter object alone approves only what it names under "always".
        always=rule is None or rule == "always",
        approve=_filter(filters.get("always"), "require_approval.always"),
        skip=_filter(filters.get("never"), "require_approval.never"),
        spec=spec,
    )


def split_tools(tools: object) -> tuple[list[object] | None, list[McpServerTool]]:
    """``tools`` -> (the others, as sent; the ``mcp`` ones, read).  Labels are unique."""
    if not isinstance(tools, list):
        return (None if tools is None else tools), []  # type: ignore[return-value]
    rest: list[object] = []
    servers: list[McpServerTool] = []
    for tool in tools:
        if isinstance(tool, Mapping) and tool.get("type") == "mcp":
            servers.append(_server(tool))
        else:
            rest.append(tool)
    labels = [s.label for s in servers]
    if len(set(labels)) != len(labels):
        raise _bad("each mcp tool needs its own server_label")
    return rest, servers


@dataclass(frozen=True)
class Approval:
    """A client's answer to an ``mcp_approval_request`` it was sent (and sent back)."""

    request_id: str
    label: str
    name: str
    arguments: JSONObject
    approve: bool


def approvals(value: object) -> list[Approval]:
    """The ``mcp_approval_response`` items of ``input``, each with its request."""
    if not isinstance(value, list):
        return []
    asked = {
        item.get("id"): item
        for item in value
        if isinstance(item, Mapping) and item.get("type") == "mcp_approval_request"
    }
    out: list[Approval] = []
    for item in value:
        if not isinstance(item, Mapping) or item.get("type") != "mcp_approval_response":
            continue
        rid = string_field(item.get("approval_request_id"), "approval_request_id")
        request = asked.get(rid)
        if request is None:
            raise _bad(
                f"mcp_approval_response {rid!r}: send its mcp_approval_request item back "
                "in input too (the daemon keeps no state between requests)"
            )
        args = json.loads(string_field(request.get("arguments") or "{}", "arguments"))
        if not isinstance(args, dict):
            raise _bad(f"mcp_approval_request {rid!r}: arguments must be a JSON object")
        approve = item.get("approve")
        if not isinstance(approve, bool):
            raise _bad("mcp_approval_response.approve must be a boolean")
        label = string_field(request.get("server_label"), "server_label")
        out.append(Approval(rid, label, string_field(request.get("name"), "name"), args, approve))
    return out


# -- items --------------------------------------------------------------------------------


def list_tools_item(label: str, tools: Sequence[McpListedTool]) -> McpListToolsItem:
    return {
        "id": new_id("mcpl_"),
        "type": "mcp_list_tools",
        "server_label": label,
        "tools": list(tools),
        "error": None,
    }


def call_item(
    label: str,
    name: str,
    arguments: JSONObject,
    output: str | None,
    error: McpCallError | None,
    approval: str | None = None,
) -> McpCallItem:
    return {
        "id": new_id("mcp_"),
        "type": "mcp_call",
        "status": "failed" if error is not None else "completed",
        "server_label": label,
        "name": name,
        "arguments": json.dumps(arguments, ensure_ascii=False),
        "output": output,
        "error": error,
        "approval_request_id": approval,
    }


def approval_request_item(label: str, name: str, arguments: JSONObject) -> McpApprovalRequestItem:
    return {
        "id": new_id("mcpr_"),
        "type": "mcp_approval_request",
        "server_label": label,
        "name": name,
        "arguments": json.dumps(arguments, ensure_ascii=False),
    }


McpItem = McpListToolsItem | McpCallItem | McpApprovalRequestItem


class McpResponsesStream(ResponsesStream):
    """A response's events with the MCP items too, each written whole when it is done."""

    def item(self, item: McpItem) -> list[Event]:
        """An MCP item's events: added, its own progress events, done."""
        index = len(self.output)
        if item["type"] == "mcp_call":  # added while it runs, done with its output
            running: McpCallItem = {**item, "status": "in_progress", "output": None, "error": None}
            events = self._add(running)
            running.update(item)
        else:
            events = self._add(item)
        where: Where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "mcp_list_tools":
            events += [
                self._event("response.mcp_list_tools.in_progress", **where),
                self._event("response.mcp_list_tools.completed", **where),
            ]
        elif item["type"] == "mcp_call":
            ended = "failed" if item["status"] == "failed" else "completed"
            events += [
                self._event("response.mcp_call.in_progress", **where),
                self._event("response.mcp_call_arguments.delta", **where, delta=item["arguments"]),
                self._event(
                    "response.mcp_call_arguments.done", **where, arguments=item["arguments"]
                ),
                self._event(f"response.mcp_call.{ended}", **where),
            ]
        return [*events, self._event("response.output_item.done", output_index=index, item=item)]

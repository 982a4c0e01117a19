"""A :class:`~localllm.mcp.hub.ToolHub` for synchronous callers (the CLI's chat loop).

The ``mcp`` client is async (anyio) and its sessions must be opened and closed by
one task; the CLI is synchronous.  An anyio blocking portal runs an event loop in
a thread for as long as the ``with`` lasts: the hub is entered and left there,
and each call is sent to it and waited for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from anyio.from_thread import BlockingPortal, start_blocking_portal

from localllm.api.bodies import Tool
from localllm.api.wire import JSONObject
from localllm.mcp.hub import CallOutcome, McpTool, ToolHub
from localllm.mcp.servers import ServerSpec


@dataclass
class BlockingHub:
    hub: ToolHub
    portal: BlockingPortal

    @property
    def tools(self) -> dict[str, McpTool]:
        return self.hub.tools

    def native_tools(self) -> list[Tool]:
        return self.hub.native_tools()

    def call(self, name: str, arguments: JSONObject) -> CallOutcome:
        return self.portal.call(self.hub.call, name, arguments)


@contextmanager
def open_hub(servers: Sequence[ServerSpec], *, call_timeout: float) -> Iterator[BlockingHub]:
    """Sessions with ``servers`` for the ``with`` block (their errors raise on entry)."""
    with start_blocking_portal() as portal:
        hub = ToolHub(servers, call_timeout=call_timeout)
        with portal.wrap_async_context_manager(hub):
            yield BlockingHub(hub, portal)

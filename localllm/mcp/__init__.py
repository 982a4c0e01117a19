"""MCP (Model Context Protocol) tools for the model: the servers, their tools, the calls.

Owned here: reading the usual ``{"mcpServers": ...}`` file (``servers.py``), one
session per server through the official ``mcp`` package's client and the tools
they offer as native ``/api/chat`` tools (``hub.py``), and a blocking face of the
same for the CLI, which is synchronous (``blocking.py``).  Its users, one code:
``localllm run --mcp`` and ``localllm chat --mcp`` (the CLI or the TUI runs the
calls, the daemon only chats: ``cli/mcptools.py``, ``tui/mcptools.py``) and the
Responses API's ``mcp`` tool (the daemon runs the calls, ``server/responses_mcp.py``).
Nothing here imports ``mcp`` at import time: only a request or a run that names MCP
servers pays for it.
"""

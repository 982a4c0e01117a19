"""A small MCP server made with the official ``mcp`` package (``MCPServer``, once FastMCP),
for the MCP tests: over stdio (a script a client starts) or streamable HTTP (a child
process on a free loopback port).

Its tools: ``add(a, b)`` answers ``sum=<a+b>`` and appends a line to the file named
by ``MCP_CALLS`` (so a test can tell a refused call never ran), ``shout(text)``
answers the text upper-cased (read-only), and ``fail()`` is a tool that errors (the
server answers isError, hiding its message).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.daemon import end_process, free_port

SCRIPT = '''
import os, sys
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("calc")

@app.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    with open(os.environ["MCP_CALLS"], "a") as f:
        f.write(f"add {a} {b}\\n")
    return f"sum={a + b}"

@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()

@app.tool()
def fail() -> str:
    """Always fails."""
    raise RuntimeError("the tool broke")

if __name__ == "__main__":
    if len(sys.argv) > 1:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        app.run()
'''


def write_server(folder: Path) -> Path:
    """The server script, written to ``folder``."""
    path = folder / "calc_server.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def stdio_config(folder: Path, calls: Path) -> Path:
    """An ``mcpServers`` file naming the stdio server ``calc``."""
    import json

    script = write_server(folder)
    config = folder / "mcp.json"
    entry = {"command": sys.executable, "args": [str(script)], "env": {"MCP_CALLS": str(calls)}}
    config.write_text(json.dumps({"mcpServers": {"calc": entry}}), encoding="utf-8")
    return config


@contextmanager
def http_server(folder: Path, calls: Path) -> Iterator[str]:
    """The server over streamable HTTP; yields its endpoint URL."""
    import os

    port = free_port()
    script = write_server(folder)
    log = open(folder / "mcp-http.log", "wb")  # closed below
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        env={**os.environ, "MCP_CALLS": str(calls)},
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((folder / "mcp-http.log").read_text()) from None
                time.sleep(0.1)
        yield url
    finally:
        end_process(proc)
        log.close()

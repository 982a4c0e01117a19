"""httpx, imported without its command-line tool.

``import httpx`` also imports ``httpx._main`` (its ``httpx`` console command),
which pulls in click, rich and pygments when they are installed — about half
of httpx's import cost, paid by every ``localllm list``.  We never use that
command, so a stand-in module takes its place before httpx is first imported.
"""

from __future__ import annotations

import sys
import types

if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
    _stub = types.ModuleType("httpx._main")

    def _no_cli() -> None:  # what ``httpx.main`` becomes in this process
        raise RuntimeError("the httpx command-line tool is not loaded in localllm")

    _stub.main = _no_cli  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = _stub

import httpx

__all__ = ["httpx"]

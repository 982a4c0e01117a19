"""Only native processes (runner, probe, worker, quantize) load the engine or libllama.

The daemon, the CLI and the TUI are imported in a fresh interpreter, and
none of ``localllm.engine*`` or ``localllm._native`` may be loaded by that:
a crash in native code must never be able to take the daemon down, and
``localllm list`` must start without loading llama.cpp.  The other way round,
the native children (runner, probe, quantize) do not import asyncio, which only
the daemon's side of their modules uses.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
import localllm.server.app, localllm.server.serve
import localllm.cli.main
localllm.cli.main.build_parser()   # imports every command module
import localllm.tui.app
import localllm.inference.plan, localllm.scheduler.placement, localllm.runner.process
print(json.dumps(sorted(m for m in sys.modules if m.startswith("localllm"))))
"""


def test_daemon_cli_and_tui_do_not_load_the_engine() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "localllm.server.app" in loaded and "localllm.tui.app" in loaded
    forbidden = [m for m in loaded if m.startswith(("localllm.engine", "localllm._native"))]
    assert forbidden == []


CHILD_PROBE = """
import json, sys
import localllm.runner.worker, localllm.engine.engine
import localllm.hardware.probe_child, localllm.modelfile.quantize_child
print(json.dumps(sorted(m for m in sys.modules if m == "asyncio" or m.startswith("asyncio."))))
"""


def test_the_native_children_do_not_import_asyncio() -> None:
    # A runner starts at every model load and a probe at every daemon start: asyncio was
    # half of the runner's imports (94 ms -> 41 ms) and only the daemon's side uses it.
    out = subprocess.run([sys.executable, "-c", CHILD_PROBE], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


COMPAT_PROBE = """
import importlib, json, pkgutil, sys
import localllm.compat
for info in pkgutil.walk_packages(localllm.compat.__path__, "localllm.compat."):
    importlib.import_module(info.name)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("localllm"))))
"""


def test_compat_imports_neither_the_server_nor_the_inference() -> None:
    # compat/ holds pure converters between wire shapes: the routes call them, and they
    # call nothing back (DESIGN.md's arrows), so they test and read on their own.
    out = subprocess.run([sys.executable, "-c", COMPAT_PROBE], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"localllm.compat.openai.stream", "localllm.compat.responses.stream",
            "localllm.compat.anthropic.stream"} <= set(loaded)
    assert [m for m in loaded if m.startswith(("localllm.server", "localllm.inference"))] == []
    # Imports inside functions count too.
    for path in (REPO / "localllm" / "compat").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.startswith(("localllm.server",
                                                          "localllm.inference"))], path

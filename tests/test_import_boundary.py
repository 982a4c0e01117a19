"""Only native processes (runner, probe, worker, quantize) load the engine or libllama.

The daemon, the CLI and the TUI are imported in a fresh interpreter, and
none of ``localllm.engine*`` or ``localllm._native`` may be loaded by that:
a crash in native code must never be able to take the daemon down, and
``localllm list`` must start without loading llama.cpp.  The other way round,
the native children (runner, probe, quantize) do not import asyncio, which only
the daemon's side of their modules uses.

The floors (DESIGN.md section 7) are read from the source too, imports inside
functions included: nothing outside engine/ imports it but the command that
defers to it (``cli/worker.py``), so nothing below it (hardware/, modelfile/,
store/ ...) does; only ``engine/binding.py`` imports the native module; and the
engine imports nothing of the daemon's floors above the runner's messages.
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
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "localllm.server.app" in loaded and "localllm.tui.app" in loaded
    forbidden = [m for m in loaded if m.startswith(("localllm.engine", "localllm._native"))]
    assert forbidden == []


CHILD_PROBE = """
import json, sys
import localllm.runner.worker, localllm.engine.engine
import localllm.engine.probe_child, localllm.engine.quantize_child, localllm.engine.rpc_worker
print(json.dumps(sorted(m for m in sys.modules if m == "asyncio" or m.startswith("asyncio."))))
"""


def test_the_native_children_do_not_import_asyncio() -> None:
    # A runner starts at every model load and a probe at every daemon start: asyncio was
    # half of the runner's imports (94 ms -> 41 ms) and only the daemon's side uses it.
    out = subprocess.run(
        [sys.executable, "-c", CHILD_PROBE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
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
    out = subprocess.run(
        [sys.executable, "-c", COMPAT_PROBE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert {
        "localllm.compat.openai.stream",
        "localllm.compat.responses.stream",
        "localllm.compat.anthropic.stream",
    } <= set(loaded)
    assert [m for m in loaded if m.startswith(("localllm.server", "localllm.inference"))] == []
    # Imports inside functions count too.
    for path in (REPO / "localllm" / "compat").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not [
                n for n in names if n.startswith(("localllm.server", "localllm.inference"))
            ], path


PACKAGE = REPO / "localllm"


def imported(path: Path) -> set[str]:
    """Every module name an import in ``path`` names, wherever the import sits:
    ``from a.b import c`` names both ``a.b`` and ``a.b.c`` (c may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


# Outside engine/, only the command that defers to it, as `serve` does to server/serve.py.
ENGINE_IMPORTERS = {Path("cli/worker.py")}


def test_only_the_native_side_imports_the_engine() -> None:
    # engine/ holds everything that loads libllama (the runner's engine, the probe,
    # quantize and RPC-worker children); the floors below it (hardware/, modelfile/,
    # store/, ...) start those children by module name and import none of it.
    wrong = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "engine"
        and path.relative_to(PACKAGE) not in ENGINE_IMPORTERS
        and any(within(n, "localllm.engine") for n in imported(path))
    )
    assert wrong == []
    hardware = [n for path in (PACKAGE / "hardware").rglob("*.py") for n in imported(path)]
    assert [n for n in hardware if within(n, "localllm.engine")] == []
    natives = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(within(n, "localllm._native") for n in imported(path))
    )
    assert natives == ["engine/binding.py"]


ABOVE_THE_ENGINE = (
    "localllm.server",
    "localllm.compat",
    "localllm.inference",
    "localllm.models",
    "localllm.scheduler",
    "localllm.api",
    "localllm.cli",
    "localllm.tui",
    "localllm.loadtest",
)


def test_the_engine_imports_nothing_above_the_runners_messages() -> None:
    # The engine runs in the child and knows the daemon only by the messages that
    # cross the pipe (runner/messages.py): nothing of the daemon's floors above it.
    for path in (PACKAGE / "engine").rglob("*.py"):
        names = imported(path)
        assert [n for n in names if within(n, *ABOVE_THE_ENGINE)] == [], path
        runner = [n for n in names if within(n, "localllm.runner")]
        assert all(within(n, "localllm.runner.messages") for n in runner), path


WIRE_PROBE = """
import json, sys
import localllm.api.wire
print(json.dumps(sorted(m for m in sys.modules if m.startswith("localllm"))))
"""


def test_the_wire_types_cost_no_import() -> None:
    # api/wire.py is TypedDicts only: every client and the CLI's fastest commands import
    # it (`localllm list`), so it must not pull in anything of the daemon's.
    out = subprocess.run(
        [sys.executable, "-c", WIRE_PROBE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == ["localllm", "localllm.api", "localllm.api.wire"]
    tree = ast.parse((REPO / "localllm" / "api" / "wire.py").read_text())
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert imported <= {"__future__", "typing"}

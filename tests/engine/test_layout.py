"""The engine's layout: its modules import one way; only native objects' owners call libllama.

Read from the source (imports under ``TYPE_CHECKING`` and inside functions
count): a module that took the ``Engine`` to reach its private attributes, or a
helper that called ``lib.ll_*`` on a handle it does not own, closed circles
that only ``TYPE_CHECKING`` kept from failing at import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "localllm" / "engine"
# The modules that own a native object (or the process's ggml registry) and so call it.
NATIVE_OWNERS = {"binding", "model", "sampling", "adapters", "vision", "plugins", "cpu_buffers"}


def engine_imports(path: Path) -> set[str]:
    """The engine modules ``path`` imports, by short name."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "localllm.engine":
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "localllm.engine."
        ):
            out.add(str(node.module).split(".")[2])
        elif isinstance(node, ast.Import):
            out.update(
                a.name.split(".")[2] for a in node.names if a.name.startswith("localllm.engine.")
            )
    return out - {path.stem}


def test_the_engine_modules_import_one_way() -> None:
    graph = {p.stem: engine_imports(p) for p in ENGINE.glob("*.py")}
    done: set[str] = set()

    def walk(mod: str, trail: list[str]) -> None:
        if mod in trail:
            raise AssertionError("import circle: " + " -> ".join([*trail[trail.index(mod) :], mod]))
        if mod in done:
            return
        for dep in sorted(graph.get(mod, ())):
            walk(dep, [*trail, mod])
        done.add(mod)

    for mod in sorted(graph):
        walk(mod, [])
    assert "engine" not in set().union(*graph.values())  # nothing reaches back to the Engine
    assert graph["slots"] <= {
        "positions",
        "tokenize",
        "model",
        "ngram",
        "sampling",
        "text",
        "thinking",
    }


def test_only_the_owners_of_native_objects_call_libllama() -> None:
    callers = {p.stem for p in ENGINE.glob("*.py") if re.search(r"\blib\.ll_", p.read_text())}
    assert callers <= NATIVE_OWNERS, callers - NATIVE_OWNERS

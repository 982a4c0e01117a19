"""hardware/ reports facts and sits below the floors that act on them (DESIGN §7).

Read from the source, imports inside functions included: no module of hardware/
imports backends/ (the advice on what to get: backends/advice.py), the scheduler,
the server, the CLI or the engine.
"""

from __future__ import annotations

import ast
from pathlib import Path

HARDWARE = Path(__file__).resolve().parents[2] / "localllm" / "hardware"
ABOVE = ("backends", "scheduler", "server", "cli", "tui", "engine", "inference", "models")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_hardware_imports_nothing_above_it() -> None:
    modules = sorted(HARDWARE.glob("*.py"))
    assert len(modules) >= 6
    wrong = {
        f"{path.name}: {name}"
        for path in modules
        for name in imported(path)
        if name.startswith(tuple(f"localllm.{floor}" for floor in ABOVE))
    }
    assert wrong == set()

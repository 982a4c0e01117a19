"""The TUI's arrows: app -> screens -> widgets; a widget imports no screen and not the app.

Widgets tell the screen what happened by posting messages (``Conversation.ReplyEnded``,
``MessageView.CopyRequested``), as oterm's and elia's do, so a widget can be mounted
and tested in a harness app without any screen of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

TUI = Path(__file__).resolve().parents[2] / "localllm" / "tui"


def imported(path: Path) -> list[str]:
    """Every module ``path`` imports, inside functions and ``TYPE_CHECKING`` too."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def test_widgets_import_neither_screens_nor_the_app() -> None:
    upward = {
        f"{path.relative_to(TUI)}: {name}"
        for path in (TUI / "widgets").glob("*.py")
        for name in imported(path)
        if name.startswith(("localllm.tui.screens", "localllm.tui.app"))
    }
    assert upward == set()

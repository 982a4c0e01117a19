"""Per-chat settings: system prompt, temperature, top_p, num_ctx, seed, keep-alive,
and the MCP servers file whose tools the chat offers (with "trust tools", the
``--yes-tools`` of the dialog), used when ``chat`` was started without ``--mcp``.

Empty fields mean "the model's default" and are not sent.  Ctrl+S saves
(the chat screen stores the result with the chat), Escape cancels.  The MCP file
is read when saved: one that is not an ``mcpServers`` config keeps the dialog
open with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, TextArea

from localllm.errors import LocalLLMError
from localllm.mcp.servers import read_servers
from localllm.tui.sessions import ChatSettings

_FIELDS = (
    ("temperature", "Temperature", "model default, e.g. 0.8"),
    ("top_p", "Top p", "model default, e.g. 0.9"),
    ("num_ctx", "Context (num_ctx)", "model default, e.g. 4096"),
    ("seed", "Seed", "random"),
    ("keep_alive", "Keep alive", "daemon default, e.g. 5m, -1"),
    ("mcp_file", "MCP servers file", "none, e.g. ~/.config/mcp.json"),
)


def check_mcp_file(text: str) -> str | None:
    """The MCP servers file as kept (``None`` when empty), once it reads as an
    ``mcpServers`` config; raises ``ValueError`` with the reader's reason."""
    text = text.strip()
    if not text:
        return None
    try:
        read_servers(Path(text).expanduser())
    except LocalLLMError as exc:
        raise ValueError(str(exc)) from None
    return text


def parse_settings(
    system: str, values: dict[str, str], *, trust_tools: bool = False
) -> ChatSettings:
    """Build settings from the form's text; raises ``ValueError`` naming a bad field."""

    def number(key: str, kind: type[float] | type[int]) -> float | int | None:
        text = values.get(key, "").strip()
        if not text:
            return None
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"{key} must be a {kind.__name__}: {text!r}") from None

    temperature = number("temperature", float)
    top_p = number("top_p", float)
    num_ctx = number("num_ctx", int)
    seed = number("seed", int)
    if num_ctx is not None and num_ctx < 1:
        raise ValueError("num_ctx must be positive")
    keep = values.get("keep_alive", "").strip() or None
    return ChatSettings(
        system=system,
        temperature=temperature,
        top_p=top_p,
        num_ctx=None if num_ctx is None else int(num_ctx),
        seed=None if seed is None else int(seed),
        keep_alive=keep,
        mcp_file=check_mcp_file(values.get("mcp_file", "")),
        trust_tools=trust_tools,
    )


def _show(value: object) -> str:
    return "" if value is None else str(value)


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, settings: ChatSettings) -> None:
        super().__init__(classes="dialog-screen")
        self.settings = settings

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog settings"):
            yield Label("Chat settings", classes="question")
            yield Label("System prompt")
            yield TextArea(self.settings.system, id="system", compact=True)
            with Grid(classes="fields"):
                for key, title, hint in _FIELDS:
                    yield Label(title)
                    yield Input(
                        _show(getattr(self.settings, key)), placeholder=hint, id=key, compact=True
                    )
            yield Checkbox(
                "Trust tools: run MCP calls without asking",
                self.settings.trust_tools,
                id="trust_tools",
                compact=True,
            )
            yield Label("", id="error")
            with Horizontal(classes="buttons"):
                yield Button("Save (Ctrl+S)", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#system", TextArea).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)

    def action_save(self) -> None:
        values = {key: self.query_one(f"#{key}", Input).value for key, _, _ in _FIELDS}
        try:
            settings = parse_settings(
                self.query_one("#system", TextArea).text,
                values,
                trust_tools=self.query_one("#trust_tools", Checkbox).value,
            )
        except ValueError as exc:
            self.query_one("#error", Label).update(str(exc))
            return
        self.dismiss(settings)

    def action_cancel(self) -> None:
        self.dismiss(None)

"""Per-chat settings: system prompt, temperature, top_p, num_ctx, seed, keep-alive.

Empty fields mean "the model's default" and are not sent.  Ctrl+S saves
(the chat screen stores the result with the chat), Escape cancels.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, TextArea

from localllm.tui.sessions import ChatSettings

_FIELDS = (
    ("temperature", "Temperature", "model default, e.g. 0.8"),
    ("top_p", "Top p", "model default, e.g. 0.9"),
    ("num_ctx", "Context (num_ctx)", "model default, e.g. 4096"),
    ("seed", "Seed", "random"),
    ("keep_alive", "Keep alive", "daemon default, e.g. 5m, -1"),
)


def parse_settings(system: str, values: dict[str, str]) -> ChatSettings:
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
            settings = parse_settings(self.query_one("#system", TextArea).text, values)
        except ValueError as exc:
            self.query_one("#error", Label).update(str(exc))
            return
        self.dismiss(settings)

    def action_cancel(self) -> None:
        self.dismiss(None)

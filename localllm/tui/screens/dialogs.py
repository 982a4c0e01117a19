"""Small modal dialogs: confirm, ask for a line of text, and the F1 help screen."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Markdown

ResultT = TypeVar("ResultT")


class _Question(ModalScreen[ResultT]):
    """A question over the screen, and the widgets that answer it."""

    def __init__(self, question: str, *answers: Widget) -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.answers = answers

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="question")
            yield from self.answers


class ConfirmScreen(_Question[bool]):
    """Yes/no question; ``y``/Enter confirm, ``n``/Escape decline."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, yes: str = "Yes", no: str = "No") -> None:
        buttons = Horizontal(
            Button(yes, variant="primary", id="yes"), Button(no, id="no"), classes="buttons"
        )
        super().__init__(question, buttons)

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class AskScreen(_Question[str | None]):
    """One line of text (a chat title, a model name); Escape cancels with ``None``."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, value: str = "", placeholder: str = "") -> None:
        super().__init__(question, Input(value, placeholder=placeholder, id="answer"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


HELP = """\
# localllm chat

| Key | Does |
|---|---|
| Enter | send the message |
| Ctrl+J / Shift+Enter | new line in the message |
| `/image PATH` | attach an image to the next message (or paste the file's path) |
| `/image` · `/image clear` | list · drop the images attached to the next message |
| Escape | stop the reply being generated |
| Ctrl+E | edit and resend your last message |
| Ctrl+R | regenerate the last reply |
| Ctrl+Y | copy the last reply (focus a message and press `c` to copy that one) |
| Ctrl+N | new chat |
| Ctrl+O | models: pick, search, pull, delete, details |
| Ctrl+S | settings of this chat (system prompt, sampling, keep-alive) |
| Ctrl+B | show or hide the chat list |
| F2 | rename this chat |
| Ctrl+T | switch light / dark theme |
| Ctrl+P | command palette (export, delete, everything else) |
| F1 | this help |
| Ctrl+Q | quit |

In the chat list: Enter opens a chat, Delete deletes it.
In the model list: Enter picks, `s` searches Hugging Face (with what fits here), `p` pulls,
`d` deletes, `i` shows details.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f1,q", "dismiss", "Close")]

    def __init__(self) -> None:
        super().__init__(classes="dialog-screen")

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Markdown(HELP)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)

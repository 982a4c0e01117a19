"""The sidebar: saved chats, most recent first; Enter opens one."""

from __future__ import annotations

from textual.widgets import OptionList
from textual.widgets.option_list import Option

from localllm.tui.sessions import Chat


class ChatList(OptionList):
    """Lists chats by title; option ids are the chat ids as text."""

    def show(self, chats: list[Chat], current: int | None) -> None:
        self.clear_options()
        self.add_options(Option(c.title, id=str(c.id)) for c in chats)
        if current is not None:
            ids = [c.id for c in chats]
            if current in ids:
                self.highlighted = ids.index(current)

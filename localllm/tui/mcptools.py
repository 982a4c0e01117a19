"""``chat --mcp FILE``: the MCP servers' tools in the TUI, each call confirmed in a dialog.

The app opens the servers (``localllm.mcp.hub``) in a worker that lives as long
as the app, since the sessions must be left by the task that opened them, and
hands the hub to the conversation.  When a reply calls a tool, the
conversation asks here: a ``ConfirmScreen`` unless ``--yes-tools``, then the
call; the result goes back to the model as a tool message, shown folded
(``widgets/toolcall.py``), until the model answers with text (``MAX_ROUNDS``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localllm.tui.screens.dialogs import ConfirmScreen

if TYPE_CHECKING:
    from textual.app import App

    from localllm.api.wire import ToolCall
    from localllm.mcp.hub import ToolHub

MAX_ROUNDS = 8  # rounds of tool calls one message may take
REFUSED = "The user refused to run this tool call."


@dataclass
class Outcome:
    text: str  # what the model reads
    title: str  # the folded line on screen
    arguments: str  # the call's arguments, as JSON


@dataclass
class TuiTools:
    hub: ToolHub
    trusted: bool = False  # --yes-tools

    async def run(self, app: App[object], call: ToolCall) -> Outcome:
        """Confirm (unless trusted) and make one call; must run in a worker (the dialog)."""
        fn = call["function"]
        name, args = fn["name"], fn.get("arguments") or {}
        shown = json.dumps(args, ensure_ascii=False)
        tool = self.hub.tools.get(name)
        if tool is None:
            return Outcome(
                f"error: there is no tool named {name!r}", f"Tool {name}: unknown", shown
            )
        if not self.trusted:
            question = f"Run tool {name} ({tool.server}) with {shown}?"
            if not await app.push_screen_wait(ConfirmScreen(question, yes="Run", no="Refuse")):
                return Outcome(REFUSED, f"Tool {name}: refused", shown)
        done = await self.hub.call(name, args)
        status = "failed" if done.error is not None else "done"
        return Outcome(done.text, f"Tool {name} ({tool.server}): {status}", shown)

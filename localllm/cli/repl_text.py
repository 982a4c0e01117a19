"""The texts of ``localllm run``'s interactive session: help screens and ``/show parameters``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localllm.api.bodies import Options

HELP = """Available Commands:
  /set            Set session variables
  /show           Show model information
  /load <model>   Load a session or model
  /save <model>   Save your current session
  /clear          Clear session context
  /list           List models
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use \"\"\" to begin a multi-line message."""

HELP_SET = """Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set system message
  /set history           Enable history
  /set nohistory         Disable history
  /set wordwrap          Enable wordwrap
  /set nowordwrap        Disable wordwrap
  /set format json       Enable JSON mode
  /set noformat          Disable formatting
  /set verbose           Show LLM stats
  /set quiet             Disable LLM stats
  /set think [level]     Enable thinking (optionally low, medium or high)
  /set nothink           Disable thinking"""

HELP_SHOW = """Available Commands:
  /show info         Show details for this model
  /show license      Show model license
  /show modelfile    Show Modelfile for this model
  /show parameters   Show parameters for this model
  /show system       Show system message
  /show template     Show prompt template"""

HELP_SHORTCUTS = """Available keyboard shortcuts:
  Ctrl + a            Move to the beginning of the line (Home)
  Ctrl + e            Move to the end of the line (End)
  Ctrl + k            Delete the sentence after the cursor
  Ctrl + u            Delete the sentence before the cursor
  Ctrl + w            Delete the word before the cursor
  Ctrl + l            Clear the screen
  Ctrl + c            Stop the model from responding
  Ctrl + d            Exit (/bye)"""


def parameters_text(model_params: str, user: Options) -> str:
    lines = ["Model defined parameters:"]
    rows = [ln for ln in model_params.splitlines() if ln.strip()]
    lines += rows or ["No additional parameters were specified for this model."]
    if user:
        # The same lines as show's "parameters", so both blocks read alike.
        from localllm.models.service import format_parameters

        lines += ["", "User defined parameters:", format_parameters(user)]
    return "\n".join(lines)


def help_text(args: list[str]) -> str:
    topic = args[0] if args else ""
    return {"shortcuts": HELP_SHORTCUTS, "set": HELP_SET, "show": HELP_SHOW}.get(topic, HELP)

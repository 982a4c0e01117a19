"""Muse Glimmer: harmony-like messages addressed with ``to=``, calls in ``<atem:..>`` XML.

The prompt ends with ``<|start|>assistant``, so a reply starts with a recipient::

    to=self<|message|>reasoning<|eom|>
    <|start|>assistant to=user<|message|>the answer<|eom|>
    <|start|>assistant to=get_time<|message|><atem:function_calls>
    <atem:invoke name="get_time"><atem:parameter name="city">Paris</atem:parameter>
    </atem:invoke></atem:function_calls><|eot|>

``to=self`` is thinking, ``to=user`` (or no recipient) content, any other
recipient a call whose body is the ``<atem:..>`` markup (read as a
:class:`~localllm.toolcalls.tagged.Shape`).  Markup quoted in an answer stays
content: only a message addressed to a function is read as calls.
"""

from __future__ import annotations

from localllm.toolcalls.base import ToolCall
from localllm.toolcalls.harmony import MESSAGE, START, HarmonyParser
from localllm.toolcalls.tagged import Tagged, invoke_shape

EOM, EOT = "<|eom|>", "<|eot|>"
CALLS = invoke_shape("atem:", "function_calls")
MARKERS = (START, MESSAGE, EOM, EOT)


class MuseParser(HarmonyParser):
    name = "muse_glimmer"
    body_end = (EOM, EOT, START)
    closers = (EOM, EOT)
    markup = MARKERS

    def _classify(self, channel: str, recipient: str) -> tuple[str, str]:
        if recipient == "self":
            return "thinking", ""
        if recipient in ("", "user", "all"):
            return "content", ""
        return "call", recipient

    def _calls(self, body: str) -> list[ToolCall] | None:
        attempt = Tagged(CALLS).parse(body.strip(), self.tools, True)
        if attempt is None or not attempt.calls:
            return self._checked([])
        return self._checked([(c.name, c.arguments) for c in attempt.calls])

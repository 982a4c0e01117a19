"""Cohere Command-R7B (and Cohere2 MoE): reasoning, then an action list or a response.

::

    <|START_THINKING|>..<|END_THINKING|>
    <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {..}}]<|END_ACTION|>
    <|START_RESPONSE|>answer<|END_RESPONSE|>      (Cohere2 MoE: <|START_TEXT|>..<|END_TEXT|>)

The response and text markers are markup, removed from the content; the thinking
tags are the reasoning pair (see ``thinking.py``).
"""

from __future__ import annotations

from localllm.toolcalls.jsonlist import JsonAfterMarker

THINK = ("<|START_THINKING|>", "<|END_THINKING|>")
ACTION, ACTION_END = "<|START_ACTION|>", "<|END_ACTION|>"
WRAPPERS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>")


def command_r() -> JsonAfterMarker:
    return JsonAfterMarker(
        ACTION,
        ACTION_END,
        name="tool_name",
        args=("parameters",),
        ident="tool_call_id",
        strip=WRAPPERS,
    )

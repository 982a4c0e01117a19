"""IBM Granite 3.x: ``<|tool_call|>[{"name": .., "arguments": {..}}]``, reasoning in
``<think>``, the answer wrapped in ``<response>..</response>`` (markup, not content).

Granite 4 templates teach Hermes' ``<tool_call>`` instead and are detected as such.
"""

from __future__ import annotations

from localllm.toolcalls.jsonlist import JsonAfterMarker

TOOL_CALL = "<|tool_call|>"
RESPONSE, RESPONSE_END = "<response>", "</response>"


def granite() -> JsonAfterMarker:
    return JsonAfterMarker(TOOL_CALL, strip=(RESPONSE, RESPONSE_END))

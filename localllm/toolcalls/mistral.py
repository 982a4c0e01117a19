"""Mistral tool calls after ``[TOOL_CALLS]``: a JSON array, or ``name[ARGS]{..}``.

The old form (Mistral 7B v0.3, Nemo) is ``[TOOL_CALLS][{"name": .., "arguments":
{..}, "id": ..}, ..]``; the newer one (Small 3.2, Devstral, Ministral 3) is
``[TOOL_CALLS]name[ARGS]{..}`` with an optional ``[CALL_ID]id`` before
``[ARGS]``, one marker per call.  In real GGUFs these markers are control tokens:
the runner renders them as text for us (``ChatFormat.markers``).
"""

from __future__ import annotations

from localllm.toolcalls.base import (
    MAX_NAME,
    Attempt,
    RawCall,
    Syntax,
    ToolSet,
    json_calls,
    read_json,
    skip_ws,
)

TAG, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


class Mistral(Syntax):
    starts = (TAG,)
    strip = (TAG, ARGS, CALL_ID)
    markers = (TAG, ARGS, CALL_ID)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        at = skip_ws(text, len(TAG))
        if at >= len(text):
            return Attempt(len(text), None, "nothing after [TOOL_CALLS]") if final else None
        if text[at] == "[":
            got = read_json(text, at, final, self.scan)
            if got is None or isinstance(got, Attempt):
                return got
            data, end = got
            calls = json_calls(data)
            return Attempt(end, calls, "" if calls else "JSON is not a list of calls")
        args = text.find(ARGS, at)
        head = text[at:] if args < 0 else text[at:args]
        if len(head) > MAX_NAME or "\n" in head or "{" in head:
            # Not a name: give back the marker only, the rest is read as content.
            return Attempt(len(TAG), None, "no function name before [ARGS]")
        if args < 0:
            return Attempt(len(text), None, "no [ARGS]") if final else None
        name, _, call_id = head.partition(CALL_ID)
        got = read_json(text, args + len(ARGS), final, self.scan)
        if got is None or isinstance(got, Attempt):
            return got
        data, end = got
        return Attempt(end, [RawCall(name.strip(), data, call_id.strip() or None)])

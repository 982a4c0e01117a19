"""Llama 3.x tool calls: a bare JSON call at the start of the reply, or after ``<|python_tag|>``.

``{"name": .., "parameters": {..}}`` (or ``"arguments"``); several calls may be
separated by ``;``.  A bare JSON object only counts at the start of the reply (or
right after another call) and only with arguments: an ordinary JSON answer that
happens to have a "name" stays content.  ``<|python_tag|>`` may open a call
anywhere; what follows it that isn't JSON (Llama's built-in tools' Python
syntax) is content.
"""

from __future__ import annotations

from localllm.toolcalls.base import Attempt, Syntax, ToolSet, json_calls, read_json, skip_ws

PYTHON_TAG = "<|python_tag|>"


class Llama3(Syntax):
    starts = (PYTHON_TAG,)
    strip = (PYTHON_TAG,)
    markers = (PYTHON_TAG,)

    def leading(self, text: str, first: bool) -> bool | None:
        return text.startswith("{") or (not first and text.startswith(";"))

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        at = skip_ws(text, 0)
        if text.startswith(";", at):
            at += 1
        at = skip_ws(text, at)
        tagged = text.startswith(PYTHON_TAG, at)
        if tagged:
            at += len(PYTHON_TAG)
        got = read_json(text, at, final, self.scan)
        if got is None or isinstance(got, Attempt):
            return got
        data, end = got
        calls = json_calls(data, need_args=True)
        return Attempt(
            end,
            calls,
            "JSON after <|python_tag|> is not a call" if tagged and calls is None else "",
        )

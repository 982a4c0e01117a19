"""A tool-call format derived from a chat template that no dedicated parser claims.

A template teaches its call syntax by how it writes calls into the history, so
the syntax can be read off the template itself: render an assistant turn that
answers in text, one that calls a made-up tool, and one that calls two; the
text where the renderings differ is the call markup, with the made-up name,
argument names, values and ids at known places, from which ``callshape.py``
reads the candidate shapes (JSON, or tagged pieces).  The reasoning tags and the
markup around an answer are read the same way from more renderings.  Every
candidate is then checked by parsing the renderings back: a format is only
derived when its parser gives exactly the calls that were rendered.  Owns
:func:`derive` and :class:`Derived`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from localllm.api.wire import JSONObject
from localllm.toolcalls.base import Syntax
from localllm.toolcalls.callshape import ARGS1, ARGS2, FN1, FN2, ID1, ID2, candidates
from localllm.toolcalls.diff import boundary, raw_prefix_len, raw_suffix_len
from localllm.toolcalls.jsonlist import JsonShape
from localllm.toolcalls.stream import MarkupParser
from localllm.toolcalls.tagged import Shape, Tagged, marker_like

log = logging.getLogger(__name__)

ANSWER, REASON, ASK = "ANSWERTEXT", "REASONTEXT", "USERQ"
_LAST_TAG = re.compile(r"(<[^<>\n]{1,40}>|\[[^\[\]\n]{1,40}\])\s*$")


def _tool(name: str, props: dict[str, str]) -> JSONObject:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "A tool.",
            "parameters": {
                "type": "object",
                "required": list(props),
                "properties": {k: {"type": t, "description": k} for k, t in props.items()},
            },
        },
    }


TOOLS = [
    _tool(FN1, {"first_key": "string", "second_key": "integer"}),
    _tool(FN2, {"third_key": "string"}),
]


@dataclass(frozen=True)
class Derived:
    """A derived format: its call shape (tagged or JSON), its reasoning tags, and the
    markup the template wraps an answer in (``<|content|>``, an end-of-turn token:
    removed where the model writes it as text)."""

    shape: Shape | JsonShape
    think: tuple[str, str] | None = None
    markers: tuple[str, ...] = field(default=())
    wrappers: tuple[str, ...] = field(default=())

    def syntax(self) -> Syntax:
        if isinstance(self.shape, JsonShape):
            return self.shape.syntax(self.wrappers)
        return Tagged(
            replace(self.shape, extra_markers=(*self.shape.extra_markers, *self.wrappers))
        )


@lru_cache(maxsize=64)
def derive(template: str) -> Derived | None:
    """The call format ``template`` teaches, when one can be derived and checked."""
    from localllm.template.select import is_jinja

    if not template.strip() or not is_jinja(template) or FN1 in template:
        return None
    try:
        return _derive(template)
    except RecursionError:
        return None


def _render(
    template: str, turn: JSONObject, *, then: bool = True, think: bool | None = None
) -> str | None:
    """The conversation with ``turn`` as the assistant's, and (``then``) a user turn
    after it, so that every variant shows how the assistant's turn ends."""
    from localllm.template.chat import render_chat

    messages: list[JSONObject] = [{"role": "user", "content": ASK}, turn]
    if then:
        messages.append({"role": "user", "content": ASK})
    try:
        return render_chat(
            template,
            messages,
            tools=TOOLS,
            add_generation_prompt=False,
            bos_token="<s>",
            eos_token="</s>",
            think=think,
        )
    except Exception:  # a template that refuses our made-up turn teaches us nothing
        return None


def _call(name: str, args: JSONObject, ident: str) -> JSONObject:
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": args}}


def _derive(template: str) -> Derived | None:
    think = _think(template)
    for then in (True, False):
        text = _render(template, {"role": "assistant", "content": ANSWER}, then=then)
        empty = _render(template, {"role": "assistant", "content": ""}, then=then)
        one = _render(
            template,
            {"role": "assistant", "content": "", "tool_calls": [_call(FN1, ARGS1, ID1)]},
            then=then,
        )
        two = _render(
            template,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_call(FN1, ARGS1, ID1), _call(FN2, ARGS2, ID2)],
            },
            then=then,
        )
        if text is None or one is None or FN1 not in one:
            continue
        m1 = _markup(one, [text, empty])
        m2 = _markup(two, [text, empty]) if two is not None else None
        if m2 is not None and FN2 not in m2:
            m2 = None  # the template writes only the first call
        wrappers = _wrappers(text)
        for shape in candidates(m1, m2):
            found = Derived(shape, think, (*_markers(shape, think), *wrappers), wrappers)
            if _checks(found, m1, m2):
                return found
        log.debug("no tool-call format derived from the template (markup %r)", m1)
    return None


def _markup(rendered: str, others: list[str | None]) -> str:
    """The part of ``rendered`` that differs from every other rendering."""
    alts = [o for o in others if o is not None]
    start = min(raw_prefix_len(rendered, o) for o in alts)
    stop = len(rendered) - min(raw_suffix_len(rendered, o) for o in alts)
    # Never from inside a tag: "<|content|>" and "<|tool_calls|>" share "<|".
    while start > 0 and not boundary(rendered, start):
        start -= 1
    while stop < len(rendered) and not boundary(rendered, stop):
        stop += 1
    return rendered[start : max(start, stop)]


_WRAPPER = re.compile(r"<[|｜][^<>\s]{1,40}[|｜]>")


def _wrappers(text: str) -> tuple[str, ...]:
    """The special tokens right around the answer in a text turn: what the model writes
    around its text (``<|content|>``, ``<|END_OF_TURN_TOKEN|>``)."""
    at = text.find(ANSWER)
    before = _WRAPPER.findall(text[max(0, at - 80) : at])
    after = _WRAPPER.findall(text[at + len(ANSWER) : at + len(ANSWER) + 80])
    found = [t for t in (before[-1:] + after[:1]) if t not in (ASK,)]
    return tuple(dict.fromkeys(found))


def _think(template: str) -> tuple[str, str] | None:
    from localllm.toolcalls.thinking import detect_thinking_tags

    known = detect_thinking_tags(template)
    text = _render(template, {"role": "assistant", "content": ANSWER}, think=True)
    shown = _render(
        template, {"role": "assistant", "content": ANSWER, "reasoning_content": REASON}, think=True
    )
    if text is None or shown is None or REASON not in shown or ANSWER not in shown:
        return known
    reason = shown.find(REASON, raw_prefix_len(shown, text))
    tag = _LAST_TAG.search(shown[:reason])
    opening = tag.group(1) if tag else ""
    closing = shown[reason + len(REASON) : shown.find(ANSWER, reason)].strip()
    if known and known[1] in closing:
        return known
    if opening and closing and "\n" not in opening + closing and len(opening + closing) < 80:
        return opening, closing
    return known


def _markers(shape: Shape | JsonShape, think: tuple[str, str] | None) -> tuple[str, ...]:
    if isinstance(shape, Shape):
        found = list(shape.markers)
    else:
        found = [t for piece in (shape.open, shape.close) for t in piece.split() if marker_like(t)]
    return tuple(dict.fromkeys([*found, *(think or ())]))


# -- checking -------------------------------------------------------------------------


def _checks(found: Derived, m1: str, m2: str | None) -> bool:
    """Whether the derived parser reads back exactly the rendered calls."""
    want1 = [(FN1, ARGS1)]
    if _parse(found, m1) != (want1, ""):
        return False
    if m2 is not None and _parse(found, m2) != ([*want1, (FN2, ARGS2)], ""):
        return False
    return _parse(found, ANSWER) == ([], ANSWER)


def _parse(found: Derived, text: str) -> tuple[list[tuple[str, Any]], str]:
    parser = MarkupParser(found.syntax(), TOOLS, None, tags=None)
    out = parser.feed(text)
    out.extend(parser.finish())
    return [(c.name, c.arguments) for c in out.calls], out.content.strip()

"""The 70 real chat templates of llama.cpp's corpus render exactly as transformers renders them.

Each template gets several conversations (system + user, multi-turn, tools offered,
a tool call and its result, reasoning in history).  For every case transformers can
render, our text must be identical; a case transformers refuses (``raise_exception``,
e.g. Gemma 2 with a system role) must be refused by us too, as ``TemplateError`` (an
``InvalidRequest``: HTTP 400) carrying the template's own message.  One difference is
allowed, llama.cpp's: ``tojson`` writes a generator as a list (llama.cpp's own
deepseek-r1 template pipes ``map`` into it), where transformers' ``json.dumps`` fails.  The figure
(identical / differ / refused) is printed by ``test_corpus_figure``.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

import jinja2
import pytest

from localllm.errors import InvalidRequest
from localllm.template.chat import render_chat
from localllm.template.jinja import TemplateError
from tests.support.template_corpus import BOS, CONVERSATIONS, EOS, corpus, reference

NAMES = list(corpus())


def _reference(template: str, conv: dict[str, Any]) -> str:
    """transformers' text; where it refuses only because its ``tojson`` cannot write a
    generator (a template written for llama.cpp's renderer, which writes it as a list),
    its text with that one difference."""
    try:
        return reference(template, conv)
    except TypeError as exc:
        if "generator is not JSON serializable" not in str(exc):
            raise
        return reference(template, conv, iterables=True)


@cache
def outcome(name: str, case: str) -> tuple[str, str]:
    """("identical" | "differ" | "refused", detail) for one template and conversation."""
    template, conv = corpus()[name], CONVERSATIONS[case]
    try:
        want = _reference(template, conv)
    except Exception as ref_exc:
        try:
            render_chat(
                template, conv["messages"], tools=conv.get("tools"), bos_token=BOS, eos_token=EOS
            )
        except TemplateError as ours:
            if isinstance(ref_exc, jinja2.TemplateError) and str(ref_exc) not in str(ours):
                return "differ", f"refused with {ours!s}, reference said {ref_exc!s}"
            return "refused", str(ours)
        except Exception as ours_exc:  # anything else would be a 500
            return "differ", f"reference refused ({ref_exc!r}); we raised {ours_exc!r}"
        return "differ", f"reference refused ({ref_exc!r}); we rendered it"
    try:
        got = render_chat(
            template, conv["messages"], tools=conv.get("tools"), bos_token=BOS, eos_token=EOS
        )
    except Exception as exc:
        return "differ", f"we raised {exc!r}"
    if got != want:
        at = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
            min(len(got), len(want)),
        )
        return (
            "differ",
            f"first difference at {at}: ours {got[at : at + 60]!r}, "
            f"reference {want[at : at + 60]!r}",
        )
    return "identical", ""


def test_the_corpus_is_the_full_set() -> None:
    assert len(NAMES) == 70


@pytest.mark.parametrize("name", NAMES)
def test_template_renders_like_transformers(name: str) -> None:
    bad = {
        case: outcome(name, case)[1] for case in CONVERSATIONS if outcome(name, case)[0] == "differ"
    }
    assert not bad, bad


def test_corpus_figure() -> None:
    counts = Counter(outcome(n, c)[0] for n in NAMES for c in CONVERSATIONS)
    templates = Counter(
        "refused-some" if any(outcome(n, c)[0] == "refused" for c in CONVERSATIONS) else "identical"
        for n in NAMES
    )
    print(
        f"\ncorpus: {len(NAMES)} templates x {len(CONVERSATIONS)} conversations: "
        f"{counts['identical']} identical, {counts['differ']} differ, "
        f"{counts['refused']} refused by both; templates fully identical: "
        f"{templates['identical']}, with a case both refuse: {templates['refused-some']}"
    )
    assert counts["differ"] == 0
    assert counts["identical"] > counts["refused"]


def test_a_refusal_is_a_400_with_the_templates_message() -> None:
    gemma = corpus()["google-gemma-2-2b-it.jinja"]
    with pytest.raises(InvalidRequest, match="System role not supported"):
        render_chat(gemma, CONVERSATIONS["system+user"]["messages"])

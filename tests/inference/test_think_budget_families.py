"""The thinking budget on every reasoning family: each closes with its own end marker.

For each output format of the pinned llama.cpp's templates (one template per
format, markers and whether the prompt opens the block), a script model
(tests/support/scriptmodel.py) with that real template replies ``[open] REASON close
Answer.`` to the rendered question.  The request's budget fields come from
``inference.thinkbudget.apply_budget`` (what the daemon's plans call) and the
reply, run through the real engine, is parsed by the family's own output parser:
unlimited, it is the whole reasoning and the answer; with a budget, the reasoning is
cut short, the family's close is forced, and the answer follows; with 0, there is no
reasoning at all.

So that the forced close leads to the answer, a first script (its own trigger)
holds the close and the answer: a control token is that token where it first
occurs (scriptmodel.py), so the close's last token is followed by the answer there,
while the reasoning reply holds the same markers as text.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from localllm.engine.engine import Engine
from localllm.inference.thinkbudget import apply_budget, block_markers
from localllm.runner.messages import CompletionRequest, SamplingParams
from localllm.template.jinja import TemplateError
from localllm.template.select import render_prompt
from localllm.toolcalls import ChatFormat, detect_format
from tests.support.engine_steps import opts, run_one
from tests.support.matrix_rows import EOS, VOCAB
from tests.support.scriptmodel import make_script_model
from tests.support.template_corpus import corpus

QUESTION = "Why is the sky blue?"
REASON = "Light scatters off the air, and blue light scatters the most of all."
ANSWER = "Answer."
CLOSER = "<|close-then-answer|>"  # the trigger of the script that holds close + answer


@lru_cache(maxsize=1)
def families() -> dict[str, tuple[str, ChatFormat, str]]:
    """One template per (format, markers, opened): id -> (template, format, prompt)."""
    out: dict[str, tuple[str, ChatFormat, str]] = {}
    for name, source in corpus().items():
        fmt = detect_format(source)
        marks = block_markers(fmt)
        if marks is None:
            continue
        try:
            prompt = render_prompt(
                None,
                source,
                [{"role": "user", "content": QUESTION}],
                think=True,
                bos_token="<s>",
                eos_token=EOS.get(fmt.name, "</s>"),
            )
        except TemplateError:
            continue
        if QUESTION not in prompt:
            continue
        req = request(fmt, prompt, 0)
        key = f"{fmt.name}-{'opened' if req.think_opened else 'open'}-{marks[1]}"
        out.setdefault(key, (name, fmt, prompt))
    return out


def request(fmt: ChatFormat, prompt: str, budget: int) -> CompletionRequest:
    req = CompletionRequest(
        id="r", prompt=prompt, sampling=SamplingParams(temperature=0.0), markers=list(fmt.markers)
    )
    apply_budget(req, fmt, prompt, {"think_budget": budget, "think_budget_message": ""}, None, None)
    return req


def parse(fmt: ChatFormat, prompt: str, text: str) -> tuple[str, str]:
    parser = fmt.parser(None, True, prompt)
    out = parser.feed(text)
    out.extend(parser.finish())
    return out.thinking, out.content.strip()


@pytest.mark.parametrize("family", sorted(families()))
def test_budget_closes_each_familys_block(family: str, tmp_path: Path) -> None:
    template, fmt, prompt = families()[family]
    marks = block_markers(fmt)
    assert marks is not None
    open_tag, _, close = marks
    req = request(fmt, prompt, -1)
    opened = request(fmt, prompt, 0).think_opened
    reply = ("" if opened else open_tag) + REASON + close + ANSWER
    scripts = {CLOSER: close + ANSWER, prompt[prompt.rindex(QUESTION) :]: reply}
    used = [m for m in fmt.markers if any(m in t for t in scripts.values())]
    path = make_script_model(
        tmp_path,
        scripts,
        chat_template=corpus()[template],
        control=list(dict.fromkeys([*used, *VOCAB.get(fmt.name, ())])),
        eos=EOS.get(fmt.name, "</s>"),
        context=16384,
    )
    with Engine([str(path)], opts(n_ctx=16384, n_batch=512, n_ubatch=512)) as e:
        assert req.think_budget == -1  # no budget: the reply as it always was
        whole = run_one(e, req).text
        assert whole == reply
        assert parse(fmt, prompt, whole) == (REASON, ANSWER)
        cut = run_one(e, request(fmt, prompt, 3))
        thinking, content = parse(fmt, prompt, cut.text)
        assert content == ANSWER, cut.text
        assert thinking and REASON.startswith(thinking) and len(thinking) < len(REASON) // 2
        nothing = run_one(e, request(fmt, prompt, 0))
        assert parse(fmt, prompt, nothing.text) == ("", ANSWER), nothing.text

"""Every tool-call format end to end: a script model per format, through the real daemon.

Owns the end-to-end proof of issue 12's parsers.  Each case is a tiny script
model (``tests/support/scriptmodel.py``) whose chat template is the family's real one
(read from the pinned sdist, never copied), so format detection runs as for a
user's GGUF, and whose greedy reply to the test's question is that family's raw
output (``tests/support/toolcall_samples.py``).  Every marker of the format that the
reply uses is a CONTROL token, as real GGUFs store many of them: the runner must
render them as text for the parser, and none may reach the user.  Checked through
``/api/chat`` and the openai SDK, each streamed and not: the parsed calls (name,
arguments, ids where the format has them), the thinking, and the content.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.template.select import render_prompt
from localllm.toolcalls import detect_format
from tests.support import toolcall_samples as s
from tests.support.daemon import Daemon, module_home, start_daemon
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.template_corpus import corpus
from tests.support.toolcall_helpers import TOOLS
from tests.support.variants import openai_client

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

ASK = "Weather in Paris?"  # the question a case answers with its call
MUSE = "Why is the sky blue?"  # ... and with its thinking + content reply
W = s.WEATHER_ARGS
Call = tuple[str, dict[str, Any], str | None]  # name, arguments, the id the format gives


@dataclass(frozen=True)
class Case:
    """One format: its real template, its raw replies and what they must parse to."""

    fmt: str
    template: str  # file stem in the sdist's template corpus
    call: str  # raw reply to ASK
    calls: tuple[Call, ...]
    content: str = ""
    thinking: str = ""
    muse: str | None = None  # raw reply to MUSE: thinking and content, no call
    mused: tuple[str, str] = ("", "")  # what it parses to: (thinking, content)
    think: bool | None = None  # the requests' think (some templates open the block)
    eos: str = "</s>"
    vocab: tuple[str, ...] = ()  # more control tokens, unused by the replies
    name: str = ""

    @property
    def model(self) -> str:
        return f"fmt-{self.name or self.fmt}"

    def tool_list(self) -> list[dict[str, Any]]:
        # With descriptions: gpt-oss's template concatenates them (a missing one fails).
        want = {c[0] for c in self.calls}
        return [
            {**t, "function": {**t["function"], "description": "A tool."}}
            for t in TOOLS
            if t["function"]["name"] in want
        ]


CASES = [
    Case(
        "hermes",
        "Qwen-Qwen3-0.6B",
        s.HERMES_CALL,
        (("get_weather", W, None),),
        muse=s.THINK_ANSWER,
        mused=("plan", "Answer."),
    ),
    Case("qwen3_coder", "Qwen3-Coder", s.XML_CALL, (("special_function", {"arg1": 1}, None),)),
    Case("llama3", "meta-llama-Llama-3.1-8B-Instruct", s.LLAMA3_JSON, (("get_weather", W, None),)),
    Case(
        "llama3",
        "meta-llama-Llama-3.1-8B-Instruct",
        s.LLAMA3_PYTHON_TAG,
        (("a", {"q": "x"}, None), ("b", {}, None)),
        name="llama3-python-tag",
    ),
    Case(
        "mistral",
        "mistralai-Ministral-3-14B-Reasoning-2512",
        s.MISTRAL_CALLS,
        (("get_weather", W, None), ("noop", {}, None)),
        content="Sure. ",
        muse=s.MISTRAL_THINK,
        mused=("step 1\nstep 2", "Result"),
    ),
    Case(
        "mistral_nemo",
        "mistralai-Mistral-Nemo-Instruct-2407",
        s.MISTRAL_NEMO_CALL,
        (("get_weather", W, "abc123XYZ"),),
    ),
    # <|return|> ends a reply; with <|call|> in the vocabulary llama.cpp stops treating
    # <|end|> as end of generation, as for the real gpt-oss vocabulary.
    Case(
        "gpt_oss",
        "openai-gpt-oss-120b",
        s.HARMONY_CALL,
        (("special_function", {"arg1": 1}, None),),
        thinking="I'm\nthinking",
        muse=s.HARMONY_FINAL,
        mused=("I'm\nthinking", "Hello, world!"),
        eos="<|return|>",
        vocab=("<|call|>",),
    ),
    Case(
        "deepseek_r1",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        "REASONING</think>" + s.DEEPSEEK_R1_CALL,
        (("get_time", {"city": "Tokyo"}, None),),
        thinking="REASONING",
        think=True,
        muse="Let me see.</think>Blue light scatters.",
        mused=("Let me see.", "Blue light scatters."),
    ),
    Case(
        "deepseek_v3_1",
        "deepseek-ai-DeepSeek-V3.1",
        s.DEEPSEEK_V31_CALLS,
        (("get_time", {"city": "Paris"}, None), ("get_weather", {"location": "Paris"}, None)),
        content="CONTENT",
        thinking="REASONING",
        think=True,
    ),
    Case(
        "glm_4_5",
        "GLM-4.6",
        s.GLM_46_CALL,
        (("special_function", {"arg1": 1}, None),),
        thinking="I'm\nthinking",
        muse=s.THINK_ANSWER,
        mused=("plan", "Answer."),
    ),
    Case(
        "kimi_k2",
        "Kimi-K2-Thinking",
        "<think>plan</think>" + s.KIMI_CALLS,
        (
            ("get_weather", {"location": "Paris"}, "functions.get_weather:0"),
            ("special_function", {"arg1": 1}, "functions.special_function:1"),
        ),
        thinking="plan",
    ),
    Case(
        "granite",
        "ibm-granite-granite-3.3-2B-Instruct",
        s.GRANITE_CALLS,
        (("special_function", {"arg1": 1}, None), ("get_time", {"city": "Paris"}, None)),
        muse=s.GRANITE_RESPONSE,
        mused=("I'm\nthinking", "Hello, world!\nWhat's up?"),
        think=True,
    ),
    # Cohere2 MoE's prompt opens <|START_THINKING|> (command-r7b's own preamble is 6k tokens).
    Case(
        "command_r7b",
        "Cohere2MoE",
        "I'm\nthinking<|END_THINKING|>" + s.COMMAND_R_ACTION,
        (("special_function", {"arg1": 1}, "0"),),
        thinking="I'm\nthinking",
        muse=s.COHERE2_TEXT,
        mused=("I'm\nthinking", "Hello, world!"),
    ),
    Case(
        "functionary_v3_2",
        "meetkai-functionary-medium-v3.2",
        s.FUNCTIONARY_CALLS,
        (("get_time", {"city": "Paris"}, None), ("python", {"code": "print(1)"}, None)),
        content="Let me check.",
    ),
    Case(
        "seed_oss",
        "ByteDance-Seed-OSS",
        s.SEED_OSS_CALL,
        (("special_function", {"arg1": 1}, None),),
        thinking="I'm thinking",
    ),
]
FORCED = "Force the weather in Paris."
FORCED_CALL = '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris", "unit": "celsius"}'
MISTRAL = next(c for c in CASES if c.fmt == "mistral")


def trigger(template: str, question: str, case: Case, tools: list[dict[str, Any]] | None) -> str:
    """The rendered prompt's tail from ``question`` on: the token that starts the reply."""
    prompt = render_prompt(
        None,
        template,
        [{"role": "user", "content": question}],
        tools=tools,
        think=case.think,
        bos_token="<s>",
        eos_token=case.eos,
    )
    return prompt[prompt.rindex(question) :]


def build(case: Case, folder: Path) -> Path:
    template = corpus()[case.template + ".jinja"]
    fmt = detect_format(template)
    assert fmt.name == case.fmt
    scripts = {trigger(template, ASK, case, case.tool_list()): case.call}
    if case.muse is not None:
        scripts[trigger(template, MUSE, case, case.tool_list())] = case.muse
    used = [m for m in fmt.markers if any(m in text for text in scripts.values())]
    control = list(dict.fromkeys([*used, *case.vocab]))
    return make_script_model(folder, scripts, control=control, chat_template=template, eos=case.eos)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "formats", LOCALLLM_NUM_PARALLEL="1", LOCALLLM_CONTEXT_LENGTH="2048"
    ) as tmp:
        # One thread: the model is tiny, and two threads spinning on a shared, busy
        # 2-core machine made single replies take seconds.
        for case in CASES:
            path = build(case, tmp / case.model)
            import_gguf(Store(paths.models()), parse_name(case.model), [path])
        # Its own model: a marker is a control token only at its first use in a model.
        template = corpus()[MISTRAL.template + ".jinja"]
        tail = trigger(template, FORCED, MISTRAL, MISTRAL.tool_list()[:1])
        path = make_script_model(
            tmp / "forced",
            {tail: FORCED_CALL},
            chat_template=template,
            control=["[TOOL_CALLS]", "[ARGS]"],
        )
        import_gguf(Store(paths.models()), parse_name("fmt-forced"), [path])
        with start_daemon(tmp) as daemon:
            yield daemon


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.name or c.fmt)
def case(request: pytest.FixtureRequest) -> Case:
    # Module scope groups the tests by case, so each model loads once.
    return request.param


def chat(
    d: Daemon, case: Case, question: str, stream: bool, **extra: Any
) -> tuple[str, str, list[dict[str, Any]]]:
    """(content, thinking, tool_calls) of one /api/chat reply, streamed or not."""
    body = {
        "model": case.model,
        "messages": [{"role": "user", "content": question}],
        "stream": stream,
        "options": {"temperature": 0},
        **extra,
    }
    if case.think is not None:
        body["think"] = case.think
    markers = detect_format(corpus()[case.template + ".jinja"]).markers
    with httpx.stream("POST", d.url + "/api/chat", json=body, trust_env=False, timeout=60) as r:
        assert r.status_code == 200, r.read()
        chunks = [json.loads(line) for line in r.iter_lines() if line]
    assert chunks[-1]["done"] and (len(chunks) > 1 if stream else len(chunks) == 1)
    content = thinking = ""
    calls: list[dict[str, Any]] = []
    for chunk in chunks:
        msg = chunk["message"]
        assert not [m for m in markers if m in msg["content"] + msg.get("thinking", "")]
        content += msg["content"]
        thinking += msg.get("thinking", "")
        calls += msg.get("tool_calls", [])
    return content, thinking, calls


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_api_chat(d: Daemon, case: Case, stream: bool) -> None:
    tools = case.tool_list()
    content, thinking, calls = chat(d, case, ASK, stream, tools=tools)
    assert (content, thinking) == (case.content, case.thinking)
    got = [(c["function"]["name"], c["function"]["arguments"], c.get("id")) for c in calls]
    assert got == list(case.calls)
    assert [c["function"]["index"] for c in calls] == list(range(len(calls)))
    if case.muse is not None:
        # Tools offered and none called: the reply is thinking and content only.
        content, thinking, calls = chat(d, case, MUSE, stream, tools=tools)
        assert (thinking, content, calls) == (*case.mused, [])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_sdk(d: Daemon, case: Case, stream: bool) -> None:
    c = openai_client(d)
    extra = {"reasoning_effort": "medium"} if case.think else {}
    # Plain dicts, as an agent sends them (Any: the SDK's TypedDicts would reject them).
    kw: Any = {"model": case.model, "temperature": 0, "tools": case.tool_list(), **extra}
    ask: Any = [{"role": "user", "content": ASK}]
    if not stream:
        r = c.chat.completions.create(messages=ask, **kw)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert (choice.message.content or "") == case.content
        assert (choice.message.model_extra or {}).get("reasoning", "") == case.thinking
        got = [
            (t.function.name, json.loads(t.function.arguments), t.id)
            for t in choice.message.tool_calls or []
            if t.type == "function"
        ]
        assert [g[:2] for g in got] == [c[:2] for c in case.calls]
        assert all(g[2] == (c[2] or g[2]) and g[2] for g, c in zip(got, case.calls, strict=True))
    else:
        chunks = list(c.chat.completions.create(messages=ask, stream=True, **kw))
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
        assert "".join(dl.content or "" for dl in deltas) == case.content
        assert (
            "".join((dl.model_extra or {}).get("reasoning") or "" for dl in deltas) == case.thinking
        )
        names: dict[int, str] = {}
        args: dict[int, str] = {}
        ids: dict[int, str] = {}
        for tc in [tc for dl in deltas for tc in dl.tool_calls or []]:
            if tc.id:
                ids[tc.index] = tc.id
            if tc.function and tc.function.name:
                names[tc.index] = tc.function.name
            args[tc.index] = args.get(tc.index, "") + (
                (tc.function and tc.function.arguments) or ""
            )
        assert [(names[i], json.loads(args[i])) for i in sorted(args)] == [
            c[:2] for c in case.calls
        ]
        assert all(
            ids.get(i) == (c[2] or ids.get(i)) and ids.get(i) for i, c in enumerate(case.calls)
        )
        assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    if case.muse is not None:
        muse: Any = [{"role": "user", "content": MUSE}]
        r = c.chat.completions.create(messages=muse, **kw)
        msg = r.choices[0].message
        assert ((msg.model_extra or {}).get("reasoning", ""), msg.content) == case.mused
        assert r.choices[0].finish_reason == "stop" and not msg.tool_calls


def test_forced_call_writes_control_token_markers(d: Daemon) -> None:
    # The grammar spells "[TOOL_CALLS]" and "[ARGS]" as text; llama.cpp's grammar sampler
    # must accept the model's control tokens for them (their text), else no call comes back.
    c = openai_client(d)
    forced: Any = [{"role": "user", "content": FORCED}]
    tools: Any = MISTRAL.tool_list()[:1]
    r = c.chat.completions.create(
        model="fmt-forced", messages=forced, tools=tools, tool_choice="required", temperature=0
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", W)

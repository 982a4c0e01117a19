"""The tool-call conformance matrix: every template of the pinned llama.cpp × every API.

Each template that teaches tool calls (``matrix_rows.rows``) gets two script models
(``tests/support/scriptmodel.py``) with that real template: one answers the question with the
family's raw call and another question with reasoning and text, one answers a third
question with the call the forced-call grammar writes.  Every marker a reply uses is a
CONTROL token, as in real GGUFs.  Each cell sends the question through one API of the
real daemon with a real client and checks the calls (names, arguments, ids where the
format has them), the reasoning and the text:

- ``/api/chat`` and streamed (httpx, Ollama's NDJSON), with the reasoning-and-text reply;
- OpenAI Chat Completions and streamed (the openai SDK);
- Anthropic Messages (the anthropic SDK, created and streamed);
- OpenAI Responses (the openai SDK, created and streamed);
- forced: ``tool_choice: "required"`` and the function by name (the grammar writes the
  call on the model's tokens).

The last test writes the matrix to ``docs/tool-calls.md``: it fails, having rewritten the
page, when the committed page says anything else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, module_home, start_daemon
from tests.support.matrix_page import PAGE, page
from tests.support.matrix_rows import ASK, FORCED, MUSE, Row, rows, stems
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.variants import openai_client

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

STEMS = stems()  # parametrized by template name: the rows are built at run time
RESULTS: dict[tuple[str, str], bool] = {}
CONTEXT = 16384  # long preambles (Command R+, gpt-oss) are mostly byte tokens here
Got = tuple[str, str, list[tuple[str, dict[str, Any], str | None]]]


def build(row: Row, folder: Path) -> None:
    scripts = {row.trigger(ASK, row.tools()): row.call, row.trigger(MUSE, row.tools()): row.muse}
    forced = {row.trigger(FORCED, row.forced_tools()): row.forced}
    store = Store(paths.models())
    for name, script in ((row.model, scripts), (row.model + "-forced", forced)):
        used = [m for m in row.fmt.markers if any(m in text for text in script.values())]
        path = make_script_model(
            folder / name,
            script,
            chat_template=row.source,
            control=list(dict.fromkeys([*used, *row.vocab])),
            eos=row.eos,
            context=CONTEXT,
        )
        import_gguf(store, parse_name(name), [path])


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "matrix", LOCALLLM_NUM_PARALLEL="1", LOCALLLM_CONTEXT_LENGTH=str(CONTEXT)
    ) as tmp:
        for row in rows()[0]:
            build(row, tmp / "gguf")
        with start_daemon(tmp) as daemon:
            yield daemon


def simple(got: Got) -> Got:
    return got[0], got[1], [(n, a, None) for n, a, _ in got[2]]


def expect(row: Row, got: Got, *, ids: bool) -> None:
    """The reply parsed as the row says: text, reasoning, calls (and the format's ids)."""
    want = (row.content, row.thinking, list(row.calls))
    if ids:
        assert got[:2] == want[:2] and [c[:2] for c in got[2]] == [c[:2] for c in want[2]]
        assert all(g[2] and g[2] == (w[2] or g[2]) for g, w in zip(got[2], want[2], strict=True))
    else:
        assert simple(got) == simple(want)


# -- the cells ------------------------------------------------------------------------


def api_chat(d: Daemon, row: Row, question: str, stream: bool, *, parts: int = 1) -> Got:
    """The reply to ``question``; streamed, it must come in at least ``parts`` chunks (a
    call may arrive with the last: a format's closing marker can end the generation)."""
    body = {
        "model": row.model,
        "messages": [{"role": "user", "content": question}],
        "stream": stream,
        "options": {"temperature": 0},
        "tools": row.tools(),
    }
    with httpx.stream("POST", d.url + "/api/chat", json=body, trust_env=False, timeout=120) as r:
        assert r.status_code == 200, r.read()
        chunks = [json.loads(line) for line in r.iter_lines() if line]
    assert chunks[-1]["done"] and (len(chunks) >= parts if stream else len(chunks) == 1)
    content = thinking = ""
    calls = []
    for chunk in chunks:
        msg = chunk["message"]
        shown = msg["content"] + msg.get("thinking", "")
        assert not [m for m in row.fmt.markers if m in shown], shown
        content += msg["content"]
        thinking += msg.get("thinking", "")
        calls += [
            (c["function"]["name"], c["function"]["arguments"], c.get("id"))
            for c in msg.get("tool_calls", [])
        ]
    return content, thinking, calls


def cell_api_chat(d: Daemon, row: Row, stream: bool) -> None:
    expect(row, api_chat(d, row, ASK, stream), ids=False)
    content, thinking, calls = api_chat(d, row, MUSE, stream, parts=2)  # text streams
    assert (thinking, content, calls) == (*row.mused, [])


def cell_openai(d: Daemon, row: Row, stream: bool) -> None:
    c = openai_client(d)
    kw: Any = {
        "model": row.model,
        "temperature": 0,
        "tools": row.tools(),
        "messages": [{"role": "user", "content": ASK}],
    }
    if not stream:
        choice = c.chat.completions.create(**kw).choices[0]
        assert choice.finish_reason == "tool_calls"
        msg = choice.message
        got = (
            msg.content or "",
            (msg.model_extra or {}).get("reasoning", ""),
            [
                (t.function.name, json.loads(t.function.arguments), t.id)
                for t in msg.tool_calls or []
                if t.type == "function"
            ],
        )
        expect(row, got, ids=True)
        return
    chunks = list(c.chat.completions.create(stream=True, **kw))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    ids: dict[int, str] = {}
    for tc in [tc for dl in deltas for tc in dl.tool_calls or []]:
        ids[tc.index] = tc.id or ids.get(tc.index, "")
        if tc.function and tc.function.name:
            names[tc.index] = tc.function.name
        args[tc.index] = args.get(tc.index, "") + ((tc.function and tc.function.arguments) or "")
    got = (
        "".join(dl.content or "" for dl in deltas),
        "".join((dl.model_extra or {}).get("reasoning") or "" for dl in deltas),
        [(names[i], json.loads(args[i]), ids.get(i)) for i in sorted(args)],
    )
    expect(row, got, ids=True)
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"


def cell_anthropic(d: Daemon, row: Row) -> None:
    import anthropic

    http = anthropic.DefaultHttpxClient(trust_env=False, timeout=120)
    c = d.keep(
        anthropic.Anthropic(base_url=d.url, api_key="unused", max_retries=0, http_client=http)
    )
    tools: Any = [
        {
            "name": t["function"]["name"],
            "description": "A tool.",
            "input_schema": t["function"]["parameters"],
        }
        for t in row.tools()
    ]
    kw: Any = {
        "model": row.model,
        "max_tokens": 512,
        "tools": tools,
        "messages": [{"role": "user", "content": ASK}],
        "extra_body": {"temperature": 0},
    }
    made = c.messages.create(**kw)
    with c.messages.stream(**kw) as stream:
        streamed = stream.get_final_message()
    for msg in (made, streamed):
        assert msg.stop_reason == "tool_use"
        blocks: Any = msg.content
        got = (
            "".join(b.text for b in blocks if b.type == "text"),
            "".join(b.thinking for b in blocks if b.type == "thinking"),
            [(b.name, b.input, b.id) for b in blocks if b.type == "tool_use"],
        )
        expect(row, got, ids=False)
        assert all(i for _, _, i in got[2])


def cell_responses(d: Daemon, row: Row) -> None:
    c = openai_client(d)
    tools: Any = [
        {
            "type": "function",
            "name": t["function"]["name"],
            "description": "A tool.",
            "parameters": t["function"]["parameters"],
        }
        for t in row.tools()
    ]
    kw: Any = {"model": row.model, "input": ASK, "tools": tools, "temperature": 0}
    made = c.responses.create(**kw)
    events = list(c.responses.create(stream=True, **kw))
    assert events[-1].type == "response.completed"
    for r in (made, events[-1].response):
        thinking = "".join(
            part.text for o in r.output if o.type == "reasoning" for part in o.summary
        )
        got = (
            r.output_text,
            thinking,
            [
                (o.name, json.loads(o.arguments), o.call_id)
                for o in r.output
                if o.type == "function_call"
            ],
        )
        expect(row, got, ids=False)
        assert all(i for _, _, i in got[2])


def cell_forced(d: Daemon, row: Row) -> None:
    c = openai_client(d)
    named = {"type": "function", "function": {"name": row.forced_call[0]}}
    # "required" over the one tool, and the tool by name (which keeps only it): the same
    # prompt, so the same reply of the script model, each forced by its grammar.
    for choice_of in ("required", named):
        kw: Any = {
            "model": row.model + "-forced",
            "temperature": 0,
            "tools": row.forced_tools(),
            "tool_choice": choice_of,
            "messages": [{"role": "user", "content": FORCED}],
        }
        choice = c.chat.completions.create(**kw).choices[0]
        assert choice.finish_reason == "tool_calls"
        assert not (choice.message.content or "").strip()
        (call,) = choice.message.tool_calls or []
        assert call.type == "function"
        assert (call.function.name, json.loads(call.function.arguments)) == row.forced_call


CELLS: dict[str, Callable[[Daemon, Row], None]] = {
    "api_chat": lambda d, row: cell_api_chat(d, row, False),
    "api_chat_stream": lambda d, row: cell_api_chat(d, row, True),
    "openai": lambda d, row: cell_openai(d, row, False),
    "openai_stream": lambda d, row: cell_openai(d, row, True),
    "anthropic": cell_anthropic,
    "responses": cell_responses,
    "forced": cell_forced,
}


@pytest.fixture(scope="module", params=STEMS)
def row(request: pytest.FixtureRequest) -> Row:
    # Module scope groups the cells by row: each model loads once.
    found = [r for r in rows()[0] if r.template == request.param]
    if not found:
        pytest.skip("no row: the template teaches no calls (see the page)")
    return found[0]


@pytest.mark.parametrize("column", list(CELLS))
def test_cell(d: Daemon, row: Row, column: str) -> None:
    RESULTS[(row.template, column)] = False
    CELLS[column](d, row)
    RESULTS[(row.template, column)] = True


def test_matrix_page() -> None:
    every, unrendered = rows()
    if len(RESULTS) < len(every) * len(CELLS):
        pytest.skip("the page is written from a run of every cell")
    text = page(every, list(CELLS), RESULTS, unrendered)
    if not PAGE.exists() or PAGE.read_text() != text:
        PAGE.write_text(text)
        pytest.fail(f"{PAGE} was stale and has been rewritten from this run: review it")
    assert all(RESULTS.values())

"""``/v1/responses`` with an ``mcp`` tool: the official openai SDK against the real daemon,
which lists and calls the tools of the official ``mcp`` package's server over streamable
HTTP (tests/support/mcpserver.py).

The script model (tests/support/scriptmodel.py) asked ``2+3?`` calls ``add``; after a
tool message ``sum=5`` it answers ``FIVE``, after any other tool message ``NONE``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.cli.test_run_mcp import SCRIPTS, TEMPLATE
from tests.support.daemon import Daemon, module_home, start_daemon
from tests.support.mcpserver import http_server
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.variants import openai_client


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str, Path]]:
    """One MCP server and one daemon for the module: (daemon, MCP URL, the calls file)."""
    # The tools' JSON schemas are long in the script model's byte tokens: a larger context.
    with module_home(
        tmp_path_factory, "responses-mcp", LOCALLLM_NUM_PARALLEL="2", LOCALLLM_CONTEXT_LENGTH="4096"
    ) as tmp:
        gguf = make_script_model(tmp / "gguf", SCRIPTS, eos="<|im_end|>", chat_template=TEMPLATE)
        # Greedy: the script is followed token for token.  (OpenAI's routes default to
        # temperature 1, as Ollama's do, over the model's own 0: each request asks for 0.)
        import_gguf(Store(paths.models()), parse_name("caller"), [gguf], params={"temperature": 0})
        calls = tmp / "calls.txt"
        with http_server(tmp, calls) as url, pytest.MonkeyPatch.context() as mp:
            mp.setenv("LOCALLLM_MCP_ALLOW", url.rsplit("/", 1)[0] + "/")  # http://127.0.0.1:PORT/
            with start_daemon(tmp) as daemon:
                yield daemon, url, calls


@pytest.fixture
def d(served: tuple[Daemon, str, Path]) -> Daemon:
    return served[0]


@pytest.fixture
def mcp(served: tuple[Daemon, str, Path]) -> str:
    return served[1]


@pytest.fixture
def calls(served: tuple[Daemon, str, Path]) -> Iterator[Path]:
    """The calls file, empty at the start of each test."""
    served[2].unlink(missing_ok=True)
    yield served[2]


def _tool(url: str, **more: Any) -> Any:
    return {"type": "mcp", "server_label": "calc", "server_url": url, **more}


def test_the_daemon_lists_calls_and_answers(d: Daemon, mcp: str, calls: Path) -> None:
    c = openai_client(d)
    r: Any = c.responses.create(
        model="caller",
        temperature=0,
        input="2+3?",
        tools=[_tool(mcp, require_approval="never", allowed_tools=["add", "shout"])],
    )
    listed, call, message = r.output
    assert listed.type == "mcp_list_tools" and listed.server_label == "calc"
    assert sorted(t.name for t in listed.tools) == ["add", "shout"]  # allowed_tools
    assert call.type == "mcp_call" and call.name == "add" and call.server_label == "calc"
    assert call.output == "sum=5" and call.error is None
    assert call.arguments.replace(" ", "") == '{"a":2,"b":3}'
    assert message.type == "message" and r.output_text == "FIVE"
    assert r.status == "completed"
    assert calls.read_text() == "add 2 3\n"
    assert [t.type for t in r.tools] == ["mcp"]  # echoed (headers never are)


def test_a_server_the_config_does_not_allow_is_a_400(d: Daemon) -> None:
    c = openai_client(d)
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(
            model="caller",
            temperature=0,
            input="2+3?",
            tools=[_tool("http://127.0.0.2:9/mcp", require_approval="never")],
        )
    assert err.value.status_code == 400
    assert "LOCALLLM_MCP_ALLOW" in str(err.value) and "'calc'" in str(err.value)


def test_an_allowed_server_that_fails_is_a_424_naming_it(d: Daemon, mcp: str) -> None:
    c = openai_client(d)
    with pytest.raises(openai.APIStatusError) as err:
        c.responses.create(
            model="caller", temperature=0, input="2+3?", tools=[_tool(mcp + "-not-here")]
        )
    assert err.value.status_code == 424
    assert "MCP server 'calc'" in str(err.value)


def test_approval_requests_then_the_follow_up_runs_or_refuses(
    d: Daemon, mcp: str, calls: Path
) -> None:
    c = openai_client(d)
    first: Any = c.responses.create(model="caller", temperature=0, input="2+3?", tools=[_tool(mcp)])
    kinds = [item.type for item in first.output]
    assert kinds == ["mcp_list_tools", "mcp_approval_request"]
    asked = first.output[1]
    assert asked.name == "add" and asked.server_label == "calc"
    assert not calls.exists()  # nothing ran without approval

    history = [
        {"role": "user", "content": "2+3?"},
        *(item.model_dump(exclude_none=True) for item in first.output),
    ]
    for approve, answer in ((False, "NONE"), (True, "FIVE")):
        reply: Any = c.responses.create(
            model="caller",
            temperature=0,
            tools=[_tool(mcp)],
            input=[
                *history,
                {
                    "type": "mcp_approval_response",
                    "approval_request_id": asked.id,
                    "approve": approve,
                },
            ],
        )
        assert reply.output_text == answer
        made = [item for item in reply.output if item.type == "mcp_call"]
        assert [(x.approval_request_id, x.output) for x in made] == (
            [(asked.id, "sum=5")] if approve else []
        )
        # Listed already in the input: not again.
        assert all(item.type != "mcp_list_tools" for item in reply.output)
    assert calls.read_text() == "add 2 3\n"


def test_the_stream_has_openais_mcp_events(d: Daemon, mcp: str) -> None:
    c = openai_client(d)
    events: list[Any] = list(
        c.responses.create(
            model="caller",
            temperature=0,
            input="2+3?",
            stream=True,
            tools=[_tool(mcp, require_approval={"never": {"tool_names": ["add"]}})],
        )
    )
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for kind in (
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ):
        assert kind in kinds
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    final = events[-1].response
    assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output_text == "FIVE"

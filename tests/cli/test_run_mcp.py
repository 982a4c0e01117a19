"""``localllm run --mcp``: the real CLI and daemon, a script model that calls a tool, and the
official ``mcp`` package's server over stdio (tests/support/mcpserver.py).

The script model (tests/support/scriptmodel.py) asked ``2+3?`` calls ``add`` with
Hermes ``<tool_call>`` markup; after a tool message whose text is ``sum=5`` it answers
``FIVE``, after any other tool message ``NONE``.  So ``FIVE`` in the output proves the
tool ran and its result reached the model.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support import forkserver
from tests.support.daemon import REPO, Daemon, module_home, start_daemon
from tests.support.mcpserver import stdio_config
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model

TAIL = "<|im_end|>\n<|im_start|>assistant\n"
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
TEMPLATE = (  # Hermes-style tools in ChatML; every newline is part of the prompt
    "{% if tools %}<|im_start|>system\n<tools>"
    "{% for t in tools %}{{ t | tojson }}{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    '{% for c in m.tool_calls or [] %}<tool_call>\n{"name": "{{ c.function.name }}", '
    '"arguments": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n'
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SCRIPTS = {
    "2+3?" + TAIL: CALL,
    "sum=5</tool_response>" + TAIL: "FIVE",
    "</tool_response>" + TAIL: "NONE",
}


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "run-mcp", LOCALLLM_NUM_PARALLEL="1", LOCALLLM_CONTEXT_LENGTH="512"
    ) as tmp:
        gguf = make_script_model(tmp / "gguf", SCRIPTS, eos="<|im_end|>", chat_template=TEMPLATE)
        # Greedy: the script is followed token for token.
        import_gguf(Store(paths.models()), parse_name("caller"), [gguf], params={"temperature": 0})
        with start_daemon(tmp) as daemon:
            yield daemon


def run(d: Daemon, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    out = forkserver.run(["run", *args], d.env, cwd=REPO, input=stdin, timeout=120)
    assert "Traceback" not in out.stderr, out.stderr
    return out


def test_yes_tools_gets_the_result_into_the_answer(d: Daemon, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    config = stdio_config(tmp_path, calls)
    out = run(d, "caller", "--mcp", str(config), "--yes-tools", "2+3?")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("FIVE")
    assert "[tool add] sum=5" in out.stderr
    assert calls.read_text() == "add 2 3\n"
    # Without --mcp the model is offered no tools, and the call is only text to it.
    plain = run(d, "caller", "2+3?")
    assert "FIVE" not in plain.stdout


def test_the_confirmation_refuses_on_n_and_runs_on_y(d: Daemon, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    config = stdio_config(tmp_path, calls)
    out = run(d, "caller", "-i", "--mcp", str(config), stdin="2+3?\nn\n/bye\n")
    assert out.returncode == 0, out.stderr
    assert "Run tool add (calc) with" in out.stderr and "[tool add: refused]" in out.stderr
    assert "NONE" in out.stdout and "FIVE" not in out.stdout
    assert not calls.exists()  # the tool never ran
    out = run(d, "caller", "-i", "--mcp", str(config), stdin="2+3?\ny\n/bye\n")
    assert "FIVE" in out.stdout and calls.read_text() == "add 2 3\n"


def test_a_server_that_fails_to_start_is_a_clear_error(d: Daemon, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {"ghost": {"command": "/nonexistent/ghost-server"}}}')
    out = run(d, "caller", "--mcp", str(config), "--yes-tools", "2+3?")
    assert out.returncode == 1
    assert "MCP server 'ghost' (/nonexistent/ghost-server) failed to start" in out.stderr

"""``localllm run``'s Ollama flags with the real CLI and daemon: --format, --keepalive, --think,
--hidethinking, --truncate, --dimensions, how the REPL's /set commands change them after,
and OLLAMA_NOHISTORY.

``qwen`` is a script model (tests/support/scriptmodel.py) with Qwen3's real chat template:
asked ``QUESTION`` with thinking on it answers ``<think>plan</think>Answer.``; with
thinking off (the template then closes an empty think block itself) it answers
``Plain answer.``.  ``echo`` and ``tiny-embed`` are the tiny model's (tests/cli/test_run.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from localllm.template.select import render_prompt
from tests.support import forkserver
from tests.support.daemon import REPO, Daemon, module_home, start_daemon
from tests.support.echo import ECHO_TEMPLATE, answer, in_terminal, read_fd_until
from tests.support.models import import_gguf
from tests.support.scriptmodel import make_script_model
from tests.support.template_corpus import corpus
from tests.support.tinymodel import make_tiny_model

QUESTION = "Why is the sky blue?"
THINKING_REPLY = "<think>plan</think>Answer."
PLAIN_REPLY = "Plain answer."
SHOWN = "Thinking...\nplan\n...done thinking.\n\nAnswer.\n"  # a pipe: no colours


def _tail(template: str, think: bool) -> str:
    prompt = render_prompt(
        None, template, [{"role": "user", "content": QUESTION}], think=think, eos_token="<|im_end|>"
    )
    return prompt[prompt.rindex(QUESTION) :]


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "run-flags", LOCALLLM_NUM_PARALLEL="1", LOCALLLM_CONTEXT_LENGTH="256"
    ) as tmp:
        store = Store(paths.models())
        qwen3 = corpus()["Qwen-Qwen3-0.6B.jinja"]
        scripts = {_tail(qwen3, True): THINKING_REPLY, _tail(qwen3, False): PLAIN_REPLY}
        model = make_script_model(
            tmp / "qwen",
            scripts,
            control=["<think>", "</think>"],
            chat_template=qwen3,
            eos="<|im_end|>",
        )
        import_gguf(store, parse_name("qwen"), [model])
        # Under a JSON grammar the tiny model's successor is mostly not allowed, and
        # sampling among the rest wrote strings until the 256-token context cut them:
        # greedy, and "{" followed by "}", so its JSON is "{}" whatever the format path.
        echo = make_tiny_model(
            tmp / "echo", chat_template=ECHO_TEMPLATE, overrides={"<0x7B>": "<0x7D>"}
        )
        import_gguf(store, parse_name("echo"), [echo], params={"temperature": 0})
        import_gguf(
            store, parse_name("tiny-embed"), [make_tiny_model(tmp / "embed", pooling="mean")]
        )
        with start_daemon(tmp) as daemon:
            yield daemon


def run(
    d: Daemon, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    out = forkserver.run(
        ["run", *args], {**d.env, **(env or {})}, cwd=REPO, input=stdin, timeout=120
    )
    assert "Traceback" not in out.stderr, out.stderr
    return out


# -- --think and --hidethinking ------------------------------------------------------------


def test_a_model_that_can_think_does_unless_told_not_to(d: Daemon) -> None:
    show = httpx.post(d.url + "/api/show", json={"model": "qwen"}, timeout=30).json()
    assert "thinking" in show["capabilities"]
    # No flag: as Ollama's run, think is sent because the model can; the thinking is shown.
    assert run(d, "qwen", QUESTION).stdout == SHOWN
    assert run(d, "qwen", "--think", QUESTION).stdout == SHOWN  # bare: the words stay prompt
    assert run(d, "qwen", "--think=high", QUESTION).stdout == SHOWN
    assert run(d, "qwen", "--think=false", QUESTION).stdout == PLAIN_REPLY + "\n"
    # Hidden, not skipped: the model still thinks (the reply is the thinking one's answer).
    assert run(d, "qwen", "--hidethinking", QUESTION).stdout == "Answer.\n"
    assert run(d, "qwen", "--hidethinking", "--think=false", QUESTION).stdout == PLAIN_REPLY + "\n"
    bad = run(d, "qwen", "--think=sideways", QUESTION)
    assert bad.returncode == 1 and 'invalid think value "sideways"' in bad.stderr


def test_the_repl_set_commands_change_what_the_flags_set(d: Daemon) -> None:
    script = "\n".join(
        [
            QUESTION,
            "/set nothink",
            QUESTION,
            "/set think",
            QUESTION,
            "/load qwen",
            QUESTION,
            "/set nothink",
            "/load qwen",
            QUESTION,
            "",
        ]
    )
    out = run(d, "qwen", "-i", "--hidethinking", stdin=script)
    assert out.returncode == 0, out.stderr
    lines = [line.removeprefix(">>> ") for line in out.stdout.splitlines()]
    answers = [line for line in lines if line in ("Answer.", PLAIN_REPLY) or "Thinking" in line]
    # Thinking hidden throughout; nothink until /set think; after /load a model that can
    # think thinks again unless nothink was set, which holds across /load.
    assert answers == ["Answer.", PLAIN_REPLY, "Answer.", "Answer.", PLAIN_REPLY], out.stdout
    started = run(d, "qwen", "-i", "--think=false", stdin="/load qwen\n" + QUESTION + "\n")
    assert PLAIN_REPLY in started.stdout  # --think=false is the user's choice: kept


# -- --format --------------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_format_json_or_a_schema(d: Daemon) -> None:
    plain = run(d, "echo", "hello").stdout
    assert plain == answer([("user", "hello")]) + "\n"
    as_json = run(d, "echo", "--format", "json", "hello")
    assert as_json.returncode == 0, as_json.stderr
    json.loads(as_json.stdout)  # the grammar made the tiny model write JSON
    shaped = run(d, "echo", "--format", json.dumps(SCHEMA), "hello")
    assert shaped.returncode == 0, shaped.stderr
    value = json.loads(shaped.stdout)
    assert isinstance(value["n"], int) and set(value) == {"n"}
    bad = run(d, "echo", "--format", "yaml", "hello")
    assert bad.returncode == 1 and 'invalid format "yaml"' in bad.stderr
    # /set noformat and /set format json change it in the REPL.
    repl = run(
        d,
        "echo",
        "-i",
        "--format",
        json.dumps(SCHEMA),
        stdin="/set noformat\nhello\n/set format json\nhello\n",
    )
    lines = [line.removeprefix(">>> ") for line in repl.stdout.splitlines()]
    assert lines[0] == "Disabled format." and lines[1] == answer([("user", "hello")]), lines
    assert lines[3] == "Set format to 'json' mode."
    # The grammar lets JSON's whitespace hold newlines ("{\n}"): the reply is read whole.
    reply = repl.stdout.split("Set format to 'json' mode.\n>>> ", 1)[1].split("\n\n>>> ")[0]
    json.loads(reply)


# -- --keepalive -----------------------------------------------------------------------------


def _loaded(d: Daemon) -> dict[str, str]:
    models = httpx.get(d.url + "/api/ps", timeout=30).json()["models"]
    return {m["name"]: m["expires_at"] for m in models}


def test_keepalive_applies_to_the_load_and_each_answer(d: Daemon) -> None:
    from datetime import datetime

    assert run(d, "echo", "--keepalive", "1h", "hello").returncode == 0
    until = datetime.fromisoformat(_loaded(d)["echo:latest"])
    left = until.timestamp() - time.time()
    assert 3500 < left <= 3600, left
    assert run(d, "echo", "--keepalive", "0", "hello").returncode == 0
    deadline = time.monotonic() + 20
    while "echo:latest" in _loaded(d):  # unloaded once the answer is done
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert run(d, "echo", "--keepalive=-1s", "x").returncode == 0  # forever, Go's spelling
    assert datetime.fromisoformat(_loaded(d)["echo:latest"]).year > 2100
    bad = run(d, "echo", "--keepalive", "soon", "x")
    assert bad.returncode == 1 and 'invalid keepalive "soon"' in bad.stderr


# -- --dimensions and --truncate (embedding models) -------------------------------------------


def test_dimensions_and_truncate_for_embedding_models(d: Daemon) -> None:
    full = json.loads(run(d, "tiny-embed", "abc").stdout)
    four = run(d, "tiny-embed", "--dimensions", "4", "abc")
    assert four.returncode == 0, four.stderr
    vector = json.loads(four.stdout)
    assert len(vector) == 4 < len(full)
    assert math.isclose(sum(x * x for x in vector), 1.0, rel_tol=1e-3)  # normalized again
    norm = math.sqrt(sum(x * x for x in full[:4]))
    assert all(math.isclose(a, b / norm, abs_tol=1e-4) for a, b in zip(vector, full, strict=False))
    long_text = "abcdefghij " * 60  # past the 256-token context
    cut = run(d, "tiny-embed", "--truncate", long_text)  # bare flag: true, the text stays
    assert cut.returncode == 0, cut.stderr
    assert len(json.loads(cut.stdout)) == len(full)
    refused = run(d, "tiny-embed", "--truncate=false", long_text)
    assert refused.returncode == 1 and "context" in refused.stderr.splitlines()[-1]
    assert run(d, "tiny-embed", long_text).returncode == 0  # unset: the daemon's default
    bad = run(d, "tiny-embed", "--truncate=maybe", "abc")
    assert bad.returncode == 1 and "for --truncate" in bad.stderr


# -- OLLAMA_NOHISTORY ------------------------------------------------------------------------


@pytest.mark.parametrize("nohistory", ["1", ""])
def test_nohistory_reads_the_history_but_adds_nothing(d: Daemon, nohistory: str) -> None:
    pytest.importorskip("readline")
    home = Path(d.env["LOCALLLM_HOME"])
    (home / "history").write_text("earlier\n")
    env = {**d.env, "OLLAMA_NOHISTORY": nohistory}
    with in_terminal(env, "run", "echo") as (proc, controller):
        seen = read_fd_until(controller, b">>> ")
        os.write(controller, b"\x1b[A\n")  # up arrow: the line from the file comes back
        seen = read_fd_until(controller, b">>> ", seen.split(b">>> ", 1)[1])
        assert answer([("user", "earlier")]).encode() in seen
        os.write(controller, b"hello\n")
        read_fd_until(controller, b">>> ", b"")
        os.write(controller, b"\x04")
        assert proc.wait(30) == 0
    kept = (home / "history").read_text()
    assert ("hello" in kept) is (not nohistory), kept

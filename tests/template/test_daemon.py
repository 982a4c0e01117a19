"""Through the real daemon: a base model without a template continues the prompt's text,
think levels reach the template (API, ``run --think=LEVEL``, ``/set think``), ``show``
tells what a template supports, and a template's own refusal is a 400."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.daemon import REPO, Daemon, module_home, start_daemon
from tests.support.models import add_tiny
from tests.support.template_corpus import corpus
from tests.support.tinymodel import tokenize
from tests.support.variants import GREEDY_OPTS

# The tiny model's reply depends on the prompt's last character (see tests/support/tinymodel.py),
# so ending the prompt with the effort makes the reply name it: ...high -> "ijk...z".
EFFORT_TEMPLATE = (
    "{% for m in messages %}{{ m.content }}{% endfor %}"
    " {{ reasoning_effort if reasoning_effort is defined else 'unset' }}"
)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "daemon", LOCALLLM_NUM_PARALLEL="2", LOCALLLM_CONTEXT_LENGTH="512"
    ) as tmp_path:
        add_tiny(tmp_path, "base", chat_template=None)
        add_tiny(tmp_path, "effort", chat_template=EFFORT_TEMPLATE)
        add_tiny(tmp_path, "gemma2", chat_template=corpus()["google-gemma-2-2b-it.jinja"])
        with start_daemon(tmp_path) as daemon:
            yield daemon


def post(d: Daemon, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        d.url + path,
        json={"stream": False, "options": GREEDY_OPTS, **body},
        trust_env=False,
        timeout=60,
    )


def cli(d: Daemon, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localllm", *args],
        cwd=REPO,
        env=d.env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def reply(body: dict[str, Any]) -> str:
    msg = body.get("message") or body
    return str(msg.get("thinking") or "") + str(msg.get("content") or msg.get("response") or "")


def test_a_base_model_continues_the_prompts_text(d: Daemon) -> None:
    gen = post(d, "/api/generate", {"model": "base", "prompt": "The sky is"}).json()
    assert gen["response"] == "tuvwxyz"  # "s" -> t, u, ..., z: no chat markup in between
    assert gen["prompt_eval_count"] == len(tokenize("The sky is"))
    chat = post(
        d,
        "/api/chat",
        {
            "model": "base",
            "messages": [
                {"role": "system", "content": "Colours"},
                {"role": "user", "content": "The three primary colors are"},
            ],
        },
    ).json()
    assert chat["message"]["content"] == "fghijklmnopqrstuvwxyz"  # "are" -> f...z
    assert chat["prompt_eval_count"] == len(tokenize("Colours\n\nThe three primary colors are"))
    run = cli(d, "run", "base", "The sky is")
    assert run.returncode == 0 and run.stdout == "tuvwxyz\n", run.stderr


def test_show_says_there_is_no_chat_template(d: Daemon) -> None:
    shown = post(d, "/api/show", {"model": "base"}).json()
    assert shown["capabilities"] == ["completion"]
    out = cli(d, "show", "base")
    assert "no chat template" in out.stdout, out.stderr
    effort = post(d, "/api/show", {"model": "effort"}).json()
    assert effort["capabilities"] == ["completion", "thinking"]
    assert post(d, "/api/show", {"model": "gemma2"}).json()["capabilities"] == ["completion"]


@pytest.mark.parametrize(
    ("think", "text"),
    [("high", "ijklmnopqrstuvwxyz"), ("low", "xyz"), ("medium", "nopqrstuvwxyz"), (None, "uvwxyz")],
)  # unset -> "t" -> u...z
def test_think_levels_reach_the_template(d: Daemon, think: str | None, text: str) -> None:
    body: dict[str, Any] = {"model": "effort", "messages": [{"role": "user", "content": "hi"}]}
    if think is not None:
        body["think"] = think
    assert reply(post(d, "/api/chat", body).json()) == text
    if think is not None:
        gen = post(d, "/api/generate", {"model": "effort", "prompt": "hi", "think": think})
        assert reply(gen.json()) == text


def test_run_think_flag_and_repl_set_think(d: Daemon) -> None:
    run = cli(d, "run", "effort", "--think=high", "hi")
    assert run.returncode == 0 and "ijklmnopqrstuvwxyz" in run.stdout, run.stderr
    repl = cli(
        d,
        "run",
        "effort",
        "--interactive",
        stdin="/set think low\nhi\n/set think medium\nhi\n/bye\n",
    )
    assert repl.returncode == 0, repl.stderr
    assert "Set 'think' mode (level low)." in repl.stdout
    low, medium = repl.stdout.index("xyz"), repl.stdout.index("nopqrstuvwxyz")
    assert low < medium


def test_a_templates_refusal_is_a_400_with_its_message(d: Daemon) -> None:
    r = post(
        d,
        "/api/chat",
        {
            "model": "gemma2",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
            ],
        },
    )
    assert r.status_code == 400 and "System role not supported" in r.json()["error"]
    ok = post(d, "/api/chat", {"model": "gemma2", "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200

"""``show`` and ``run`` against the real daemon, with escapes in a model's files and answers.

``evil``: a GGUF whose name, description and chat template carry an OSC 52
clipboard write and a clear-screen CSI, with a system prompt holding an OSC 8
link and a licence that moves the cursor.  ``scripted``: a script model
(tests/support/scriptmodel.py) whose greedy answer holds the same sequences,
cut across tokens, so they reach the CLI split between stream chunks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, own_daemon
from tests.support.ggufmeta import Shape
from tests.support.models import add_model, import_gguf
from tests.support.scriptmodel import make_script_model

CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: "evil" into the clipboard
CLEAR = "\x1b[2J"
LINK = "\x1b]8;;https://evil.example/\x1b\\"
TEMPLATE = "{% for m in messages %}" + CLIPBOARD + "{{ m.content }}" + CLEAR + "{% endfor %}"
TRIGGER = "<|go|>"
ANSWER = f"safe {CLIPBOARD}text{CLEAR}\x1b[31mred\x9b0m and\r more"
# Anything a terminal acts on: C0 but \t and \n, DEL, C1.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _stock(tmp: Path) -> None:
    store = Store(paths.models())
    shape = Shape(
        name="tiny" + CLIPBOARD,
        chat_template=TEMPLATE,
        extra_kv=(("general.description", "a model" + CLEAR + "\x1b]0;pwned\x07"),),
    )
    add_model(
        store,
        tmp,
        "evil",
        template=None,  # the GGUF's chat template is the one shown
        system=f"be {LINK}nice{LINK}",
        license_text="MIT\r\x1b[1A\x1b[2Kevil licence\r\n",
        shape=shape,
    )
    script = make_script_model(
        tmp / "script",
        {TRIGGER: ANSWER},
        chat_template="{% for m in messages %}{{ m.content }}{% endfor %}" + TRIGGER,
        longest=3,  # short pieces: every sequence is cut between tokens
    )
    import_gguf(store, parse_name("scripted"), [script], params={"temperature": 0})


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with own_daemon(tmp_path_factory, "termsafe", _stock) as d:
        yield d


def test_show_prints_no_control_sequences(daemon: Daemon) -> None:
    out = daemon.cli("show", "evil", "--verbose")
    assert out.returncode == 0, out.stderr
    assert not CONTROL.search(out.stdout), repr(out.stdout)
    assert re.search(r"general\.name\s+tiny\n", out.stdout), out.stdout
    assert re.search(r"general\.description\s+a model\n", out.stdout), out.stdout
    assert "MITevil licence" in out.stdout
    for field, text in [
        ("--template", "{% for m in messages %}{{ m.content }}{% endfor %}\n"),
        ("--system", "be nice\n"),
        ("--license", "MITevil licence\n"),
    ]:
        got = daemon.cli("show", "evil", field)
        assert (got.returncode, got.stdout) == (0, text), (field, got.stderr)
    modelfile = daemon.cli("show", "evil", "--modelfile").stdout
    assert "be nice" in modelfile and not CONTROL.search(modelfile)


def test_run_prints_the_answer_without_its_control_sequences(daemon: Daemon) -> None:
    out = daemon.cli("run", "scripted", "hi")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "safe textred and more\n"

"""``localllm create`` end to end: the corpus builds through the CLI and answers on the real daemon.

Each corpus Modelfile is copied next to the files it names (``tiny.gguf``, a
split ``split/`` folder, ``lora.gguf``), created with the CLI (which uploads
the files), then chatted with.  The tiny model's greedy answer depends only on
the prompt's last character, and it counts one token per byte, so the answer
and ``prompt_eval_count`` together check that the model's TEMPLATE, SYSTEM and
MESSAGE history were all applied the way ``render_prompt`` renders them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.modelfile.parser import parse
from localllm.template.select import render_prompt
from tests.support.daemon import Daemon
from tests.support.modelfiles import CORPUS_FILES
from tests.support.tinylora import make_tiny_lora
from tests.support.tinymodel import CHAT_TEMPLATE, expected_greedy, make_tiny_model, tokenize
from tests.support.variants import serve_shared


def workdir(tmp_path: Path) -> Path:
    """A folder holding every file the corpus refers to."""
    work = tmp_path / "work"
    make_tiny_model(work)
    make_tiny_model(work / "split", splits=2)
    make_tiny_lora(work)
    return work


def chat(d: Daemon, model: str, content: str = "x") -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "stream": False,
        "options": {"temperature": 0, "num_predict": 40},
    }
    r = httpx.post(d.url + "/api/chat", json=body, timeout=120, trust_env=False)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def expected_prompt(text: str, user: str = "x") -> str:
    mf = parse(text)
    messages = [{"role": "system", "content": mf.system}] if mf.system else []
    messages += [*mf.messages, {"role": "user", "content": user}]
    return render_prompt(mf.template, CHAT_TEMPLATE, messages)


def test_corpus_creates_and_runs(tiny_daemon: Daemon, tmp_path: Path) -> None:
    d = tiny_daemon
    work = workdir(tmp_path)
    for source in CORPUS_FILES:
        target = work / source.name
        shutil.copyfile(source, target)
        name = source.stem.lower()
        done = d.cli("create", name, "-f", str(target))
        assert done.returncode == 0, f"{source.name}: {done.stderr}"
        assert "success" in done.stderr
        prompt = expected_prompt(source.read_text())
        body = chat(d, name)
        assert body["message"]["content"] == expected_greedy(prompt, 40), source.name
        assert body["prompt_eval_count"] == len(tokenize(prompt)), source.name


def test_uploads_only_missing_blobs_and_show_round_trips(
    tiny_daemon: Daemon, tmp_path: Path
) -> None:
    d = tiny_daemon
    work = workdir(tmp_path)
    src = work / "Modelfile"
    shutil.copyfile(next(p for p in CORPUS_FILES if p.stem == "history-messages"), src)
    src.write_text(src.read_text().replace("FROM tiny", "FROM ./split"))
    first = d.cli("create", "pirate", "-f", str(src))
    assert first.returncode == 0, first.stderr
    assert "copying file sha256:" in first.stderr  # the split parts were new to the daemon
    again = d.cli("create", "pirate2", "-f", str(src))
    assert again.returncode == 0 and "copying file" not in again.stderr

    shown = d.cli("show", "pirate", "--modelfile")
    assert shown.returncode == 0
    (work / "Shown").write_text(shown.stdout)
    rebuilt = d.cli("create", "pirate3", "-f", str(work / "Shown"))
    assert rebuilt.returncode == 0, rebuilt.stderr
    tags = httpx.get(d.url + "/api/tags", trust_env=False).json()["models"]
    digests = {m["name"]: m["digest"] for m in tags}
    assert digests["pirate:latest"] == digests["pirate2:latest"] == digests["pirate3:latest"]
    prompt = expected_prompt(src.read_text(), "ahoy")
    assert chat(d, "pirate3", "ahoy")["prompt_eval_count"] == len(tokenize(prompt))


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Path]]:
    """One daemon and work folder for the refusals: a refused create changes nothing."""
    with serve_shared(tmp_path_factory, names=("tiny",)) as d:
        yield d, workdir(tmp_path_factory.mktemp("refusing"))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("FROM tiny\nFROBNICATE yes\n", 'line 2, column 1: unknown instruction "FROBNICATE"'),
        (
            "FROM tiny\nPARAMETER temperature hot\n",
            "line 2, column 23: invalid value for PARAMETER temperature",
        ),
        ("FROM ./nowhere.gguf\n", 'FROM path "./nowhere.gguf" does not exist'),
        ("FROM not-a-model\n", 'FROM model "not-a-model" not found'),
        ("FROM tiny\nADAPTER ./tiny.gguf\n", "is not a LoRA adapter"),
        # The step limit, or on a loaded machine the time limit, stops it: both are refusals.
        ('FROM tiny\nTEMPLATE """{{ range 1000000000 }}x{{ end }}"""\n', "invalid TEMPLATE"),
    ],
)
def test_cli_reports_bad_modelfiles(refusing: tuple[Daemon, Path], text: str, words: str) -> None:
    d, work = refusing
    (work / "Modelfile").write_text(text)
    done = d.cli("create", "bad", "-f", str(work / "Modelfile"))
    assert done.returncode == 1
    assert words in done.stderr
    names = [m["name"] for m in httpx.get(d.url + "/api/tags", trust_env=False).json()["models"]]
    assert "bad:latest" not in names

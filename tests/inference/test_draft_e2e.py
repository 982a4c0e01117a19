"""A model with a draft model (Modelfile ``DRAFT``), end to end: ``localllm create`` uploads
the draft or names a store model, the daemon loads it beside the model, and generation
speculates with it by default, with the same text as without and its counts reported.

The draft is the tiny model with one successor changed (after "m" it guesses "x"
where the model says "n"), so its drafts are accepted up to "m" and rejected there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon
from tests.support.tinymodel import expected_greedy, make_tiny_model
from tests.support.variants import GREEDY_OPTS, serve

PROMPT = "abc"


@pytest.fixture
def drafted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """The daemon with ``tiny``, and ``fast`` = tiny + DRAFT of a file, made with the CLI."""
    with serve(tmp_path, monkeypatch, parallel=2, ctx=256, names=("tiny",)) as d:
        work = tmp_path / "work"
        make_tiny_model(work, overrides={"m": "x"}, name="draft.gguf")
        (work / "Modelfile").write_text("FROM tiny\nDRAFT ./draft.gguf\n")
        done = d.cli("create", "fast", "-f", str(work / "Modelfile"))
        assert done.returncode == 0, done.stderr
        yield d


def generate(d: Daemon, model: str, **options: Any) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": PROMPT,
        "raw": True,
        "stream": False,
        "options": {**GREEDY_OPTS, **options},
    }
    r = httpx.post(d.url + "/api/generate", json=body, timeout=120, trust_env=False)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def test_a_draft_model_speculates_by_default_with_the_same_text(drafted: Daemon) -> None:
    d = drafted
    plain = generate(d, "fast", speculative="off")
    spec = generate(d, "fast")
    assert spec["response"] == plain["response"] == expected_greedy(PROMPT)
    assert "draft_count" not in plain
    # Accepted up to "m", rejected where the draft says "x".
    assert 0 < spec["draft_accepted_count"] < spec["draft_count"]
    assert spec["eval_count"] == plain["eval_count"]
    metrics = httpx.get(d.url + "/metrics", trust_env=False).text
    assert (
        f'localllm_draft_tokens_total{{model="fast:latest"}} {float(spec["draft_count"])}'
        in metrics
    )
    assert (
        f'localllm_draft_accepted_tokens_total{{model="fast:latest"}} '
        f"{float(spec['draft_accepted_count'])}"
    ) in metrics
    limited = generate(d, "fast", draft_max=2)
    assert limited["response"] == plain["response"]
    assert 0 < limited["draft_count"] < spec["draft_count"]


def test_a_draft_named_by_model_survives_that_models_removal(
    drafted: Daemon, tmp_path: Path
) -> None:
    d = drafted
    shown = d.cli("show", "fast", "--modelfile")
    assert shown.returncode == 0 and "\nDRAFT /" in shown.stdout
    work = tmp_path / "work"
    (work / "Modelfile.draft").write_text("FROM ./draft.gguf\n")
    assert d.cli("create", "tiny-draft", "-f", str(work / "Modelfile.draft")).returncode == 0
    (work / "Modelfile.named").write_text("FROM tiny\nDRAFT tiny-draft\n")
    done = d.cli("create", "named", "-f", str(work / "Modelfile.named"))
    assert done.returncode == 0, done.stderr
    assert d.cli("rm", "tiny-draft").returncode == 0
    spec = generate(d, "named")
    assert spec["response"] == expected_greedy(PROMPT) and spec["draft_count"] > 0
    r = httpx.post(
        d.url + "/api/generate",
        json={
            "model": "tiny",
            "prompt": PROMPT,
            "stream": False,
            "options": {"speculative": "draft"},
        },
        timeout=60,
        trust_env=False,
    )
    assert r.status_code == 400 and "has no draft model" in r.json()["error"]

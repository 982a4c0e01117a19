"""Decisions through the real daemon: ``/v1/systemone`` and ``/api/eval`` on a tiny model.

``tiny`` is the tiny llama with attention on (its logprobs depend on the whole context).
Each answer is checked against the options scored in-process, on the same GGUF, after
the prompt the documentation says the daemon renders (the model's template around
``compat.systemone``'s turns): so the wording, the template, the runner protocol and the
answers' arithmetic are proven at once.  The exactness of the scores themselves, against
forced generations, is tests/engine/test_scoring.py's.  The request langchain4j's
``OllamaDecisionModel`` sends is replayed as its documentation builds it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm import paths
from localllm.compat.systemone import (
    MAX_BODY,
    MAX_CHOICE_OPTIONS,
    SYSTEM,
    Question,
    SystemOneBody,
    confidence,
    probabilities,
    systemone_call,
    user_text,
)
from localllm.engine.engine import Engine
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, own_daemon
from tests.support.engine_steps import opts
from tests.support.models import import_gguf
from tests.support.tinymodel import make_tiny_model

STATE = "Help! My payouts have been failing for 3 days and nobody answers my emails."

# What langchain4j's OllamaDecisionModel (1.23) posts for its documented example: the
# input as "state", a ChoiceQuestion's options as "criteria", a YesNoQuestion as a noul
# without criteria, a ScaleQuestion's levels as a score's list, keepAlive in seconds.
LANGCHAIN4J = {
    "model": "tiny",
    "state": STATE,
    "questions": {
        "team": {
            "type": "choice",
            "instructions": "Which team should handle this ticket?",
            "criteria": {
                "billing": "Payments, payouts, invoices, refunds",
                "support": "Problems using the product",
                "sales": "Pricing, upgrades, new accounts",
            },
        },
        "urgent": {"type": "noul", "instructions": "Does this need attention today?"},
        "severity": {
            "type": "score",
            "instructions": "How severe is the problem?",
            "criteria": ["cosmetic", "annoying", "blocking"],
        },
    },
    "keep_alive": 300,
}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"), attention=True)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> Iterator[Daemon]:
    def stock(tmp: Path) -> None:
        import_gguf(Store(paths.models()), parse_name("tiny"), [model_path])

    with own_daemon(tmp_path_factory, "eval-daemon", stock, LOCALLLM_CONTEXT_LENGTH="2048") as d:
        yield d


def post(d: Daemon, path: str, body: Any) -> httpx.Response:
    return httpx.post(
        d.url + path,
        content=json.dumps(body),
        timeout=120,
        headers={"Content-Type": "application/json"},
    )


def rendered(state: str, q: Question) -> str:
    """The prompt the daemon renders with the tiny model's template."""
    return f"system:{SYSTEM}.user:{user_text(state, q)}.assistant:"


def expected(model_path: Path, body: dict[str, Any]) -> dict[str, list[float]]:
    """Each question's option probabilities, scored in-process after the documented
    prompt: the tiny template's turns ``role:content.`` and ``assistant:``."""
    call = systemone_call(SystemOneBody.model_validate(body), 0)
    prompts = [
        f"system:{SYSTEM}.user:{user_text(call.state, q)}.assistant:" for q in call.questions
    ]
    with Engine([str(model_path)], opts(n_ctx=2048, n_parallel=4, n_batch=512, n_ubatch=512)) as e:
        logprobs, _, _ = e.score(prompts, [q.labels for q in call.questions])
    return {q.id: probabilities(lp) for q, lp in zip(call.questions, logprobs, strict=True)}


def test_langchain4j_request_is_answered_exactly(daemon: Daemon, model_path: Path) -> None:
    r = post(daemon, "/v1/systemone", LANGCHAIN4J)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"model", "answers", "usage"} and body["model"] == "tiny"
    answers = body["answers"]
    assert list(answers) == ["team", "urgent", "severity"]
    want = expected(model_path, LANGCHAIN4J)

    team = answers["team"]
    assert set(team) == {"type", "choice", "probabilities", "confidence"}
    assert team["type"] == "choice" and list(team["probabilities"]) == [
        "billing",
        "support",
        "sales",
    ]
    p = list(team["probabilities"].values())
    assert p == pytest.approx(want["team"], abs=1e-6)
    assert team["choice"] == ["billing", "support", "sales"][p.index(max(p))]
    assert team["confidence"] == pytest.approx(confidence(p), abs=1e-12)

    urgent = answers["urgent"]
    assert set(urgent) == {"type", "noul"} and urgent["type"] == "noul"
    assert urgent["noul"] == pytest.approx(want["urgent"][0], abs=1e-6)

    severity = answers["severity"]
    assert set(severity) == {"type", "score", "legend", "probabilities", "confidence"}
    assert severity["legend"] == {"0": "cosmetic", "1": "annoying", "2": "blocking"}
    q = [severity["probabilities"][k] for k in ("0", "1", "2")]
    assert q == pytest.approx(want["severity"], abs=1e-6)
    assert severity["score"] == pytest.approx(sum(i * x for i, x in enumerate(q)), abs=1e-12)
    assert 0.0 <= severity["confidence"] <= 1.0

    usage = body["usage"]
    assert usage["output_tokens"] == 3
    call = systemone_call(SystemOneBody.model_validate(LANGCHAIN4J), 0)
    # One token a character, BOS first: the prompts as the documentation renders them.
    assert usage["input_tokens"] == sum(len(rendered(call.state, q)) + 1 for q in call.questions)


def test_api_eval_takes_the_same_body_with_ollamas_timings(daemon: Daemon) -> None:
    body = dict(LANGCHAIN4J, state={"ticket": STATE, "plan": "pro"})  # JSON state: its text
    r = post(daemon, "/api/eval", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert {"model", "answers", "usage"} <= set(out)
    assert out["total_duration"] > 0 and out["load_duration"] >= 0
    assert out["prompt_eval_count"] == out["usage"]["input_tokens"]
    p = out["answers"]["team"]["probabilities"]
    assert math.fsum(p.values()) == pytest.approx(1.0, abs=1e-9)


def question(**q: Any) -> dict[str, Any]:
    return {"model": "tiny", "state": STATE, "questions": {"q": q}}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (question(type="maybe", instructions="?"), "unknown type 'maybe'"),
        (question(instructions="?"), '"type" is required'),
        (question(type="choice", instructions="Which?"), "needs its options"),
        (question(type="choice", instructions="Which?", criteria={}), "needs its options"),
        (
            question(
                type="choice",
                instructions="Which?",
                criteria={f"o{i}": "" for i in range(MAX_CHOICE_OPTIONS + 1)},
            ),
            f"at most {MAX_CHOICE_OPTIONS}",
        ),
        (question(type="score", instructions="How?", criteria=["x"] * 11), "2 to 10"),
        (question(type="score", instructions="How?", criteria={"a": "b"}), "list of texts"),
        (question(type="noul", instructions="?", criteria={"maybe": "x"}), '"true"'),
        (
            question(type="choice", instructions="Which?", criteria={"a" * 80: "", "b": ""}),
            "at most 64",
        ),
        ({"model": "tiny", "state": "  ", "questions": {"q": {"type": "noul"}}}, "state"),
        ({"model": "tiny", "state": STATE}, '"questions" is required'),
        ({"model": "tiny", "state": STATE, "questions": {}}, '"questions" is required'),
        (dict(question(type="noul"), stream=True), "streaming is not supported"),
        (dict(question(type="noul"), images=["aGk="]), "images are not supported"),
        (dict(question(type="noul"), state="x" * (MAX_BODY + 1)), f"at most {MAX_BODY}"),
    ],
)
def test_refusals_are_400_with_a_reason(daemon: Daemon, body: Any, needle: str) -> None:
    r = post(daemon, "/api/eval", body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]
    # The /v1 path answers in OpenAI's error shape.
    r = post(daemon, "/v1/systemone", body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_an_unknown_model_is_404(daemon: Daemon) -> None:
    r = post(daemon, "/v1/systemone", dict(LANGCHAIN4J, model="absent"))
    assert r.status_code == 404, r.text


def test_confidence_is_ollamas_documented_one() -> None:
    # Ollama's example answer: probabilities 0.0125 / 0.9781 / 0.0093 (rounded to four
    # places, which moves the entropy by up to 4e-4) and confidence 0.8906.  Jev's
    # (max - 1/k) / (1 - 1/k) would say 0.967.
    assert confidence([0.0125, 0.9781, 0.0093]) == pytest.approx(0.8906, abs=5e-4)
    assert confidence([0.5, 0.5]) == 0.0 and confidence([1.0, 0.0, 0.0]) == 1.0

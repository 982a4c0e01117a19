"""The System One decision API (``/v1/systemone``, and Ollama's ``/api/eval``): body and answers.

Request (TypeSafe's Jev shape, which Ollama 0.35+, LiteLLM, Fireworks and Baseten
serve and langchain4j's ``OllamaDecisionModel`` sends; sources in docs/api.md)::

    {"model", "state", "questions": {ID: {"type", "instructions", "criteria"}}}

- ``state``: the text the questions are about; a JSON object or array is read as
  its JSON text.  Required, not empty.
- ``noul``: a yes/no question.  ``criteria`` is optional: ``{"true": ..., "false":
  ...}``, what counts as each.  Answer: ``{"type", "noul"}``, P(true).
- ``choice``: one of the named options.  ``criteria`` is the options:
  ``{name: description}`` (2 to ``MAX_CHOICE_OPTIONS``).  Answer: ``{"type",
  "choice", "probabilities": {name: p}, "confidence"}``.
- ``score``: a level on an ordered scale.  ``criteria`` is the levels' texts,
  lowest first (``MIN_SCORE_LEVELS`` to ``MAX_SCORE_LEVELS``).  Answer: ``{"type",
  "score", "legend": {"0": text, ...}, "probabilities": {"0": p, ...},
  "confidence"}``, ``score`` the expected level (0-based).

``confidence`` (choice and score) is one minus the normalised entropy of the
probabilities, ``1 - H(p) / ln k``: 0 for a flat answer, 1 for a certain one
(Ollama's documented example, probabilities 0.0125 / 0.9781 / 0.0093 with
confidence 0.8906, is this formula).  Usage: ``input_tokens`` the prompts' tokens,
``output_tokens`` one per question (the one answer position each is scored at).

Owned here too: the wording of each question's turns (``SYSTEM``, ``user_text``),
and what its options are as the model answers them (``Question.labels``): a
choice's option names, ``true`` and ``false``, a score's level digits ``0`` ..
``9``; no label is another's prefix but where a choice's names are.  Pure: no
I/O, nothing of server/ or inference/.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from pydantic import BaseModel, ConfigDict, JsonValue, StrictStr

from localllm.errors import InvalidRequest

MAX_BODY = 64 << 10  # bytes of request body, as Ollama's documentation says
MAX_QUESTIONS = 64
MAX_CHOICE_OPTIONS = 255
MIN_SCORE_LEVELS = 2
MAX_SCORE_LEVELS = 10  # levels are answered by their digit: one token, none a prefix
TYPES = ("noul", "choice", "score")

Kind = Literal["noul", "choice", "score"]
SYSTEM = (
    "You judge a state against one question. Reply with exactly one of the allowed "
    "answers, written as given, and nothing else."
)


class QuestionBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: StrictStr | None = None
    instructions: JsonValue = None
    criteria: JsonValue = None


class SystemOneBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = ""
    state: JsonValue = None
    questions: dict[str, QuestionBody] | None = None
    images: list[JsonValue] | None = None
    stream: bool | None = None
    keep_alive: int | float | str | None = None
    options: dict[str, JsonValue] | None = None


@dataclass(frozen=True)
class Question:
    """One question, checked: what the prompt says and the options scored."""

    id: str
    kind: Kind
    instructions: str  # as text ("" when none was given)
    labels: list[str]  # the options as the model answers them
    descriptions: list[str]  # each label's meaning ("" when none)


@dataclass(frozen=True)
class SystemOneCall:
    model: str
    state: str
    questions: list[Question]
    keep_alive: int | float | str | None
    options: dict[str, JsonValue] | None


class NoulAnswer(TypedDict):
    type: Literal["noul"]
    noul: float


class ChoiceAnswer(TypedDict):
    type: Literal["choice"]
    choice: str
    probabilities: dict[str, float]
    confidence: float


class ScoreAnswer(TypedDict):
    type: Literal["score"]
    score: float
    legend: dict[str, str]
    probabilities: dict[str, float]
    confidence: float


Answer = NoulAnswer | ChoiceAnswer | ScoreAnswer


class Usage(TypedDict):
    input_tokens: int
    output_tokens: int


class SystemOneResponse(TypedDict):
    model: str
    answers: dict[str, Answer]
    usage: Usage


def as_text(value: JsonValue) -> str:
    """Content as the prompt shows it: a string as it is, other JSON as its JSON text
    (keys in the client's order)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2)


def systemone_call(body: SystemOneBody, size: int) -> SystemOneCall:
    """``body`` (``size`` bytes on the wire) checked; ``InvalidRequest`` names what is wrong."""
    if size > MAX_BODY:
        raise InvalidRequest(f"the request takes {size} bytes; at most {MAX_BODY} are accepted")
    if not body.model:
        raise InvalidRequest("model is required")
    if body.stream:
        raise InvalidRequest("streaming is not supported: answers come as one JSON object")
    if body.images:
        raise InvalidRequest("images are not supported by scoring; send a text state")
    state = as_text(body.state)
    if not state.strip():
        raise InvalidRequest('"state" is required and must not be empty: the text to judge')
    if not body.questions:
        raise InvalidRequest('"questions" is required: an object of question id -> question')
    if len(body.questions) > MAX_QUESTIONS:
        raise InvalidRequest(
            f"{len(body.questions)} questions; at most {MAX_QUESTIONS} fit in one request"
        )
    questions = [question(qid, q) for qid, q in body.questions.items()]
    return SystemOneCall(body.model, state, questions, body.keep_alive, body.options)


def question(qid: str, q: QuestionBody) -> Question:
    """One question checked: its type, and its options from ``criteria``."""
    if not qid:
        raise InvalidRequest("a question id must not be empty")
    if q.type is None:
        raise InvalidRequest(f'question "{qid}": "type" is required: "noul", "choice" or "score"')
    if q.type not in TYPES:
        raise InvalidRequest(
            f'question "{qid}": unknown type {q.type!r}; expected "noul", "choice" or "score"'
        )
    text = as_text(q.instructions)
    crit = q.criteria
    if q.type == "noul":
        if crit is not None and (not isinstance(crit, dict) or not set(crit) <= {"true", "false"}):
            raise InvalidRequest(
                f'question "{qid}": a noul\'s criteria are {{"true": ..., "false": ...}}'
            )
        sides = crit if isinstance(crit, dict) else {}
        return Question(
            qid, "noul", text, ["true", "false"], [as_text(sides.get(k)) for k in ("true", "false")]
        )
    if q.type == "choice":
        if not isinstance(crit, dict) or len(crit) < 2:
            raise InvalidRequest(
                f'question "{qid}": a choice needs its options in "criteria", an object of '
                "option name -> description, at least 2"
            )
        if len(crit) > MAX_CHOICE_OPTIONS:
            raise InvalidRequest(
                f'question "{qid}": {len(crit)} options; a choice takes at most '
                f"{MAX_CHOICE_OPTIONS}"
            )
        if any(not name.strip() for name in crit):
            raise InvalidRequest(f'question "{qid}": an option name must not be empty')
        return Question(qid, "choice", text, list(crit), [as_text(v) for v in crit.values()])
    levels = [v for v in crit if isinstance(v, str)] if isinstance(crit, list) else []
    if not isinstance(crit, list) or len(levels) != len(crit):
        raise InvalidRequest(
            f'question "{qid}": a score needs its levels in "criteria", a list of texts, '
            "lowest first"
        )
    if not MIN_SCORE_LEVELS <= len(levels) <= MAX_SCORE_LEVELS:
        raise InvalidRequest(
            f'question "{qid}": {len(crit)} levels; a score takes {MIN_SCORE_LEVELS} to '
            f"{MAX_SCORE_LEVELS}"
        )
    return Question(qid, "score", text, [str(i) for i in range(len(levels))], levels)


def user_text(state: str, q: Question) -> str:
    """The user turn for ``q``: the state first (so every question of a request opens
    with the same tokens), then the question and its allowed answers."""
    lines = ["State:", state, "", f"Question: {q.instructions}" if q.instructions else "Question:"]
    pairs = list(zip(q.labels, q.descriptions, strict=True))
    if q.kind == "noul":
        lines.append("Answer true or false.")
        lines += [f"{k}: {d}" for k, d in pairs if d]
    elif q.kind == "choice":
        lines.append("Options:")
        lines += [f"{k}: {d}" if d else k for k, d in pairs]
        lines.append("Answer with the name of one option.")
    else:
        lines.append("Levels, lowest first:")
        lines += [f"{k}: {d}" for k, d in pairs]
        lines.append("Answer with the number of one level.")
    return "\n".join(lines)


def turns(call: SystemOneCall) -> list[tuple[str, str]]:
    """Each question's (system, user) turns, in order."""
    return [(SYSTEM, user_text(call.state, q)) for q in call.questions]


def probabilities(logprobs: Sequence[float]) -> list[float]:
    """The options' log-probabilities normalised over the options (a softmax)."""
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


def confidence(p: Sequence[float]) -> float:
    """``1 - H(p) / ln k``, in [0, 1] (see the module doc); 1 for a single option."""
    if len(p) <= 1:
        return 1.0
    h = -sum(x * math.log(x) for x in p if x > 0)
    return min(1.0, max(0.0, 1.0 - h / math.log(len(p))))


def answer(q: Question, logprobs: Sequence[float]) -> Answer:
    """The answer to ``q`` from its labels' log-probabilities, in label order."""
    p = probabilities(logprobs)
    if q.kind == "noul":
        return {"type": "noul", "noul": p[0]}
    probs = dict(zip(q.labels, p, strict=True))
    if q.kind == "choice":
        best = max(range(len(p)), key=lambda i: (p[i], -i))  # ties: the first named
        return {
            "type": "choice",
            "choice": q.labels[best],
            "probabilities": probs,
            "confidence": confidence(p),
        }
    return {
        "type": "score",
        "score": sum(i * x for i, x in enumerate(p)),
        "legend": dict(zip(q.labels, q.descriptions, strict=True)),
        "probabilities": probs,
        "confidence": confidence(p),
    }


def response(
    call: SystemOneCall, logprobs: Sequence[Sequence[float]], n_tokens: int
) -> SystemOneResponse:
    """The whole answer: each question's, keyed by its id, and the usage."""
    return {
        "model": call.model,
        "answers": {q.id: answer(q, lp) for q, lp in zip(call.questions, logprobs, strict=True)},
        "usage": {"input_tokens": n_tokens, "output_tokens": len(call.questions)},
    }

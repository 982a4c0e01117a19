"""The runner protocol's frames: one ``TypedDict`` per message type, as it crosses the pipe.

Both ends build and read these: the daemon (``runner.process``, ``runner.traffic``)
and the child (``runner.worker``).  Each frame is the JSON object of one message
(``runner.protocol`` frames it), keys in the order they are written, since a dict's
order is its JSON's.  Nested dataclasses (``LoadOptions``, ``CompletionRequest``, the
events) travel as their fields (``messages.to_dict``) and are rebuilt, checked, by
``runner.protocol``'s parsers.  ``SCHEMA`` (the keys a frame must have) is read from
these classes, so the types and the checks are one list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypedDict

from localllm.runner.attach import Floats

# A dataclass's fields as they travel (``messages.to_dict``), rebuilt by ``from_dict``.
Fields = Mapping[str, object]

# -- daemon -> runner --------------------------------------------------------------


class _LoadRequired(TypedDict):
    type: Literal["load"]
    model_paths: list[str]
    options: Fields  # LoadOptions


class LoadFrame(_LoadRequired, total=False):
    heartbeat_s: float  # the child beats this often (runner.watchdog); absent: no beats


class CompleteFrame(TypedDict):
    type: Literal["complete"]
    request: Fields  # CompletionRequest; its images are bytes (attachments)


class CancelFrame(TypedDict):
    type: Literal["cancel"]
    id: str


class EmbedFrame(TypedDict):
    type: Literal["embed"]
    inputs: list[str]
    truncate: bool
    id: str


class RerankBody(TypedDict):
    type: Literal["rerank"]
    query: str
    documents: list[str]
    format: Fields  # PairFormat
    truncate: bool


class RerankFrame(RerankBody):
    id: str


class ScoreFrame(TypedDict):
    """Options scored after prompts (engine/scoring.py): ``options[i]`` follow ``prompts[i]``."""

    type: Literal["score"]
    prompts: list[str]
    options: list[list[str]]
    id: str


class TokenizeFrame(TypedDict):
    type: Literal["tokenize"]
    text: str
    add_special: bool
    parse_special: bool
    id: str


class _DetokenizeRequired(TypedDict):
    type: Literal["detokenize"]
    id: str
    tokens: list[int]


class DetokenizeFrame(_DetokenizeRequired, total=False):
    special: bool  # control tokens written out as text; absent: left out


class PingFrame(TypedDict):
    type: Literal["ping"]
    id: str


class ShutdownFrame(TypedDict):
    type: Literal["shutdown"]


# -- runner -> daemon --------------------------------------------------------------


class _LoadedRequired(TypedDict):
    type: Literal["loaded"]
    info: Mapping[str, object]  # the engine's ``info()``
    memory: dict[str, dict[str, int]]  # bytes per device and part (llama.cpp's log)
    load_ns: int


class LoadedFrame(_LoadedRequired, total=False):
    rss_before: int | None  # resident bytes before the load; None without /proc


class PieceFrame(TypedDict):
    type: Literal["piece"]
    piece: Fields  # Piece


class DoneFrame(TypedDict):
    type: Literal["done"]
    done: Fields  # Done


class FailedFrame(TypedDict):
    type: Literal["failed"]
    failed: Fields  # Failed; an empty id: the load failed


class EmbeddingsFrame(TypedDict):
    type: Literal["embeddings"]
    id: str
    n_tokens: int
    vectors: Floats


class ScoresFrame(TypedDict):
    type: Literal["scores"]
    id: str
    n_tokens: int
    scores: list[float]


class OptionScoresFrame(TypedDict):
    type: Literal["option_scores"]
    id: str
    logprobs: list[list[float]]  # per prompt, per option: log P(option | prompt)
    n_tokens: int  # the prompts' tokens
    n_evaluated: int  # tokens decoded: prompts past their reused prefix, and branches


class TokensFrame(TypedDict):
    type: Literal["tokens"]
    id: str
    tokens: list[int]


class TextFrame(TypedDict):
    type: Literal["text"]
    id: str
    text: str


class PongFrame(TypedDict):
    type: Literal["pong"]
    id: str


class AdapterFrame(TypedDict):
    type: Literal["adapter"]
    path: str
    load_ns: int


class BeatFrame(TypedDict):
    type: Literal["beat"]
    busy_ms: int  # how long the main thread has been in its current step or call


# What the daemon sends under a fresh id and waits on (``Traffic.call``), and the answers.
Call = EmbedFrame | RerankFrame | ScoreFrame | TokenizeFrame | DetokenizeFrame | PingFrame
Reply = EmbeddingsFrame | ScoresFrame | OptionScoresFrame | TokensFrame | TextFrame | PongFrame
Request = LoadFrame | CompleteFrame | CancelFrame | Call | ShutdownFrame
Answer = LoadedFrame | PieceFrame | DoneFrame | FailedFrame | Reply | AdapterFrame | BeatFrame
Frame = Request | Answer

# type -> its frame class; order as the protocol's documentation lists them.
FRAMES: dict[str, type[Mapping[str, object]]] = {
    "load": LoadFrame,
    "complete": CompleteFrame,
    "cancel": CancelFrame,
    "embed": EmbedFrame,
    "rerank": RerankFrame,
    "score": ScoreFrame,
    "tokenize": TokenizeFrame,
    "detokenize": DetokenizeFrame,
    "ping": PingFrame,
    "shutdown": ShutdownFrame,
    "loaded": LoadedFrame,
    "piece": PieceFrame,
    "done": DoneFrame,
    "failed": FailedFrame,
    "embeddings": EmbeddingsFrame,
    "scores": ScoresFrame,
    "option_scores": OptionScoresFrame,
    "tokens": TokensFrame,
    "text": TextFrame,
    "pong": PongFrame,
    "adapter": AdapterFrame,
    "beat": BeatFrame,
}


def _required(cls: type[Mapping[str, object]]) -> tuple[str, ...]:
    keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    order = [k for base in reversed(cls.__mro__) for k in getattr(base, "__annotations__", {})]
    return tuple(dict.fromkeys(k for k in order if k in keys and k != "type"))


# type -> the keys a frame of that type must have (``protocol.validate``).
SCHEMA: dict[str, tuple[str, ...]] = {kind: _required(cls) for kind, cls in FRAMES.items()}

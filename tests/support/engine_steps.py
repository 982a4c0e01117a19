"""Driving an Engine in-process: load options for the tiny models, submit requests and
step until idle, the answers gathered per request id; a request run alone in a fresh
engine to compare with (prefix sharing, parking, the disk cache), and one request sampled
under a grammar."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from localllm.engine.engine import Engine
from localllm.runner.messages import (
    CompletionRequest,
    Done,
    Event,
    Failed,
    LoadOptions,
    Piece,
    SamplingParams,
)


def opts(**kw: object) -> LoadOptions:
    base: dict[str, object] = {
        "n_ctx": 256,
        "n_parallel": 1,
        "n_batch": 64,
        "n_ubatch": 64,
        "n_threads": 1,
    }
    base.update(kw)
    return LoadOptions(**base)  # type: ignore[arg-type]


@dataclass
class Result:
    text: str = ""
    pieces: list[Piece] = field(default_factory=list)
    done: Done | None = None
    failed: Failed | None = None


def collect(events: list[Event], out: dict[str, Result]) -> None:
    for ev in events:
        r = out.setdefault(ev.id, Result())
        if isinstance(ev, Piece):
            assert r.done is None, "piece after done"
            r.pieces.append(ev)
            r.text += ev.text
        elif isinstance(ev, Done):
            r.done = ev
        else:
            r.failed = ev


def run(engine: Engine, *reqs: CompletionRequest, max_steps: int = 5000) -> dict[str, Result]:
    """Submit all requests at once and step until the engine is idle."""
    for r in reqs:
        engine.submit(r)
    out: dict[str, Result] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            break
        collect(engine.step(), out)
    assert not engine.has_work()
    return out


def run_one(engine: Engine, req: CompletionRequest) -> Result:
    return run(engine, req)[req.id]


SYSTEM = "you are a helpful assistant. answer briefly and cite nothing. " * 4  # 248 tokens


def req(id: str, prompt: str, **kw: object) -> CompletionRequest:
    kw.setdefault("num_predict", 12)
    return CompletionRequest(
        id=id,
        prompt=prompt,
        logprobs=1,  # type: ignore[arg-type]
        sampling=SamplingParams(temperature=0.0),
        **kw,
    )


def alone(model: Path, r: CompletionRequest) -> Result:
    with Engine([str(model)], opts(n_ctx=512, n_batch=64, n_ubatch=64)) as e:
        return run(e, r)[r.id]


def same(a: Result, b: Result) -> None:
    # Measured: sharing matches a lone run to 1e-6; one cell left out moves it by 1.5e-5.
    assert a.text == b.text and len(a.pieces) == len(b.pieces) > 0
    for x, y in zip(a.pieces, b.pieces, strict=True):
        assert x.token == y.token and abs((x.logprob or 0) - (y.logprob or 0)) < 4e-6


def sample_under(
    engine: Engine, grammar: str, req_id: str, seed: int, num_predict: int
) -> tuple[str, Done]:
    """One request on prompt "a" sampled freely (temperature 1, no top-k or top-p) under
    ``grammar``, run to its end: the text and the Done."""
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=seed, grammar=grammar)
    r = run_one(
        engine, CompletionRequest(id=req_id, prompt="a", sampling=sampling, num_predict=num_predict)
    )
    assert r.failed is None and r.done is not None, r.failed
    return r.text, r.done

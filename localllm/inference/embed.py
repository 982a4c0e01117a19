"""``/api/embed``'s answer, which ``/v1/embeddings`` converts: pooled vectors, normalised.

The runner returns pooled vectors; here they are cut to ``dimensions`` and
L2-normalised, a walk over every float, in a worker thread so the event loop
keeps serving (a thousand inputs are 768k floats).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

from localllm.api.schemas_infer import EmbedRequest
from localllm.api.wire import EmbedResponse
from localllm.errors import InvalidRequest
from localllm.inference.release import dismantle
from localllm.inference.service import InferenceService, Target


def _normalise(vector: Sequence[float], dimensions: int | None) -> tuple[float, ...]:
    # A tuple: see runner.attach.Floats.tuples (the collector walks lists of floats).
    if dimensions:
        vector = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(x / norm for x in vector) if norm > 0 else tuple(vector)


def _normalise_all(
    box: list[Sequence[Sequence[float]]], dimensions: int | None
) -> list[tuple[float, ...]]:
    raw = list(box.pop())
    out = [_normalise(v, dimensions) for v in raw]
    dismantle(raw)  # freed row by row here, not in one long call
    return out


async def embed_native(svc: InferenceService, req: EmbedRequest, target: Target) -> EmbedResponse:
    """``/api/embed``'s answer (also what ``/v1/embeddings`` converts), for the model
    ``req.model`` resolved as ``target``."""
    if req.dimensions is not None and req.dimensions <= 0:
        raise InvalidRequest("dimensions must be a positive integer")
    inputs = [req.input] if isinstance(req.input, str) else list(req.input)
    start = time.monotonic_ns()
    vectors, n_tokens, load_ns = await svc.embed(
        target, inputs, truncate=req.truncate, options=req.options, keep_alive=req.keep_alive
    )
    # Python arithmetic over every float (768k for a thousand inputs) off the event loop;
    # the thread takes the only reference to the raw vectors, so they are freed there too.
    box = [vectors]
    del vectors
    embeddings = await asyncio.to_thread(_normalise_all, box, req.dimensions)
    return {
        "model": req.model,
        "embeddings": embeddings,
        "total_duration": time.monotonic_ns() - start,
        "load_duration": load_ns,
        "prompt_eval_count": n_tokens,
    }

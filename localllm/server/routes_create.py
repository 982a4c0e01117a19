"""``POST /api/create``: build a model from files, an existing model or an ``hf.co`` repo.

The request is Ollama's structured one (the CLI parses the Modelfile and
uploads blobs first): ``model``, ``from``, ``files``, ``adapters``,
``template``, ``system``, ``license``, ``parameters``, ``messages``,
``quantize``, ``stream``, and ours: ``projector`` and ``draft``.  Validation
(``Creator.plan``) runs before the response starts, so bad input is a 4xx with
``{"error": …}``; the writing phase streams NDJSON statuses (or returns the last
one with ``stream: false``).
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

from localllm.api.schemas import _ModelRequest
from localllm.errors import InvalidRequest
from localllm.modelfile.create import CreateSpec, Creator, Emit
from localllm.models.service import ModelService
from localllm.server.deps import json_body, model_service
from localllm.server.streaming import events_from_thread, progress_response

router = APIRouter()


class CreateRequest(_ModelRequest):
    from_: str | None = Field(default=None, alias="from")
    files: dict[str, str] | None = None
    adapters: dict[str, str] | None = None
    # Not in Ollama: {file name: digest} of an uploaded vision projector (Modelfile PROJECTOR).
    projector: dict[str, str] | None = None
    # Not in Ollama: the draft model (Modelfile DRAFT), a store model's name or
    # {file name: digest} of an uploaded GGUF.
    draft: str | dict[str, str] | None = None
    template: str | None = None
    system: str | None = None
    license: str | list[str] | None = None
    parameters: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    quantize: str | None = None
    quantization: str | None = None  # older clients' spelling
    stream: bool = True


def _spec(req: CreateRequest) -> CreateSpec:
    if not req.model:
        raise InvalidRequest("model is required")
    licenses = [req.license] if isinstance(req.license, str) else list(req.license or [])
    return CreateSpec(
        model=req.model,
        from_=req.from_,
        files=dict(req.files or {}),
        adapters=dict(req.adapters or {}),
        projector=dict(req.projector or {}),
        # {} names no file, as for projector: no draft (a model name is checked as given).
        draft=(dict(req.draft) or None) if isinstance(req.draft, dict) else req.draft,
        template=req.template,
        system=req.system,
        license=licenses,
        parameters=req.parameters,
        messages=req.messages,
        quantize=req.quantize or req.quantization,
    )


@router.post("/api/create", response_model=None)
async def create(
    request: Request,
    req: Annotated[CreateRequest, Depends(json_body(CreateRequest))],
    svc: Annotated[ModelService, Depends(model_service)],
) -> Response:
    def pull(model: str, emit: Emit, cancel: Any) -> None:
        svc.pull(model, emit, cancel=cancel)

    creator = Creator(svc.store, pull)
    # Reading GGUF headers and test-rendering the template touch the disk: not on the loop.
    plan = await anyio.to_thread.run_sync(creator.plan, _spec(req))

    def work(emit: Emit, cancel: Any) -> None:
        creator.run(plan, emit, cancel)

    return await progress_response(events_from_thread(work, request=request), req.stream)

"""Model-management routes: liveness, version, tags, show, pull, delete, copy and blobs.

``/api/show`` with ``fit_contexts`` (ours) also answers whether the model would load
with each context (:mod:`localllm.inference.contextfit`): how ``localllm launch``
judges an agent's context without planning in the CLI.

Routes stay thin: parse the body, call ``ModelService``, shape the answer.
Blocking store work runs in worker threads (sync route functions, or a
dedicated thread for pulls), so the event loop keeps serving other clients.
A worker thread is never held while waiting on a client: uploads await each
chunk on the loop (``BODY_READ_TIMEOUT`` between chunks) and write it in a thread.
An upload that would leave the store's disk below ``LOCALLLM_MIN_FREE_DISK`` is
refused with 507: by its ``Content-Length`` before a byte is stored, else as the
bytes arrive; its temp file goes with it.
"""

from __future__ import annotations

import functools
import logging
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.requests import ClientDisconnect

from localllm import __version__, config
from localllm.api.schemas import CopyRequest, DeleteRequest, PullRequest, ShowRequest
from localllm.errors import BlobNotFound, InvalidRequest
from localllm.inference.contextfit import fit_contexts
from localllm.models.service import ModelService
from localllm.server.deps import inference_service, json_body, model_service, offload
from localllm.server.routes_search import machine_of
from localllm.server.streaming import Emit, events_from_thread, progress_response
from localllm.store.diskspace import NoSpace
from localllm.store.names import parse_digest, parse_name
from localllm.store.registry import split_scheme

router = APIRouter()
log = logging.getLogger(__name__)
# Longest silence between two chunks of an upload before the client is dropped.
BODY_READ_TIMEOUT = 60.0
Service = Annotated[ModelService, Depends(model_service)]


@router.api_route("/", methods=["GET", "HEAD"], response_class=PlainTextResponse)
def root() -> str:
    return "localllm is running"


@router.api_route("/api/version", methods=["GET", "HEAD"])
def version() -> dict[str, str]:
    from localllm.backends.advice import gpu_line
    from localllm.hardware.detect import cached

    # Ours: the line naming the command that puts an unused GPU to work (api/hint.py),
    # once the devices are known; it never waits for the probe.
    hw = cached()
    line = gpu_line(hw) if hw is not None else ""
    return {"version": __version__, **({"gpu_hint": line} if line else {})}


@router.api_route("/api/tags", methods=["GET", "HEAD"])
def tags(svc: Service) -> dict[str, Any]:
    return {"models": svc.list_models()}


@router.post("/api/show")
def show(
    request: Request, req: Annotated[ShowRequest, Depends(json_body(ShowRequest))], svc: Service
) -> Any:
    out = svc.show(req.model, verbose=req.verbose)
    if req.fit_contexts:  # ours: the planner's verdicts (a worker thread: this route is sync)
        slots = (req.options or {}).get("num_parallel")
        if slots is not None and (not isinstance(slots, int) or not 1 <= slots <= 64):
            raise InvalidRequest("options.num_parallel must be an integer from 1 to 64")
        out["fit"] = fit_contexts(inference_service(request), req.model, req.fit_contexts, slots)
    return out


@router.post("/api/pull", response_model=None)
async def pull(
    request: Request, req: Annotated[PullRequest, Depends(json_body(PullRequest))], svc: Service
) -> Response:
    # Validate before any thread starts so a bad name is a plain 400, and a library name
    # the catalogue lacks a plain 404 (its files are read off the loop).
    raw, forced = split_scheme(req.model)  # ollama://NAME: Ollama's registry, whatever NAME
    model = ("ollama://" if forced else "") + parse_name(raw).display
    await offload(request, svc.pull_target, model)
    machine = machine_of(request)

    def work(emit: Emit, cancel: Any) -> None:
        svc.pull(
            model,
            emit,
            cancel=cancel,
            projector=req.projector,
            machine=machine,
            force=req.force,
            dry_run=req.dry_run,
            max_rate=req.max_rate,
        )

    return await progress_response(events_from_thread(work, request=request), req.stream)


@router.delete("/api/delete")
async def delete(
    req: Annotated[DeleteRequest, Depends(json_body(DeleteRequest))], svc: Service
) -> Response:
    await svc.remove(req.model)
    return Response(status_code=200)


@router.post("/api/copy")
def copy(req: Annotated[CopyRequest, Depends(json_body(CopyRequest))], svc: Service) -> Response:
    svc.copy(req.source, req.destination)
    return Response(status_code=200)


# ``:path`` so that digests with slashes reach the validator (400), not the router (404).
@router.head("/api/blobs/{digest:path}")
def blob_exists(digest: str, svc: Service) -> Response:
    want = parse_digest(digest)
    if not svc.blob_exists(want):
        raise BlobNotFound(f'blob "{want}" not found')
    return Response(status_code=200)


@router.post("/api/blobs/{digest:path}")
async def blob_upload(digest: str, request: Request, svc: Service) -> Response:
    """Stream the body to a temp blob: chunks are awaited on the event loop and only
    each write runs in a worker thread, so uploads stalled by their clients hold no
    thread (40 of them used to exhaust the pool and stall every sync route)."""
    want = parse_digest(digest)
    if await anyio.to_thread.run_sync(svc.blob_exists, want):
        return Response(status_code=200)
    try:
        writer = await anyio.to_thread.run_sync(
            functools.partial(
                svc.store.blobs.writer,
                want,
                keep_free=config.MIN_FREE_DISK.get(),
                size=_declared_size(request),
            )
        )
    except NoSpace as exc:
        return _no_space(want, exc)
    try:
        stream = request.stream()
        while True:
            try:
                with anyio.fail_after(BODY_READ_TIMEOUT):
                    chunk = await stream.__anext__()
            except StopAsyncIteration:
                break
            if chunk:
                await anyio.to_thread.run_sync(writer.write, chunk)
        await anyio.to_thread.run_sync(writer.commit)
    except TimeoutError:
        log.info("blob upload %s: no data for %gs, dropping the client", want, BODY_READ_TIMEOUT)
        # ``close``: the rest of the body will not be read on this connection.
        return JSONResponse(
            {"error": f"no request data for {BODY_READ_TIMEOUT:g}s"},
            status_code=408,
            headers={"connection": "close"},
        )
    except NoSpace as exc:
        return _no_space(want, exc)
    except ClientDisconnect:
        # Routine (a cancelled `localllm create`), not a server fault: one line, no traceback.
        log.info("blob upload %s: client disconnected after %d bytes", want, writer.size)
        return Response(status_code=499)
    finally:
        writer.abort()  # inline: a cancelled request must not skip the clean-up
    return Response(status_code=201)


def _declared_size(request: Request) -> int | None:
    try:
        size = int(request.headers.get("content-length", ""))
    except ValueError:
        return None  # chunked: the room is checked as bytes arrive
    return size if size >= 0 else None


def _no_space(want: str, exc: NoSpace) -> Response:
    log.warning("blob upload %s refused: %s", want, exc.message)
    # ``close``: the rest of the body will not be read on this connection.
    return JSONResponse(
        {"error": exc.message}, status_code=exc.status, headers={"connection": "close"}
    )

"""The daemon's FastAPI app: ``create_app`` wires routers, services, errors and security.

Route modules are listed in ``ROUTER_MODULES``; each exposes ``router`` (an
``APIRouter``) and is imported when the app is built.  Inference routes
(``/api/generate``, ``/api/chat``, ``/v1/*``) join by adding their module
there, or by passing ``routers=`` to ``create_app``.

Errors: any ``LocalLLMError`` becomes its ``status`` with Ollama's
``{"error": "..."}`` body, or OpenAI's ``{"error": {"message", "type",
"param", "code"}}`` under ``/v1/`` (Anthropic's under ``/v1/messages``).
Validation problems are 400, never FastAPI's 422 shape.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from localllm import __version__, config
from localllm.errors import LocalLLMError
from localllm.inference.service import InferenceService
from localllm.models.service import ModelService
from localllm.scheduler.scheduler import Scheduler
from localllm.server.apikeys import KeyRing
from localllm.server.errorbody import error_doc
from localllm.server.health import Lifecycle
from localllm.server.looplag import LoopLag
from localllm.server.metrics import Metrics
from localllm.server.middleware import SCOPE_REQUEST_ID, RequestMiddleware, internal_error
from localllm.server.openapi import openapi_builder
from localllm.server.requestlog import note_refused
from localllm.server.security import SecurityMiddleware, is_loopback_bind
from localllm.store.local import Store

log = logging.getLogger(__name__)

# Health and metrics come first: nothing else may shadow them.
ROUTER_MODULES: list[str] = [
    "localllm.server.health",
    "localllm.server.metrics",
    "localllm.server.routes_models",
    "localllm.server.routes_generate",
    "localllm.server.routes_openai",
    "localllm.server.routes_responses",
    "localllm.server.routes_stored",
    "localllm.server.routes_anthropic",
    "localllm.server.routes_create",
    "localllm.server.routes_search",
    "localllm.server.routes_tokens",
    "localllm.server.routes_rerank",
    "localllm.server.routes_eval",
]


def error_response(request: Request, status: int, message: str) -> JSONResponse:
    """The error body clients of this path expect (Ollama's, OpenAI's under /v1/,
    Anthropic's under /v1/messages)."""
    status, doc = error_doc(request.url.path, status, message)
    return JSONResponse(doc, status_code=status)


async def _local_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LocalLLMError)
    if exc.status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, exc)
    elif exc.status in (400, 413):
        await note_refused(request, exc.status, exc.message)
    return error_response(request, exc.status, exc.message)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if not errors:
        return error_response(request, 400, "invalid request")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    if first.get("type") == "missing" and not loc:
        message = "missing request body"
    elif first.get("type") == "json_invalid":
        message = "invalid JSON in request body"
    elif loc:
        message = f'invalid value for "{".".join(loc)}": {first.get("msg", "invalid")}'
    else:
        message = f"invalid request: {first.get('msg', 'invalid')}"
    await note_refused(request, 400, message)
    return error_response(request, 400, message)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = str(exc.detail) if exc.detail else "error"
    if exc.status_code == 404:
        message = f"404 page not found: {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} not allowed for {request.url.path}"
    return error_response(request, exc.status_code, message)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    # The detail (paths, file names) goes to the log under the request id; the
    # client gets the id (see middleware.internal_error).
    rid = request.scope.get(SCOPE_REQUEST_ID)
    log.error(
        "%s %s crashed",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"request_id": rid} if rid else None,
    )
    return error_response(request, 500, internal_error(rid))


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.loop_lag.start()
    yield
    app.state.loop_lag.stop()
    # Run in reverse so later components (scheduler) stop before earlier ones.
    for hook in reversed(app.state.on_shutdown):
        try:
            await hook()
        except Exception:
            log.exception("shutdown hook failed")


def default_scheduler() -> Scheduler:
    """The scheduler a daemon runs with: runner processes placed by the planner."""
    from localllm.runner.process import RunnerProcess
    from localllm.scheduler.placement import make_plan_fn

    # LOCALLLM_MAX_LOADED_MODELS=0 depends on the GPU count, which needs the
    # hardware probe: the scheduler asks for it in its planning thread, once,
    # when a second model would load (the planner has probed by then), so the
    # daemon starts without waiting for a probe.
    max_loaded: int | Callable[[], int] = config.MAX_LOADED_MODELS.get() or _auto_max_loaded
    return Scheduler(
        RunnerProcess.start, make_plan_fn(), max_loaded=max_loaded, max_queue=config.MAX_QUEUE.get()
    )


def _auto_max_loaded() -> int:
    from localllm.hardware.detect import detect

    return config.max_loaded_models(len(detect().gpus))


def _unloader(app: FastAPI) -> Callable[[str], Awaitable[object]]:
    async def unload(model: str) -> object:
        inference: InferenceService = app.state.inference
        return await inference.unload(inference.target(model))

    return unload


def create_app(
    store: Store | None = None,
    *,
    bind_host: str | None = None,
    routers: Iterable[APIRouter] = (),
    scheduler: Scheduler | None = None,
) -> FastAPI:
    """Build the daemon's ASGI app.

    ``store`` defaults to the store under ``paths.models()``; ``bind_host``
    (default: ``LOCALLLM_HOST``'s host) decides whether the Host-header guard
    is on — it is whenever the daemon listens on loopback only.
    """
    app = FastAPI(
        title="localllm",
        version=__version__,
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.openapi = openapi_builder(app)  # type: ignore[method-assign]
    store = store if store is not None else Store()
    app.state.store = store
    app.state.models = ModelService(store, unload=_unloader(app))
    if scheduler is None:
        scheduler = default_scheduler()
    app.state.scheduler = scheduler
    app.state.inference = InferenceService(store, scheduler)
    app.state.loop_lag = LoopLag()
    metrics = Metrics(scheduler, loop_lag=app.state.loop_lag)
    app.state.metrics = metrics
    app.state.inference.observe = metrics.generation_observer
    app.state.lifecycle = Lifecycle()
    # Components with background work (the scheduler) append async stop hooks here.
    shutdown_hooks: list[Callable[[], Awaitable[None]]] = [scheduler.shutdown]
    app.state.on_shutdown = shutdown_hooks

    app.add_exception_handler(LocalLLMError, _local_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)

    for module_name in ROUTER_MODULES:
        app.include_router(importlib.import_module(module_name).router)
    for extra in routers:
        app.include_router(extra)

    host = bind_host if bind_host is not None else config.HOST.get()[0]
    app.add_middleware(
        SecurityMiddleware,
        guard_host=is_loopback_bind(host),
        origins=config.ORIGINS.get(),
        keys=KeyRing(config.API_KEY.get(), config.API_KEYS_FILE.get()),
    )
    # Outermost, so refusals by the security layer are logged, counted and tagged too.
    app.add_middleware(
        RequestMiddleware,
        lifecycle=app.state.lifecycle,
        metrics=metrics,
        max_body=config.MAX_BODY.get(),
        max_blob=config.MAX_BLOB_SIZE.get(),
        debug=config.DEBUG.get() > 0,
    )
    return app

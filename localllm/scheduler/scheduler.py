"""The scheduler: which models are loaded, who may use them, and when they go.

It owns the bounded request queue (``LOCALLLM_MAX_QUEUE`` → 503), the set of
loaded runners, per-model slots (``num_parallel`` concurrent sequences),
keep-alive timers, eviction of idle models when a new one needs room, reloads
when a load-time option changes, and loading one model at a time.  It also
remembers which models' runners died (crashed, or were killed for not
responding) until the model loads again, for ``/health/ready``, and puts the
model's name in front of a crash's message.  It knows
runners only through the ``Runner`` protocol and placement only through an
injected ``PlanFn``, so it is unit-testable with fakes and never imports the
native engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

from localllm.errors import RunnerCrashed, ServerBusy
from localllm.runner.interface import Runner, StartRunner
from localllm.runner.messages import LoadOptions

if TYPE_CHECKING:  # types only: the scheduler runs on fakes without reading a GGUF
    from localllm.api.wire import Details
    from localllm.gguf.info import ModelInfo
    from localllm.scheduler.planner import LoadPlan

log = logging.getLogger(__name__)

BUSY_MESSAGE = "server busy, please try again.  maximum pending requests exceeded"


@dataclass(frozen=True)
class ModelSpec:
    """What to load: the identity of the weights plus what ``/api/ps`` shows."""

    name: str  # display name the request used
    # Identity of the loaded base weights (blob paths); requests with the same key share
    # one runner.  LoRA adapters are not part of it: the runner applies them per request,
    # so base + adapter A and base + adapter B are served by one load.
    key: str
    model_paths: tuple[str, ...]
    digest: str = ""
    info: ModelInfo | None = None  # the GGUF header, for the planner
    # What /api/ps shows; empty for a spec made without a store entry (tests' fakes).
    details: Details = field(default_factory=lambda: cast("Details", {}))
    adapters: tuple[str, ...] = ()  # LoRA adapter paths this model name applies
    projector: str | None = None  # vision projector (mmproj GGUF) path, from the manifest
    draft: str | None = None  # draft model (Modelfile DRAFT) GGUF path, from the manifest
    draft_info: ModelInfo | None = None  # the draft's header, for the planner


@dataclass(frozen=True)
class Placement:
    """The planner's answer for one load: resolved options and estimated memory."""

    opts: LoadOptions
    size: int = 0  # bytes in RAM + VRAM
    size_vram: int = 0
    fits: bool = True  # fits next to the models passed in
    reason: str = ""
    plan: LoadPlan | None = None  # the planner's answer, kept for the next placement decision


# (spec, requested options, models that stay loaded) -> placement
PlanFn = Callable[[ModelSpec, LoadOptions, list["Loaded"]], Placement]


def _default_plan(spec: ModelSpec, opts: LoadOptions, others: list[Loaded]) -> Placement:
    return Placement(opts=opts)


@dataclass(eq=False)
class Loaded:
    """One loaded model (one runner process)."""

    spec: ModelSpec
    runner: Runner
    requested: LoadOptions  # as asked for; compared to decide reloads
    placement: Placement
    keep_alive: float
    slots: asyncio.Semaphore
    refcount: int = 0
    expires_at: float = math.inf  # wall-clock seconds; inf while in use or kept forever
    timer: asyncio.TimerHandle | None = None
    stopping: bool = False

    @property
    def opts(self) -> LoadOptions:
        return self.placement.opts


def load_key(opts: LoadOptions) -> LoadOptions:
    """The options whose change forces a reload (the sampling seed does not)."""
    return replace(opts, seed=-1)


class Scheduler:
    """Hands out loaded models to requests; see the module docstring."""

    def __init__(
        self,
        start_runner: StartRunner,
        plan: PlanFn | None = None,
        *,
        max_loaded: int | Callable[[], int] = 3,
        max_queue: int = 512,
        load_timeout: float | None = None,
    ) -> None:
        self._start_runner = start_runner
        self._plan = plan or _default_plan
        # A number, or a function the daemon passes for "automatic" (it counts GPUs,
        # which may run the hardware probe): called once, in the planning thread of
        # the first load that has company, never here or on the event loop.
        self._max_loaded = max_loaded
        self.max_queue = max_queue
        self.load_timeout = load_timeout
        self._loaded: dict[str, Loaded] = {}
        self._load_lock = asyncio.Lock()  # one model loading at a time
        self._changed = asyncio.Condition()  # a model went idle or was unloaded
        self.pending = 0
        self.load_count = 0
        self._closed = False
        self._tasks: set[asyncio.Future[None]] = set()  # expiry unloads in flight
        self._failed: dict[str, tuple[str, str]] = {}  # key -> (name, why its runner died)

    # -- public --------------------------------------------------------------
    @property
    def max_loaded(self) -> int | None:
        """Most models loaded at once; ``None`` while an automatic limit is not yet known."""
        return None if callable(self._max_loaded) else max(1, self._max_loaded)

    def loaded(self) -> list[Loaded]:
        return list(self._loaded.values())

    def failures(self) -> dict[str, str]:
        """Models whose runner died and that have not loaded again since: name -> why."""
        failed = dict(self._failed.values())
        for model in self._loaded.values():
            if not model.runner.alive and not model.stopping:
                failed.setdefault(model.spec.name, _death_of(model.runner))
        return failed

    @contextlib.asynccontextmanager
    async def use(
        self, spec: ModelSpec, opts: LoadOptions, keep_alive: float
    ) -> AsyncIterator[Loaded]:
        """Wait for the model to be loaded and a slot free; hold both inside the block."""
        if self.pending >= self.max_queue:
            raise ServerBusy(BUSY_MESSAGE)
        self.pending += 1
        model: Loaded | None = None
        acquired = False
        try:
            model = await self._get(spec, opts)
            await model.slots.acquire()
            acquired = True
        except BaseException:
            if model is not None:
                await self._release(model, keep_alive)
            raise
        finally:
            self.pending -= 1
        try:
            yield model
        except RunnerCrashed as exc:
            # The runner does not know the model's name; the person reading the error needs it.
            self._note_death(model, str(exc))
            raise RunnerCrashed(f"{spec.name}: {exc}") from None
        finally:
            if acquired:
                model.slots.release()
            await self._release(model, keep_alive)

    async def unload(self, key: str) -> bool:
        """Unload the model with ``key`` once idle (now, if it is idle)."""
        model = self._loaded.get(key)
        if model is None:
            return False
        model.keep_alive = 0
        if model.refcount == 0:
            await self._stop(model)
        return True

    async def shutdown(self) -> None:
        self._closed = True
        for model in list(self._loaded.values()):
            await self._stop(model)

    # -- internals -----------------------------------------------------------
    async def _get(self, spec: ModelSpec, opts: LoadOptions) -> Loaded:
        # Another projector or draft model means a reload.
        opts = replace(opts, projector=spec.projector, draft=spec.draft)
        model = self._loaded.get(spec.key)
        if (
            model is not None
            and model.runner.alive
            and not model.stopping
            and load_key(model.requested) == load_key(opts)
        ):
            # Fast path: a loaded model never waits behind another model's load.
            self._claim(model)
            return model
        async with self._load_lock:
            while True:
                model = self._loaded.get(spec.key)
                if model is not None and not model.runner.alive:
                    log.warning("runner for %s died; loading it afresh", spec.name)
                    await self._stop(model)
                    continue
                if model is not None and load_key(model.requested) == load_key(opts):
                    self._claim(model)
                    return model
                if model is not None:
                    # Load-time options changed: wait until it is idle, then reload.
                    model.keep_alive = 0
                    if model.refcount:
                        await self._wait_change()
                        continue
                    await self._stop(model)
                    continue
                others = list(self._loaded.values())
                # In a thread: planning may run the hardware probe (a subprocess, on
                # the first load and on every load with GPUs), and the event loop must
                # keep answering /health and streaming other models meanwhile.
                placement, limit = await asyncio.to_thread(self._place, spec, opts, others)
                if others and (len(others) >= limit or not placement.fits):
                    if not await self._evict_one():
                        await self._wait_change()
                    continue
                return await self._load(spec, opts, placement)

    def _place(
        self, spec: ModelSpec, opts: LoadOptions, others: list[Loaded]
    ) -> tuple[Placement, int]:
        """The placement, and the model limit when it matters (runs in a thread)."""
        placement = self._plan(spec, opts, others)
        if others and callable(self._max_loaded):
            # Only one thread gets here at a time: _get holds the load lock.
            self._max_loaded = self._max_loaded()
            log.info("at most %d models loaded at once", max(1, self._max_loaded))
        return placement, self.max_loaded or 1

    async def _load(self, spec: ModelSpec, opts: LoadOptions, placement: Placement) -> Loaded:
        log.info("loading %s: %s", spec.name, placement.reason or "default placement")
        runner = await self._start_runner(
            list(spec.model_paths), placement.opts, load_timeout=self.load_timeout
        )
        self.load_count += 1
        self._failed.pop(spec.key, None)
        model = Loaded(
            spec=spec,
            runner=runner,
            requested=opts,
            placement=placement,
            keep_alive=0,
            slots=asyncio.Semaphore(max(1, placement.opts.n_parallel)),
        )
        self._loaded[spec.key] = model
        self._claim(model)
        return model

    def _claim(self, model: Loaded) -> None:
        model.refcount += 1
        model.expires_at = math.inf
        if model.timer is not None:
            model.timer.cancel()
            model.timer = None

    async def _release(self, model: Loaded, keep_alive: float) -> None:
        model.refcount -= 1
        model.keep_alive = keep_alive
        if model.refcount == 0 and self._loaded.get(model.spec.key) is model:
            if not model.runner.alive or keep_alive <= 0:
                await self._stop(model)
            elif math.isfinite(keep_alive):
                model.expires_at = time.time() + keep_alive
                loop = asyncio.get_running_loop()
                model.timer = loop.call_later(keep_alive, self._expire, model)
            else:
                model.expires_at = math.inf
        await self._notify()

    def _note_death(self, model: Loaded, why: str | None = None) -> None:
        if model.stopping:  # we ended it ourselves
            return
        if why is not None:
            self._failed[model.spec.key] = (model.spec.name, why)
        else:  # keep what a request already learned (the message is the better reason)
            self._failed.setdefault(model.spec.key, (model.spec.name, _death_of(model.runner)))

    def _expire(self, model: Loaded) -> None:
        if model.refcount == 0 and self._loaded.get(model.spec.key) is model:
            task = asyncio.ensure_future(self._stop(model))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _evict_one(self) -> bool:
        """Unload the idle model that expires soonest; False when all are busy."""
        idle = [m for m in self._loaded.values() if m.refcount == 0]
        if not idle:
            return False
        victim = min(idle, key=lambda m: m.expires_at)
        log.info("evicting %s to make room", victim.spec.name)
        await self._stop(victim)
        return True

    async def _stop(self, model: Loaded) -> None:
        if not model.runner.alive:
            self._note_death(model)  # died before we ended it: still a failure to report
        if self._loaded.get(model.spec.key) is model:
            del self._loaded[model.spec.key]
        if model.timer is not None:
            model.timer.cancel()
            model.timer = None
        if not model.stopping:
            model.stopping = True
            try:
                await model.runner.close()
            except Exception:  # a dead runner may fail to close; it is gone either way
                log.debug("closing runner failed", exc_info=True)
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _wait_change(self) -> None:
        # Called with the load lock held: releasing models never needs that lock.
        # The timeout is a safety net against a missed wake-up; state is re-checked anyway.
        async with self._changed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 1.0)


def _death_of(runner: Runner) -> str:
    # ``RunnerProcess.death`` says why; fakes and other runners may not know.
    why = getattr(runner, "death", None)
    return str(why) if why else "model runner exited unexpectedly"

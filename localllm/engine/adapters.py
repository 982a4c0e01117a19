"""LoRA adapters in the engine: load once per file, apply per decode step.

llama.cpp applies adapters to a whole context, not to a sequence, so the
engine cannot mix requests for different adapter sets in one ``llama_decode``.
Instead each step serves ONE adapter set (``AdapterSet``, a tuple of paths;
``()`` is the plain base model): only slots of that set join the batch, and the
others keep their state and wait for a step where their set is applied.

Which set a step serves (``choose``): the applied one while it has work and no
other set has waited ``QUANTUM`` steps; then the set whose slot has waited
longest.  The quantum trades latency for fewer switches: a switch is cheap
(llama.cpp rebuilds its compute graph for the next decode) but not free, and
the steps of different sets never share a decode, so with two busy sets each
gets about half the steps — mixed-adapter traffic has roughly the throughput
of one set alone, split between them.  Requests with the same set batch as
usual.

A slot's KV cache is tagged with the set it was computed under (an adapter on
the attention or FFN weights changes the keys and values), so prefix reuse
only ever matches within one set.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from localllm.engine.binding import last_errors, take_log
from localllm.engine.model import Context, Model, _Owner
from localllm.engine.slots import Slot
from localllm.errors import InvalidRequest

AdapterSet = tuple[str, ...]
QUANTUM = 4  # steps the applied set keeps the context while another set waits
_LLAMA_PREFIX = "failed to apply lora adapter: "


class Lora(_Owner):
    """One LoRA adapter GGUF loaded against a model (freed with it, or in ``close``)."""

    def __init__(self, model: Model, path: str) -> None:
        self.ffi, self.lib = model.ffi, model.lib
        self.path = path
        take_log()
        h = self.lib.ll_lora_load(model.handle, path.encode())
        log = take_log()
        if h == self.ffi.NULL:
            why = last_errors(log, limit=1)
            why = why.split(_LLAMA_PREFIX, 1)[-1] if why else "not a LoRA adapter GGUF"
            raise InvalidRequest(f"the LoRA adapter {_short(path)} does not fit this model: {why}")
        self._h = h

    def _free(self, h: Any) -> None:
        self.lib.ll_lora_free(h)


class Adapters:
    """The adapters loaded into one engine and which set its context has applied."""

    def __init__(self, model: Model, ctx: Context) -> None:
        self.model = model
        self.ctx = ctx
        self._loras: dict[str, Lora] = {}
        self._refused: dict[str, str] = {}  # path -> why (a bad file is not re-read each time)
        self.applied: AdapterSet = ()
        self.switches = 0
        self._run = 0  # consecutive steps served by the applied set
        self._new: list[tuple[str, int]] = []  # loads not yet reported: (path, ns)

    @property
    def any(self) -> bool:
        return bool(self._loras)

    def resolve(self, paths: Sequence[str]) -> AdapterSet:
        """The set for a request's adapter paths, loading new ones (raises ``InvalidRequest``)."""
        key = tuple(dict.fromkeys(str(p) for p in paths))  # order kept, duplicates dropped
        for path in key:
            if path in self._loras:
                continue
            if path in self._refused:
                raise InvalidRequest(self._refused[path])
            t0 = time.perf_counter_ns()
            try:
                self._loras[path] = Lora(self.model, path)
            except InvalidRequest as exc:
                self._refused[path] = exc.message
                raise
            self._new.append((path, time.perf_counter_ns() - t0))
        return key

    def take_loads(self) -> list[tuple[str, int]]:
        """Adapters loaded since the last call, with their load time in ns."""
        out, self._new = self._new, []
        return out

    def for_step(self, slots: Iterable[Slot]) -> AdapterSet | None:
        """Choose and apply the set this step serves; None when no slot has work."""
        key = self.choose(
            (s.active.adapters, s.active.last_step)
            for s in slots
            if s.active is not None and (s.active.prefilling or s.active.pending >= 0)
        )
        if key is not None:
            self.apply(key)
        return key

    def choose(self, waiting: Iterable[tuple[AdapterSet, int]]) -> AdapterSet | None:
        """The set this step serves, from (set, step it last advanced) of slots with work."""
        oldest: dict[AdapterSet, int] = {}
        for key, last in waiting:
            if key not in oldest or last < oldest[key]:
                oldest[key] = last
        if not oldest:
            return None
        if self.applied in oldest and (self._run < QUANTUM or len(oldest) == 1):
            return self.applied
        others = {k: v for k, v in oldest.items() if k != self.applied} or oldest
        return min(others, key=lambda k: others[k])

    def apply(self, key: AdapterSet) -> None:
        """Make ``key`` the context's adapter set (each at scale 1.0) for the next decode."""
        if key == self.applied:
            self._run += 1
            return
        ffi, lib = self.model.ffi, self.model.lib
        if key:
            arr = ffi.new("ll_lora *[]", [self._loras[p].handle for p in key])
            scales = ffi.new("float[]", [1.0] * len(key))
            rc = lib.ll_lora_apply(self.ctx.handle, arr, scales, len(key))
        else:
            rc = lib.ll_lora_apply(self.ctx.handle, ffi.NULL, ffi.NULL, 0)
        if rc != 0:
            raise RuntimeError(f"llama_set_adapters_lora returned {rc}")
        self.applied = key
        self.switches += 1
        self._run = 1

    def close(self) -> None:
        for lora in self._loras.values():
            lora.close()
        self._loras.clear()


def _short(path: str) -> str:
    # Blob paths are long and say nothing; the digest's head is enough to tell them apart.
    name = path.rsplit("/", 1)[-1]
    return name[:19] if name.startswith("sha256-") else name

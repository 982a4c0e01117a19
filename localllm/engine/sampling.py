"""One request's sampler chain: SamplingParams -> llama.cpp sampler, per slot.

The chain itself (grammar, penalties, top_k, typical_p, top_p, min_p,
temperature, dist with seed; greedy when temperature <= 0) is assembled in C
by the shim; this module maps Ollama's parameters onto it and owns the handle.
``DeviceChain`` is the same chain built to run inside the decode, on the device
(which requests get one, and which slot keeps it: device_sampling.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from localllm.engine.model import Context, Model, _Owner
from localllm.errors import InvalidRequest
from localllm.runner.messages import SamplingParams

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: llama.cpp picks a random seed


class Sampler(_Owner):
    """A sampler chain; ``sample`` picks and accepts one token from a batch output."""

    def __init__(
        self, model: Model, ctx: Context, p: SamplingParams, default_seed: int = -1
    ) -> None:
        self.ffi, self.lib = model.ffi, model.lib
        seed = p.seed if p.seed >= 0 else default_seed
        grammar = p.grammar.encode() if p.grammar else self.ffi.NULL
        h = self.lib.ll_sampler_new(
            model.handle,
            ctx.handle,
            float(p.temperature),
            int(p.top_k),
            float(p.top_p),
            float(p.min_p),
            float(p.typical_p),
            int(p.repeat_last_n),
            float(p.repeat_penalty),
            float(p.frequency_penalty),
            float(p.presence_penalty),
            (seed & 0xFFFFFFFF) if seed >= 0 else DEFAULT_SEED,
            grammar,
        )
        if h == self.ffi.NULL:
            raise InvalidRequest("invalid grammar: it does not parse as GBNF with a 'root' rule")
        self._h = h
        self._ctx = ctx.handle

    def _free(self, h: Any) -> None:
        self.lib.ll_sampler_free(h)

    def accept_prompt(self, tokens: Sequence[int]) -> None:
        """Let the repeat/presence/frequency penalties see the prompt."""
        if tokens:
            arr = self.ffi.new("int32_t[]", list(tokens))
            self.lib.ll_sampler_accept_prompt(self.handle, arr, len(tokens))

    def sample(self, index: int) -> int:
        return int(self.lib.ll_sampler_sample(self._h, self._ctx, index))


class DeviceChain(Sampler):
    """A chain that samples inside the decode once attached to a slot's sequence.

    It stays with its slot across requests (device_sampling.py): ``close`` only
    hands it back; ``free`` detaches it from the context and frees it."""

    def __init__(
        self,
        model: Model,
        ctx: Context,
        temp: float,
        top_k: int,
        top_p: float,
        min_p: float,
        seed: int,
    ) -> None:
        self.ffi, self.lib = model.ffi, model.lib
        h = self.lib.ll_sampler_new_device(model.handle, temp, top_k, top_p, min_p, seed)
        if h == self.ffi.NULL:
            raise MemoryError("could not build a device sampler chain")
        self._h = h
        self._ctx = ctx.handle
        self._context = ctx
        self.attached = False
        self.lent = False

    def attach(self, seq: int) -> bool:
        """Sample ``seq``'s rows from the next decode on; False: this context cannot."""
        self.attached = bool(self.lib.ll_sampler_attach(self.handle, self._ctx, seq))
        return self.attached

    def reset(self) -> None:
        """Start over as a new chain would (a fixed seed's first draw comes again)."""
        self.lib.ll_sampler_reset(self.handle)

    def accept_prompt(self, tokens: Sequence[int]) -> None:
        pass  # no penalties on the device: the prompt changes nothing

    def close(self) -> None:
        self.lent = False  # back to its slot, still attached

    def free(self) -> None:
        super().close()

    def _free(self, h: Any) -> None:
        if self.attached and self._context._h is not None:  # a freed context points nowhere
            self.lib.ll_sampler_detach(h)
        self.lib.ll_sampler_free(h)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # at interpreter shutdown there is nothing left to report to
            pass

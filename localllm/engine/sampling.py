"""One request's sampler chain: SamplingParams -> llama.cpp sampler, per slot.

The chain itself is assembled in C by the shim in llama.cpp's common order:
grammar, logit bias, penalties, DRY, top_n_sigma, top_k, typical_p, top_p,
min_p, XTC, temperature, dist with seed; greedy when temperature <= 0 (after
XTC, which can drop the likeliest token); with mirostat 1 or 2, temperature and
mirostat in place of the truncating steps.  This module maps the parameters
onto it (a logit bias's text key becomes each of its tokens, as llama-server
does) and owns the handle.
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
        extra = _extra(model, p)
        h = self.lib.ll_sampler_new_ext(
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
            extra,
        )
        if extra != self.ffi.NULL:
            self.lib.ll_sampler_extra_free(extra)
        if h == self.ffi.NULL:
            raise InvalidRequest("invalid grammar: it does not parse as GBNF with a 'root' rule")
        self._h = h
        self._ctx = ctx.handle

    def _free(self, h: Any) -> None:
        self.lib.ll_sampler_free(h)

    def accept_prompt(self, tokens: Sequence[int]) -> None:
        """Let the repeat/presence/frequency penalties and DRY see the prompt."""
        if tokens:
            arr = self.ffi.new("int32_t[]", list(tokens))
            self.lib.ll_sampler_accept_prompt(self.handle, arr, len(tokens))

    def sample(self, index: int) -> int:
        return int(self.lib.ll_sampler_sample(self._h, self._ctx, index))


def uses_extra(p: SamplingParams) -> bool:
    """Whether ``p`` sets any sampler past Ollama's (none has a device form here)."""
    return bool(
        p.logit_bias
        or p.mirostat in (1, 2)
        or p.top_n_sigma > 0
        or (p.xtc_probability > 0 and p.xtc_threshold <= 0.5)
        or (p.dry_multiplier != 0 and p.dry_penalty_last_n != 0)
    )


def bias_pairs(model: Model, pairs: Sequence[tuple[int | str, float]]) -> list[tuple[int, float]]:
    """(token, bias) for each entry: a text key biases each token of its text (no BOS,
    special-token text read as text, as llama-server's); an id outside the vocabulary
    is a 400, where llama-server skips it quietly.  Each token once, the last entry
    naming it winning (llama.cpp would add a token listed twice twice, or once)."""
    out: dict[int, float] = {}
    for key, bias in pairs:
        if isinstance(key, str):
            out.update((t, float(bias)) for t in model.tokenize(key, False, False))
        elif 0 <= int(key) < model.n_vocab:
            out[int(key)] = float(bias)
        else:
            raise InvalidRequest(
                f"logit_bias: token {key} is not in this model's vocabulary "
                f"(ids 0 to {model.n_vocab - 1})"
            )
    return list(out.items())


def _extra(model: Model, p: SamplingParams) -> Any:
    """The shim's ll_sampler_extra for ``p`` (its caller frees it), or NULL for none."""
    ffi, lib = model.ffi, model.lib
    if not uses_extra(p):
        return ffi.NULL
    x = lib.ll_sampler_extra_new()
    if x == ffi.NULL:
        raise MemoryError("could not build a sampler chain")
    try:
        pairs = bias_pairs(model, p.logit_bias)
        ok = lib.ll_sampler_extra_bias(
            x,
            ffi.new("int32_t[]", [t for t, _ in pairs] or [0]),
            ffi.new("float[]", [b for _, b in pairs] or [0.0]),
            len(pairs),
        )
        keep = [ffi.new("char[]", b.encode()) for b in p.dry_sequence_breakers]
        ok |= lib.ll_sampler_extra_dry(
            x,
            float(p.dry_multiplier),
            float(p.dry_base),
            int(p.dry_allowed_length),
            int(p.dry_penalty_last_n),
            ffi.new("const char *[]", keep or [ffi.NULL]),
            len(keep),
        )
        if ok != 0:
            raise MemoryError("could not build a sampler chain")
    except BaseException:
        lib.ll_sampler_extra_free(x)
        raise
    lib.ll_sampler_extra_xtc(x, float(p.xtc_probability), float(p.xtc_threshold))
    lib.ll_sampler_extra_top_n_sigma(x, float(p.top_n_sigma))
    lib.ll_sampler_extra_mirostat(x, int(p.mirostat), float(p.mirostat_tau), float(p.mirostat_eta))
    return x


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

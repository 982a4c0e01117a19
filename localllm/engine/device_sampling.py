"""Sampling on the device: per slot, a sampler chain that runs inside the decode.

llama.cpp can add a sequence's sampler chain to the decode's own graph (backend
sampling): the device holding the output layer then draws the token, and only its
id comes back, instead of every output row's logits (128k floats a row on Llama 3)
crossing to the host to be sampled there.  On a GPU that copy and the host's pass
over it were most of a many-stream step.

This module owns three choices:

* which requests sample there (``on_device``): greedy, and top-k / top-p / min-p /
  temperature / seed chains; a grammar, repeat/presence/frequency penalties,
  typical-p, the samplers past Ollama's (logit bias, DRY, XTC, top-n-sigma,
  mirostat: ``sampling.uses_extra``) or logprobs keep the request on the host
  (``sampling.Sampler``), since the device chain has no form of those and logprobs
  are read from the raw logits, which a device-sampled row no longer brings back;
* one attached chain per slot (``SlotChains``), kept after its request ends and
  reset for the next one with the same settings: every attach and detach makes the
  context plan its graph memory again at the next decode (llama-server attaches per
  request), while an idle slot's chain costs nothing (its branch of the graph is
  not computed);
* the default (``wanted``): on when the output layer is on a GPU, where it pays;
  the CPU backend can run it too (the tests do) but copies logits for free there.

What the device draws, against the host (native/shim.c ``ll_sampler_new_device``;
tests/engine/test_device_sampling.py): the same chain in the same order over the
candidates in the same order, with the same uniform number per token from the same
seed.  So greedy picks the same token, except between logits that tie exactly (the
host takes the lowest id, the CPU backend's argmax the highest, CUDA's any lane's).
A seeded draw picks the token whose cumulative probability passes the number: the
host sums in double, the device in float, so the two part where the number falls
within the float error of that sum.  After a top-k cut (k tokens, Ollama's default
40) that error is ~k * 6e-8, and no draw differed in the tests; over a whole
vocabulary (top_k 0) it grows with the vocabulary, and a simulation of 128k-token
rows put 0.1% (one token near-certain) to 18% (flat rows) of draws on a
neighbouring token.  Either way every draw follows the same distribution; seeded
text is reproducible on one side, not across the two for chains without top-k.
"""

from __future__ import annotations

from localllm.engine.model import Context, Model
from localllm.engine.sampling import DEFAULT_SEED, DeviceChain, Sampler, uses_extra
from localllm.runner.messages import CompletionRequest, LoadOptions, SamplingParams

# llama.cpp logs this while loading when the output layer goes to a GPU (or RPC) device.
_OUTPUT_ON_GPU = "offloading output layer to GPU"

Key = tuple[float, int, float, float, int]  # temperature, top_k, top_p, min_p, seed


def wanted(opts: LoadOptions, load_log: str) -> bool:
    """Whether this load samples on the device (``LoadOptions.device_sampling``)."""
    if opts.embedding or opts.device_sampling == "off":
        return False
    return opts.device_sampling == "on" or _OUTPUT_ON_GPU in load_log


def on_device(p: SamplingParams, logprobs: int, default_seed: int = -1) -> Key | None:
    """The device chain's settings for a request, or None when it samples on the host."""
    penalties = p.repeat_last_n != 0 and (
        p.repeat_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0
    )
    if p.grammar or penalties or 0.0 < p.typical_p < 1.0 or logprobs > 0 or uses_extra(p):
        return None
    if p.temperature <= 0:
        return (0.0, 0, 1.0, 0.0, 0)  # greedy: every other setting is moot
    seed = p.seed if p.seed >= 0 else default_seed
    top_p = p.top_p if 0.0 < p.top_p < 1.0 else 1.0
    return (
        float(p.temperature),
        max(0, int(p.top_k)),
        float(top_p),
        max(0.0, float(p.min_p)),
        (seed & 0xFFFFFFFF) if seed >= 0 else DEFAULT_SEED,
    )


class SlotChains:
    """Per slot (sequence id), the chain attached to the context, and the sampler each
    request gets (``sampler``).  Closed before the context: it holds their pointers."""

    def __init__(self, model: Model, ctx: Context, on: bool) -> None:
        self.model, self.ctx, self.on = model, ctx, on
        self._slots: dict[int, tuple[Key, DeviceChain]] = {}
        self.attaches = 0  # chains attached so far (each makes the context re-plan its graph)

    def sampler(self, seq: int, req: CompletionRequest, default_seed: int = -1) -> Sampler:
        """The request's sampler for slot ``seq``: its slot's device chain when it can
        use one (reset when the settings match the last request's), else a host chain,
        with the slot's device chain detached (the host needs that slot's logits)."""
        p = req.sampling
        key = on_device(p, req.logprobs, default_seed) if self.on else None
        kept = self._slots.get(seq)
        if kept is not None:
            assert not kept[1].lent, "the slot's last request kept its sampler"
            if kept[0] == key:
                kept[1].reset()
                kept[1].lent = True
                return kept[1]
            del self._slots[seq]
            kept[1].free()
        if key is None:
            return Sampler(self.model, self.ctx, p, default_seed)
        try:
            chain = DeviceChain(self.model, self.ctx, *key)
        except MemoryError:
            return Sampler(self.model, self.ctx, p, default_seed)
        if not chain.attach(seq):
            chain.free()
            self.on = False  # this context cannot (e.g. a tensor-split model): host from now on
            return Sampler(self.model, self.ctx, p, default_seed)
        self.attaches += 1
        chain.lent = True
        self._slots[seq] = (key, chain)
        return chain

    def detach(self, seq: int) -> None:
        """Free idle slot ``seq``'s chain: its next decodes bring back raw logits (scoring
        reads them, engine/scoring.py)."""
        kept = self._slots.pop(seq, None)
        if kept is not None:
            assert not kept[1].lent, "detaching a chain a request still holds"
            kept[1].free()

    def close(self) -> None:
        for _, chain in self._slots.values():
            chain.free()
        self._slots.clear()

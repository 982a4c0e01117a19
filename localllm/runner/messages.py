"""Plain data that crosses the engine's boundary: load options, requests and events.

These types are shared by the engine (inside the runner child), the runner's
wire protocol and the daemon.  They are deliberately plain dataclasses of
JSON-able values, so the protocol can send them as dicts (``asdict``) and
rebuild them with ``from_dict`` without any native import.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal, TypeVar

from localllm.config import CPU_REPACK, CpuRepack, FlashAttention, KVType
from localllm.errors import InvalidRequest, LocalLLMError, NotFound

T = TypeVar("T")

# libmtmd's default media marker (``mtmd_default_marker()``): a text prompt holds one
# per image in ``CompletionRequest.images``, where that image's tokens go.
MEDIA_MARKER = "<__media__>"


@functools.cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def from_dict(cls: type[T], data: Mapping[str, object]) -> T:
    """Build a dataclass from a dict, ignoring unknown keys."""
    names = _field_names(cls)  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def to_dict(obj: object) -> dict[str, object]:
    """A dataclass as a dict, nested dataclasses as dicts (a shallow copy otherwise:
    ``asdict``'s deep copy doubled the cost of sending each token's event)."""
    return {k: to_dict(v) if is_dataclass(v) else v for k, v in vars(obj).items()}


# What a graceful stop gives the prompt cache's disk writer to finish its queue (the
# runner's close; the daemon waits 5 s for a runner to exit): about 2 GB of copies on a
# common disk.  Here, as the runner and the engine both read it.
CACHE_FLUSH_S = 4.0


@dataclass
class LoadOptions:
    """What a model is loaded with; a change of any of these means a reload."""

    n_ctx: int = 4096  # per slot
    n_parallel: int = 1  # slots; the llama context gets n_ctx * n_parallel cells
    # Tokens one engine step (one llama_decode) may hold, which llama.cpp computes in
    # micro-batches of n_ubatch: as llama-server's -b 2048 -ub 512, so prompts that
    # arrive together are evaluated together (Ollama's num_batch sets n_ubatch).
    n_batch: int = 2048
    n_ubatch: int = 512
    n_gpu_layers: int = 0
    main_gpu: int = 0  # index into ``devices`` used with split_mode "none"
    # Placement (hardware.Device names, in llama.cpp order: the last device takes the
    # top layers).  Empty = every device ggml offers, split by its free memory.
    devices: list[str] = field(default_factory=list)
    split_mode: Literal["none", "layer", "row"] = "layer"
    tensor_split: list[float] = field(default_factory=list)  # one share per device
    n_cpu_moe: int = 0  # keep the expert tensors of the first N layers in host memory
    rpc_workers: list[str] = field(default_factory=list)  # host:port, added before the load
    n_threads: int = 0  # 0 = physical cores
    flash_attn: FlashAttention = "auto"
    kv_type: KVType = "f16"
    use_mmap: bool = True
    # The CPU's extra buffer types (AMX, CPU_REPACK): LOCALLLM_CPU_REPACK as the daemon
    # reads it, so the runner loads as the planner counted (engine/cpu_check.py).
    cpu_repack: CpuRepack = field(default_factory=CPU_REPACK.get)
    embedding: bool = False  # load for embeddings (pooled outputs)
    # Load for reranking (with embedding): rank pooling, the GGUF's classification head
    # scoring each input, whatever pooling its metadata names (llama-server's --reranking).
    rerank: bool = False
    seed: int = -1
    projector: str | None = None  # a vision projector (mmproj GGUF) loaded next to the model
    # A draft model (Modelfile DRAFT): a small GGUF of the same vocabulary, loaded in the
    # same runner on the same devices, that proposes tokens for the model to verify.
    draft: str | None = None
    # A prefilling slot takes prompt cells another slot already holds (engine/sharing.py);
    # off only to measure what sharing saves.
    share_prefix: bool = True
    # Decode-first steps (LOCALLLM_STEP_BUDGET, engine/budget.py): while slots generate,
    # a step holds at most step_tokens tokens, or should take about step_ms; 0 and 0:
    # prompts fill the whole batch, as llama-server.
    step_tokens: int = 0
    step_ms: float = 0.0
    # Bytes of host memory for idle slots' cells (LOCALLLM_PROMPT_CACHE, engine/park.py):
    # -1 = as many as the KV cache takes, 0 = none (idle slots keep their cells).
    prompt_cache: int = -1
    # Bytes of disk for those copies, kept across reloads and restarts in prompt_cache_dir
    # (LOCALLLM_PROMPT_CACHE_DISK, engine/diskcache.py); 0 = none.
    prompt_cache_disk: int = 0
    prompt_cache_dir: str = ""
    # The file holding the key that authenticates those copies (0600, engine/cachefile.py).
    prompt_cache_key: str = ""
    # Default speculation drafts only what the batch pays for (LOCALLLM_DRAFT_GATE,
    # engine/draftcost.py); False: as far as each request's text allows.
    draft_gate: bool = True
    # Sampling inside the decode on the device holding the output layer (engine/
    # device_sampling.py), for the requests whose sampler chain it can run: "auto" = when
    # that device is a GPU, "on" also on the CPU backend (tests), "off" = always on the host.
    device_sampling: Literal["auto", "on", "off"] = "auto"


# llama.cpp's default DRY sequence breakers: a repeat never extends across one.
DRY_BREAKERS = ("\n", ":", '"', "*")


@dataclass
class SamplingParams:
    """Ollama's sampling options with Ollama's defaults."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    typical_p: float = 1.0
    repeat_last_n: int = 64  # 0 = off, -1 = whole context
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = -1  # -1 = random
    grammar: str | None = None  # GBNF, root rule "root"
    # llama.cpp's samplers past Ollama's, with llama.cpp's defaults (off); the engine
    # places them in llama.cpp's chain order (engine/sampling.py).
    logit_bias: list[tuple[int | str, float]] = field(default_factory=list)  # str: its tokens
    mirostat: int = 0  # 0 off, 1 or 2
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    top_n_sigma: float = -1.0  # <= 0 off
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dry_multiplier: float = 0.0  # 0 off
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64  # 0 off, -1 = whole context
    dry_sequence_breakers: list[str] = field(default_factory=lambda: list(DRY_BREAKERS))


@dataclass
class CompletionRequest:
    """One generation: a prompt (text or token ids) and how to continue it."""

    id: str
    prompt: str | list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    num_predict: int = -1  # -1 = until EOG or context full
    stop: list[str] = field(default_factory=list)
    add_special: bool = True  # add BOS when tokenizing a text prompt
    parse_special: bool = True  # let special-token text in the prompt become special tokens
    logprobs: int = 0  # top-N logprobs per generated token (0 = none)
    truncate: bool = True  # on overflow keep the prompt's tail instead of failing
    num_keep: int = 4  # tokens kept from the start when truncating
    # LoRA adapter GGUF paths applied (scale 1.0) on top of the loaded base model.
    adapters: list[str] = field(default_factory=list)
    # A chat format's markers ("[TOOL_CALLS]", "<|channel|>", ...): where one is a single
    # control token, its text is kept in the output, because GGUFs store many markers as
    # control tokens, which render as "" and would leave the parser a bare JSON object.
    markers: list[str] = field(default_factory=list)
    # Speculation: up to this many drafted tokens verified per step (0: off), drafted by
    # prompt lookup ("ngram"; "auto": only where it pays, engine/speculate.py) or by
    # the runner's draft model ("draft").
    draft_tokens: int = 0
    draft_mode: Literal["ngram", "auto", "draft"] = "ngram"
    draft_min: int = 0  # draft model: fewer drafted tokens than this are not verified
    draft_p_min: float = 0.0  # draft model: stop drafting below this top-token probability
    # When the slot's context fills during generation, drop the older half after the
    # first num_keep tokens and go on (Ollama's "shift"); False: stop with "length".
    shift: bool = True
    # Encoded image files (PNG, JPEG, ...) as the client sent them, one per MEDIA_MARKER
    # in a text prompt, in order (base64 on the wire; see runner/protocol.py).
    images: list[bytes] = field(default_factory=list)
    # A thinking budget (engine/thinking.py): at most think_budget tokens inside the
    # reasoning block (-1: no limit, 0: none), which opens with think_open (or at the
    # first token, think_opened: the prompt opened it) and ends with think_end.  When the
    # budget is spent, think_message (plain text) and think_close (the family's end
    # marker, control tokens read as such) are written for the model, as forced tokens.
    think_budget: int = -1
    think_open: str = ""
    think_end: str = ""
    think_close: str = ""
    think_message: str = ""
    think_opened: bool = False
    # The leading characters of a text prompt that every conversation of its app shares
    # (the system prompt and tools, up to the first user message; 0: unknown).  On a
    # sliding-window model the engine keeps a copy of the cells there (park.py), so a new
    # conversation that branches after it reuses them, after a restart too.
    cache_head: int = 0


@dataclass
class PairFormat:
    """How a reranker reads a query and a document as one input (inference/rerank.py).

    With a ``template`` (the GGUF's ``tokenizer.chat_template.rerank``), its
    ``{query}`` and ``{document}`` are filled in and the text is tokenized whole,
    control tokens read as themselves; else llama-server's layout: ``[BOS] query
    [EOS] [SEP] document [EOS]``, each special token where the tokenizer adds it
    (EOS falls back to ``sep`` when the vocabulary has none).
    """

    template: str = ""
    add_bos: bool = True
    add_eos: bool = False
    add_sep: bool = False
    sep: int = -1  # the separator token's id; -1: the vocabulary has none


@dataclass
class Piece:
    """A piece of generated text (complete UTF-8, with stop strings already held back)."""

    id: str
    text: str
    token: int = -1
    logprob: float | None = None
    top_logprobs: list[tuple[str, float]] | None = None


@dataclass
class Done:
    """A request finished; timings in nanoseconds."""

    id: str
    reason: Literal["stop", "length", "cancel"]
    prompt_tokens: int = 0  # whole prompt, cached part included (like llama-server / Ollama)
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    prompt_eval_ns: int = 0
    eval_count: int = 0
    eval_ns: int = 0
    context: list[int] = field(default_factory=list)  # prompt + generated tokens
    stop: str = ""  # the stop string that ended it, when one did
    drafted: int = 0  # speculative draft tokens proposed, and how many were accepted
    accepted: int = 0


@dataclass
class Failed:
    """A request failed without taking the engine down."""

    id: str
    message: str
    status: int = 500


Event = Piece | Done | Failed


def error_for(failed: Failed) -> LocalLLMError:
    """A ``failed`` event as the matching error class (routes read ``status``)."""
    if failed.status == 400:
        return InvalidRequest(failed.message)
    if failed.status == 404:
        return NotFound(failed.message)
    return LocalLLMError(failed.message, status=failed.status)

"""Every ``LOCALLLM_*`` setting: typed, defaulted and described in one place.

The only module that reads ``LOCALLLM_*`` variables (tests/test_config.py checks);
``children.py`` copies the whole environment for child processes, and
``native/build_ffi.py`` reads ``LOCALLLM_LLAMA_PREFIX`` itself, at build time.

Settings are read each time an accessor is called, so tests (and a daemon started with
another environment) see current values.  A malformed value logs a warning and falls back
to the default.  The parsers are ``config_values.py``'s, re-exported as ``config.X``.

Where Ollama has a variable of the same meaning, it is read when ours is unset, the way
Ollama reads it (``ollama_env.py``); ``ollama_fallbacks`` and ``ollama_ignored`` say which
were used and which mean nothing here.  ``REGISTRY`` feeds ``serve --help`` and the docs.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from localllm.config_values import (  # re-exported: config.X is how callers read them
    CPU_REPACK_VALUES as CPU_REPACK_VALUES,
    DEFAULT_PORT as DEFAULT_PORT,
    FLASH_ATTENTION_VALUES as FLASH_ATTENTION_VALUES,
    KV_TYPES as KV_TYPES,
    LLM_LIBRARY_DEVICES as LLM_LIBRARY_DEVICES,
    TRACE as TRACE,
    CpuRepack as CpuRepack,
    FlashAttention as FlashAttention,
    KVType as KVType,
    LLMLibrary as LLMLibrary,
    StepBudget as StepBudget,
    parse_bool as parse_bool,
    parse_cpu_repack as parse_cpu_repack,
    parse_debug_level as parse_debug_level,
    parse_duration as parse_duration,
    parse_engine_spec as parse_engine_spec,
    parse_fetch_mode as parse_fetch_mode,
    parse_flash_attention as parse_flash_attention,
    parse_host as parse_host,
    parse_kv_type as parse_kv_type,
    parse_list as parse_list,
    parse_llm_library as parse_llm_library,
    parse_load_timeout as parse_load_timeout,
    parse_log_format as parse_log_format,
    parse_nonneg_int as parse_nonneg_int,
    parse_ollama_llm_library as parse_ollama_llm_library,
    parse_pixels as parse_pixels,
    parse_prompt_cache as parse_prompt_cache,
    parse_registry as parse_registry,
    parse_size as parse_size,
    parse_step_budget as parse_step_budget,
    parse_str as parse_str,
)
from localllm.ollama_env import IGNORED, debug_level, go_bool, go_uint

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: its parser, default and a one-line description."""

    name: str
    parse: Callable[[str], T]
    default: T
    description: str
    # Ollama's variable of the same meaning, read when ours is unset (a copied setup works).
    ollama: str = ""
    # How Ollama reads its variable where that differs from ``parse`` (Go's booleans, where
    # other text means true; levels; bytes only), so a copied setup means what it did there.
    ollama_parse: Callable[[str], T] | None = None

    def source(self) -> tuple[str, str] | None:
        """(variable, value) this setting comes from, or None when it is the default."""
        for var in (self.name, self.ollama):
            raw = os.environ.get(var) if var else None
            if raw is None:
                continue
            # Ollama trims spaces, then quotes (a compose file's OLLAMA_X="1" keeps them).
            text = raw.strip().strip("\"'") if var == self.ollama else raw.strip()
            if text:
                return var, text
        return None

    def get(self) -> T:
        src = self.source()
        if src is None:
            return self.default
        var, raw = src
        parse = self.ollama_parse if var == self.ollama and self.ollama_parse else self.parse
        try:
            return parse(raw)
        except ValueError as exc:
            log.warning("ignoring %s=%r (%s); using %r", var, raw, exc, self.default)
            return self.default


def ollama_fallbacks() -> list[tuple[str, str]]:
    """(our setting, Ollama variable) for each setting now taken from an OLLAMA_* variable."""
    return [(st.name, src[0]) for st in REGISTRY if (src := st.source()) and src[0] == st.ollama]


def ollama_ignored() -> list[tuple[str, str]]:
    """(variable, why) for each Ollama variable that is set but means nothing here."""
    return [(var, why) for var, why in IGNORED.items() if os.environ.get(var, "").strip()]


def log_level() -> int:
    """The ``logging`` level LOCALLLM_DEBUG asks for, stepping as Ollama's slog levels: 0 INFO,
    1 DEBUG, 2+ TRACE, each step below 0 one quieter (-1 WARNING, as OLLAMA_DEBUG=-1 is WARN)."""
    level = DEBUG.get()
    return TRACE if level >= 2 else logging.INFO - 10 * level


HOST = Setting(
    "LOCALLLM_HOST",
    parse_host,
    ("127.0.0.1", DEFAULT_PORT),
    "Address the daemon binds to and clients connect to (host[:port]).",
    ollama="OLLAMA_HOST",
)
HOME = Setting(
    "LOCALLLM_HOME",
    parse_str,
    "",
    "Root folder for everything localllm writes (models, logs, chats); "
    "default: the platform's data directory.",
)
MODELS = Setting(
    "LOCALLLM_MODELS",
    parse_str,
    "",
    "Model store folder (blobs/ and manifests/); default: <home>/models.",
    ollama="OLLAMA_MODELS",
)
ORIGINS: Setting[list[str]] = Setting(
    "LOCALLLM_ORIGINS",
    parse_list,
    [],
    "Extra CORS origins allowed to call the API (comma-separated).",
    ollama="OLLAMA_ORIGINS",
)
KEEP_ALIVE = Setting(
    "LOCALLLM_KEEP_ALIVE",
    parse_duration,
    300.0,
    "How long an idle model stays loaded (duration; negative = forever).",
    ollama="OLLAMA_KEEP_ALIVE",
)
NUM_PARALLEL = Setting(
    "LOCALLLM_NUM_PARALLEL",
    parse_nonneg_int,
    4,
    "Concurrent sequences (slots) per loaded model.",
    ollama="OLLAMA_NUM_PARALLEL",
)
MAX_LOADED_MODELS = Setting(
    "LOCALLLM_MAX_LOADED_MODELS",
    parse_nonneg_int,
    0,
    "Most models loaded at once (0 = 3 per GPU, 3 on CPU).",
    ollama="OLLAMA_MAX_LOADED_MODELS",
)
MAX_LOADED_PER_GPU = 3  # what MAX_LOADED_MODELS=0 allows per GPU (and on a CPU-only machine)
MAX_QUEUE = Setting(
    "LOCALLLM_MAX_QUEUE",
    parse_nonneg_int,
    512,
    "Pending requests allowed before the daemon answers 503.",
    ollama="OLLAMA_MAX_QUEUE",
    ollama_parse=go_uint,
)
CONTEXT_LENGTH = Setting(
    "LOCALLLM_CONTEXT_LENGTH",
    parse_nonneg_int,
    0,
    "Default context length (0 = chosen from available memory).",
    ollama="OLLAMA_CONTEXT_LENGTH",
)
FLASH_ATTENTION: Setting[FlashAttention] = Setting(
    "LOCALLLM_FLASH_ATTENTION",
    parse_flash_attention,
    "auto",
    "Flash attention: on, off or auto.",
    ollama="OLLAMA_FLASH_ATTENTION",
)
KV_CACHE_TYPE: Setting[KVType] = Setting(
    "LOCALLLM_KV_CACHE_TYPE",
    parse_kv_type,
    "f16",
    "KV cache type: f16, q8_0, q4_0 or f32 (quantized ones need flash attention, else f16).",
    ollama="OLLAMA_KV_CACHE_TYPE",
)
LOAD_TIMEOUT = Setting(
    "LOCALLLM_LOAD_TIMEOUT",
    parse_load_timeout,
    300.0,
    "How long a model load may go without progress (more of the file read, more memory "
    "filled, a log line) before it is abandoned, as Ollama's: a slow disk is not a stall. "
    "0 or negative = no limit.",
    ollama="OLLAMA_LOAD_TIMEOUT",
)
RUNNER_TIMEOUT = Setting(
    "LOCALLLM_RUNNER_TIMEOUT",
    parse_duration,
    30.0,
    "How long a runner may show no sign of life before the daemon kills it, fails its requests "
    "and reloads the model (0 or negative = never). A runner's thread reports every second even "
    "in a long load or step: silence means stopped or frozen; 30 s leaves room to swap.",
)
GPU_OVERHEAD = Setting(
    "LOCALLLM_GPU_OVERHEAD",
    parse_size,
    0,
    "Memory of each GPU kept free for other programs, e.g. 1GiB or bytes; the planner "
    "offloads less and picks a shorter automatic context.",
    ollama="OLLAMA_GPU_OVERHEAD",
    ollama_parse=go_uint,
)
SCHED_SPREAD = Setting(
    "LOCALLLM_SCHED_SPREAD",
    parse_bool,
    False,
    "Spread every model over all GPUs by their free memory, even when fewer would hold it.",
    ollama="OLLAMA_SCHED_SPREAD",
    ollama_parse=go_bool("OLLAMA_SCHED_SPREAD"),
)
NOPRUNE = Setting(
    "LOCALLLM_NOPRUNE",
    parse_bool,
    False,
    "Keep blobs no model uses: at start-up, and when a pull or create replaces a model "
    "('rm' still removes the deleted model's own, as Ollama does).",
    ollama="OLLAMA_NOPRUNE",
    ollama_parse=go_bool("OLLAMA_NOPRUNE"),
)
DEBUG = Setting(
    "LOCALLLM_DEBUG",
    parse_debug_level,
    0,
    "Log level: 1 or true = debug (each runner's llama.cpp log, the body of a "
    "request that fails), 2 = trace (also every HTTP connection event and ASGI "
    "message), -1 = warnings and errors only, -2 = errors only.",
    ollama="OLLAMA_DEBUG",
    ollama_parse=debug_level,
)
NOHISTORY = Setting(
    "LOCALLLM_NOHISTORY",
    parse_bool,
    False,
    "'localllm run' reads its line history but adds nothing to the file (as '/set nohistory').",
    ollama="OLLAMA_NOHISTORY",
    ollama_parse=go_bool("OLLAMA_NOHISTORY"),
)
LLM_LIBRARY: Setting[LLMLibrary] = Setting(
    "LOCALLLM_LLM_LIBRARY",
    parse_llm_library,
    "",
    "Plan models only on this library's GPUs: cuda, rocm, vulkan, metal, or cpu (no layer on "
    "any GPU); Ollama's names (cuda_v12, rocm_v6, cpu_avx2) are read too; default: every device.",
    ollama="OLLAMA_LLM_LIBRARY",
    ollama_parse=parse_ollama_llm_library,
)
CPU_REPACK: Setting[CpuRepack] = Setting(
    "LOCALLLM_CPU_REPACK",
    parse_cpu_repack,
    "auto",
    "Repacked copies of the weights the CPU computes with (llama.cpp's extra CPU buffer "
    "types: AMX, CPU_REPACK; llama-bench's --repack): on, off, or auto, which first runs "
    "each type's kernels on a small product in a throwaway process (once per boot) and "
    "leaves out a type that crashes or computes wrong there, as AMX does where ggml was "
    "built by a compiler that drops its tile setup (GCC 12). off if runners crash with "
    "SIGILL or SIGSEGV on a CPU with AMX.",
)
API_KEY = Setting(
    "LOCALLLM_API_KEY",
    parse_str,
    "",
    "When set, every endpoint but / and /health needs the key, as "
    "'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
)
SHUTDOWN_GRACE = Setting(
    "LOCALLLM_SHUTDOWN_GRACE",
    parse_duration,
    30.0,
    "Seconds in-flight generations get to finish on shutdown.",
)
NUM_THREAD = Setting(
    "LOCALLLM_NUM_THREAD", parse_nonneg_int, 0, "CPU threads for inference (0 = physical cores)."
)
DRAFT_GATE = Setting(
    "LOCALLLM_DRAFT_GATE",
    parse_bool,
    True,
    "Default speculation (prompt lookup, 'auto') drafts only the tokens whose chance beats "
    "what their rows cost the batch, from measured step times, and stretches no step past "
    "1.5x: none on a busy compute-bound server. false = draft as each request's text allows.",
)
STEP_BUDGET = Setting(
    "LOCALLLM_STEP_BUDGET",
    parse_step_budget,
    StepBudget(),
    "How much one engine step may carry while requests are generating: N tokens (their "
    "own plus new prompts', prompts getting at least a quarter), or Nms, a step time the "
    "engine keeps to from its measured step costs. Lower keeps running streams' "
    "inter-token latency steady while prompts arrive, at the cost of the new prompts' "
    "time to first token; 0 = prompts take a whole batch (2048 tokens), as llama-server.",
)
PROMPT_CACHE = Setting(
    "LOCALLLM_PROMPT_CACHE",
    parse_prompt_cache,
    -1,
    "Host memory per loaded model for the cached prompts of idle slots, e.g. 2GiB: when a "
    "request starts they leave the KV cache (which every step attends over) and come back "
    "when a prompt continues them, as llama-server's --cache-ram. auto or -1 (the default) = "
    "as much as the model's KV cache, at most 8 GiB; 0 = off (idle slots keep their cells "
    "in the KV cache).",
)
PROMPT_CACHE_DISK = Setting(
    "LOCALLLM_PROMPT_CACHE_DISK",
    parse_size,
    4 << 30,
    "Disk space for cached prompts, shared by all models, e.g. 10GiB: what the prompt cache "
    "holds in memory is also written to prompts/ in the cache folder (LOCALLLM_CACHE; with "
    "only LOCALLLM_HOME set, <home>/cache), keyed by model, adapters and tokens, so a model "
    "reload, an idle unload or a daemon restart does not evaluate a long shared prefix "
    "again; the least recently used go first. Needs LOCALLLM_PROMPT_CACHE on; 0 = off.",
)
ALLOWED_PATHS: Setting[list[str]] = Setting(
    "LOCALLLM_ALLOWED_PATHS",
    parse_list,
    [],
    "Folders (comma-separated) the daemon may read model files from when /api/create names a "
    "path in 'from'; the model store is always allowed. Clients normally upload files instead.",
)
MAX_BODY = Setting(
    "LOCALLLM_MAX_BODY",
    parse_size,
    64 << 20,
    "Largest request body (JSON requests; images are base64 inside them), "
    "e.g. 64MiB; 0 = no limit.",
)
MAX_BLOB_SIZE = Setting(
    "LOCALLLM_MAX_BLOB_SIZE",
    parse_size,
    1 << 40,
    "Largest file accepted by POST /api/blobs (model uploads), e.g. 200G; 0 = no limit.",
)
MIN_FREE_DISK = Setting(
    "LOCALLLM_MIN_FREE_DISK",
    parse_size,
    1 << 30,
    "Free space the model store's disk must keep for /health/ready to "
    "answer 200, e.g. 1GiB; 0 = no check.",
)
MAX_DOWNLOAD_RATE = Setting(
    "LOCALLLM_MAX_DOWNLOAD_RATE",
    parse_size,
    0,
    "Cap on the download rate of all pulls together, in bytes/s (5M = 5 MiB/s); 0 = none.",
)
LOG_FORMAT = Setting(
    "LOCALLLM_LOG_FORMAT",
    parse_log_format,
    "text",
    "Daemon log lines: text, or json (one object per line, with request ids).",
)
DEBUG_REQUESTS = Setting(
    "LOCALLLM_DEBUG_REQUESTS",
    parse_str,
    "",
    "Folder where each refused request (a 400) is written with its body, to attach to a bug "
    "report: 1 MiB of body each, the newest 50 kept (private files); off when empty.",
)
BACKENDS = Setting(
    "LOCALLLM_BACKENDS",
    parse_str,
    "",
    "Folder of ggml backend plugins (CUDA, Vulkan, ROCm, RPC), one subfolder per "
    "ggml version; default: <home>/backends.",
)
CACHE = Setting(
    "LOCALLLM_CACHE",
    parse_str,
    "",
    "Cache folder for the llama.cpp source and backend build trees; "
    "default: the platform's cache directory.",
)


_HF_REPO_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}")


def parse_hf_repo(raw: str) -> str:
    if not _HF_REPO_RE.fullmatch(raw) or ".." in raw:
        raise ValueError("expected a Hugging Face repo, user/name")
    return raw


CATALOG_REPO = Setting(
    "LOCALLLM_CATALOG_REPO",
    parse_hf_repo,
    "localllm/catalog",
    "Hugging Face repo 'localllm catalog update' downloads catalog.toml from (used only "
    "if the catalog.toml.sig beside it verifies with a key localllm ships).",
)
BACKENDS_REPO = Setting(
    "LOCALLLM_BACKENDS_REPO",
    parse_hf_repo,
    "localllm/backends",
    "Hugging Face repo 'localllm backends get' (and 'doctor --fix') fetches "
    "prebuilt plugin packs from; a pack is installed only if its sha256 is in "
    "the table this release ships, or is given with --trust.",
)
OLLAMA_REGISTRY = Setting(
    "LOCALLLM_OLLAMA_REGISTRY",
    parse_registry,
    "https://registry.ollama.ai",
    "Ollama's registry, which 'pull' asks for names the catalogue lacks (qwen3.5, user/model) "
    "and for ollama://NAME; off = never asked.",
)
RPC_WORKERS: Setting[list[str]] = Setting(
    "LOCALLLM_RPC_WORKERS",
    parse_list,
    [],
    "ggml RPC workers (host:port, comma-separated) whose devices models may be placed on; "
    "see 'localllm worker'.",
)
LLAMA_PREFIX = Setting(
    "LOCALLLM_LLAMA_PREFIX",
    parse_str,
    "",
    "Prefix of a llama.cpp install (include/llama.h, lib/) to build the native "
    "module against instead of the core the install builds; at run time its lib/ is loaded first.",
)
CORE_CMAKE_ARGS = Setting(
    "LOCALLLM_CORE_CMAKE_ARGS",
    parse_str,
    "",
    "Extra cmake flags for the llama.cpp core that installing localllm compiles, e.g. "
    "-DGGML_NATIVE=OFF -DGGML_AVX2=ON for a core that other processors can run (the default "
    "is built for this one); read by the build only (native/core_build.py).",
)
RUNNER_ENGINE = Setting(
    "LOCALLLM_RUNNER_ENGINE",
    parse_engine_spec,
    "localllm.engine.engine:Engine",
    "For tests only: the engine class the runner child loads (module:Class), "
    "e.g. a fake one that provokes crashes and slow loads.",
)

# Image input limits (issue 14; the runner and daemon share them): images a request, bytes a
# file and a request (one runner frame, under 128 MiB), width x height, a side; from headers.
MAX_IMAGES, MAX_IMAGE_BYTES, MAX_IMAGES_BYTES = 16, 20 << 20, 48 << 20
MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE = 50_000_000, 16384
FETCH_IMAGE_URLS = Setting(
    "LOCALLLM_FETCH_IMAGE_URLS",
    parse_fetch_mode,
    "off",
    "Fetch http(s) image URLs sent in requests: 1 = public addresses only (no private or "
    "loopback address, redirects included; 10 s and 20 MiB per image), all = any address "
    "(a trusted network); off by default.",
)
MAX_REQUEST_PIXELS = Setting(
    "LOCALLLM_MAX_REQUEST_PIXELS",
    parse_pixels,
    100_000_000,
    "Pixels (width x height, summed) all the images of one request may declare, e.g. "
    "100000000 (two images at the 50-megapixel limit each, or eight 12-megapixel photos). "
    "The runner decodes one image at a time; this bounds the request's decoding work. "
    "The daemon and its runners read the same value.",
)

# Every setting above, in the order defined here (``serve --help``, docs/configuration.md).
REGISTRY: tuple[Setting[object], ...] = tuple(
    value for value in dict(globals()).values() if isinstance(value, Setting)
)


def max_loaded_models(n_gpus: int) -> int:
    """``LOCALLLM_MAX_LOADED_MODELS`` with 0 resolved: 3 per GPU, 3 on a CPU-only machine
    (the caller counts GPUs: ``hardware.detect`` runs a probe, which this module must not)."""
    return MAX_LOADED_MODELS.get() or MAX_LOADED_PER_GPU * max(n_gpus, 1)


def client_base_url() -> str:
    """The URL clients use to reach the daemon (0.0.0.0 binds are reached on loopback)."""
    host, port = HOST.get()
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"

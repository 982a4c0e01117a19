"""Every ``LOCALLLM_*`` setting: typed, defaulted and described in one place.

This is the only module that reads ``LOCALLLM_*`` variables (tests/test_config.py
checks); ``children.py`` copies the whole environment for child processes, and
``native/build_ffi.py`` reads ``LOCALLLM_LLAMA_PREFIX`` itself because it runs at
build time, before the package can be imported.

Settings are read from the environment lazily, each time an accessor is called,
so tests (and a daemon started with a different environment) see current values
and nothing is read at import time.  A malformed value logs a warning and falls
back to the default instead of stopping the daemon.

Values that requests and settings share have one parser here: the KV cache
types (``KV_TYPES``, ``parse_kv_type``) and flash attention
(``parse_flash_attention``).

Where Ollama has a variable of the same meaning, it is read when ours is unset,
the way Ollama reads it (``ollama_env.py``), so a copied Ollama service file
behaves as it did there; ``ollama_fallbacks`` and ``ollama_ignored`` say which
were used and which mean nothing here, for the start-up log and ``doctor``.

``REGISTRY`` feeds ``localllm serve --help`` and docs/configuration.md.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, cast, get_args

from localllm.ollama_env import GO_INT, IGNORED, debug_level, go_bool, go_uint

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PORT = 11434


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: its parser, default and a one-line description."""

    name: str
    parse: Callable[[str], T]
    default: T
    description: str
    # Ollama's variable of the same meaning, read when ours is unset, so an existing
    # Ollama setup (a service file, a shell profile) and its clients agree with us.
    ollama: str = ""
    # How Ollama reads its variable, where that differs from ``parse`` (Go's booleans,
    # where any other text means true; levels; bytes only): a copied setup means what it
    # meant to Ollama.  None: ``parse`` reads both.
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


def _bool(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected a boolean (1/0, true/false)")


def _int(raw: str) -> int:
    return int(raw, 10)


def _nonneg_int(raw: str) -> int:
    value = int(raw, 10)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _str(raw: str) -> str:
    return raw


@dataclass(frozen=True)
class StepBudget:
    """LOCALLLM_STEP_BUDGET: tokens per step, or a step time in ms (both 0: no budget)."""

    tokens: int = 0
    ms: float = 0.0

    def __str__(self) -> str:
        return f"{self.ms:g}ms" if self.ms else str(self.tokens)


def _step_budget(raw: str) -> StepBudget:
    text = raw.strip().lower()
    if text.endswith("ms"):
        ms = float(text[:-2])
        if not 0 < ms < 3_600_000:
            raise ValueError("must be a positive number of milliseconds")
        return StepBudget(ms=ms)
    return StepBudget(tokens=_nonneg_int(text))


def _list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
               "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def parse_size(raw: str) -> int:
    """Bytes from ``1048576``, ``64MiB``, ``2g`` (binary units; 0 = no limit)."""
    match = _SIZE_RE.fullmatch(raw.strip().lower())
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ValueError(f"invalid size {raw!r} (e.g. 64MiB, 200G)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def _prompt_cache(raw: str) -> int:
    """LOCALLLM_PROMPT_CACHE: ``auto`` or -1 (as large as the KV cache), else a size; 0 = off."""
    return -1 if raw.strip().lower() in ("auto", "-1") else parse_size(raw)


KVType = Literal["f16", "q8_0", "q4_0", "f32"]
# The KV cache types localllm offers: what the runner's LoadOptions, the planner's
# memory arithmetic (scheduler/estimate.py) and the native shim all accept.
# Quantized types need flash attention (llama.cpp quantizes V only with it).
KV_TYPES: tuple[KVType, ...] = get_args(KVType)

FlashAttention = Literal["auto", "on", "off"]
FLASH_ATTENTION_VALUES: tuple[FlashAttention, ...] = get_args(FlashAttention)
_FLASH_ON = ("on", "1", "true", "yes")
_FLASH_OFF = ("off", "0", "false", "no")


def parse_kv_type(raw: str) -> KVType:
    """``"Q8_0"`` -> ``"q8_0"``; anything outside ``KV_TYPES`` is a ``ValueError``."""
    low = raw.strip().lower()
    for kv in KV_TYPES:
        if low == kv:
            return kv
    raise ValueError(f"expected a KV cache type: {', '.join(KV_TYPES)}")


def parse_flash_attention(raw: str) -> FlashAttention:
    """``on``/``off``/``auto``; booleans (``1``, ``true``, ``no``, ...) mean on or off."""
    low = raw.strip().lower()
    if low == "auto":
        return "auto"
    if low in _FLASH_ON:
        return "on"
    if low in _FLASH_OFF:
        return "off"
    raise ValueError("expected on, off or auto")


def _engine_spec(raw: str) -> str:
    module, sep, attr = raw.partition(":")
    if not sep or not module or not attr:
        raise ValueError("expected module:Class")
    return raw


def _log_format(raw: str) -> str:
    low = raw.lower()
    if low not in ("text", "json"):
        raise ValueError("expected text or json")
    return low


_DURATION_RE = re.compile(r"(-?\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(raw: str | int | float) -> float:
    """Parse a keep-alive style duration into seconds.

    Accepts a number (seconds) or a Go duration string such as ``"5m"``,
    ``"1h30m"`` or ``"-1s"``.  A negative value means "forever" and is returned
    as ``math.inf``.
    """
    if isinstance(raw, bool):
        raise ValueError("duration must be a number or a duration string")
    if isinstance(raw, (int, float)):
        seconds = float(raw)
    else:
        text = raw.strip()
        try:
            seconds = float(text)
        except ValueError:
            sign = -1.0 if text.startswith("-") else 1.0
            body = text.lstrip("+-")
            pos = 0
            total = 0.0
            for match in _DURATION_RE.finditer(body):
                if match.start() != pos:
                    break
                total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
                pos = match.end()
            if pos != len(body) or not body:
                raise ValueError(f"invalid duration {raw!r}") from None
            seconds = sign * total
    if math.isnan(seconds):
        raise ValueError("duration is NaN")
    if seconds < 0:
        return math.inf
    return seconds


def _load_timeout(raw: str) -> float:
    """A duration; 0 or negative = no limit (as Ollama's OLLAMA_LOAD_TIMEOUT)."""
    seconds = parse_duration(raw)
    return math.inf if seconds <= 0 else seconds


TRACE = 5  # the logging level of LOCALLLM_DEBUG=2, below DEBUG (Ollama's TRACE)


def parse_debug_level(raw: str) -> int:
    """LOCALLLM_DEBUG: a boolean (on = 1) or a level: 1 debug, 2 trace, -1 warnings only."""
    low = raw.strip().lower()
    if low in ("true", "yes", "on"):
        return 1
    if low in ("false", "no", "off"):
        return 0
    if low == "trace":
        return 2
    if not GO_INT.fullmatch(low):
        raise ValueError("expected a boolean or a level: 1 (debug), 2 (trace), -1 (warnings)")
    return int(low, 10)


def log_level() -> int:
    """The ``logging`` level LOCALLLM_DEBUG asks for, stepping as Ollama's slog levels do.

    0 INFO, 1 DEBUG, 2 and more TRACE; each step below 0 is one level quieter
    (-1 WARNING, -2 ERROR, -3 CRITICAL), as OLLAMA_DEBUG=-1 is Ollama's WARN.
    """
    level = DEBUG.get()
    return TRACE if level >= 2 else logging.INFO - 10 * level


LLMLibrary = Literal["", "cuda", "rocm", "vulkan", "metal", "cpu"]
# hardware.Device.library of each; RPC devices are not a library choice (LOCALLLM_RPC_WORKERS).
LLM_LIBRARY_DEVICES: dict[str, tuple[str, ...]] = {
    "cuda": ("CUDA",), "rocm": ("ROCm", "HIP"), "vulkan": ("Vulkan",), "metal": ("Metal",),
    "cpu": (),
}


def parse_llm_library(raw: str) -> LLMLibrary:
    """``cuda``, ``rocm``, ``vulkan``, ``metal``, ``cpu``, or ``auto`` ("").

    Ollama's library folder names mean the same: ``cuda_v12``, ``cuda_v13`` and
    ``cuda_jetpack6`` are CUDA, ``rocm_v6`` (and ``hip``) ROCm, ``cpu_avx2`` the CPU;
    ``mlx_*`` names Ollama's MLX engine, which its GGML discovery ignores: automatic.
    """
    low = raw.strip().lower()
    if low in ("", "auto") or low.startswith("mlx_"):
        return ""
    if low == "hip" or low.startswith("hip_"):
        return "rocm"
    for lib in ("cuda", "rocm", "vulkan", "metal", "cpu"):
        if low == lib or low.startswith(lib + "_"):
            return cast(LLMLibrary, lib)
    raise ValueError("expected auto, cuda, rocm, vulkan, metal or cpu")


def _ollama_llm_library(raw: str) -> LLMLibrary:
    """A name with no library here leaves Ollama with none of its GPU libraries: the CPU."""
    try:
        return parse_llm_library(raw)
    except ValueError:
        log.warning("OLLAMA_LLM_LIBRARY=%r names no GPU library (cuda, rocm, vulkan): as "
                    "Ollama, only the CPU is used", raw)
        return "cpu"


CpuRepack = Literal["auto", "on", "off"]
CPU_REPACK_VALUES: tuple[CpuRepack, ...] = get_args(CpuRepack)


def parse_cpu_repack(raw: str) -> CpuRepack:
    """``auto``, ``on`` or ``off``; booleans (``1``, ``false``...) mean on or off."""
    low = raw.strip().lower()
    if low == "auto":
        return "auto"
    if low in _FLASH_ON:
        return "on"
    if low in _FLASH_OFF:
        return "off"
    raise ValueError("expected auto, on or off")


def parse_host(raw: str) -> tuple[str, int]:
    """Split ``LOCALLLM_HOST`` (``host[:port]``, optional scheme) into host and port."""
    text = raw.strip()
    scheme = "http"
    if "://" in text:
        scheme, text = text.split("://", 1)
    text = text.rstrip("/")
    default_port = DEFAULT_PORT
    if "://" in raw:
        default_port = {"http": 80, "https": 443}.get(scheme, DEFAULT_PORT)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else default_port
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = int(port_text) if port_text else default_port
    else:
        host, port = text, default_port
    if not host:
        host = "127.0.0.1"
    if not 0 < port < 65536:
        raise ValueError(f"port out of range: {port}")
    return host, port


HOST = Setting("LOCALLLM_HOST", parse_host, ("127.0.0.1", DEFAULT_PORT),
               "Address the daemon binds to and clients connect to (host[:port]).",
               ollama="OLLAMA_HOST")
HOME = Setting("LOCALLLM_HOME", _str, "",
               "Root folder for everything localllm writes (models, logs, chats); "
               "default: the platform's data directory.")
MODELS = Setting("LOCALLLM_MODELS", _str, "",
                 "Model store folder (blobs/ and manifests/); default: <home>/models.",
                 ollama="OLLAMA_MODELS")
ORIGINS: Setting[list[str]] = Setting("LOCALLLM_ORIGINS", _list, [],
                  "Extra CORS origins allowed to call the API (comma-separated).",
                  ollama="OLLAMA_ORIGINS")
KEEP_ALIVE = Setting("LOCALLLM_KEEP_ALIVE", parse_duration, 300.0,
                     "How long an idle model stays loaded (duration; negative = forever).",
                     ollama="OLLAMA_KEEP_ALIVE")
NUM_PARALLEL = Setting("LOCALLLM_NUM_PARALLEL", _nonneg_int, 4,
                       "Concurrent sequences (slots) per loaded model.",
                       ollama="OLLAMA_NUM_PARALLEL")
MAX_LOADED_MODELS = Setting("LOCALLLM_MAX_LOADED_MODELS", _nonneg_int, 0,
                            "Most models loaded at once (0 = 3 per GPU, 3 on CPU).",
                            ollama="OLLAMA_MAX_LOADED_MODELS")
MAX_LOADED_PER_GPU = 3  # what MAX_LOADED_MODELS=0 allows per GPU (and on a CPU-only machine)
MAX_QUEUE = Setting("LOCALLLM_MAX_QUEUE", _nonneg_int, 512,
                    "Pending requests allowed before the daemon answers 503.",
                    ollama="OLLAMA_MAX_QUEUE", ollama_parse=go_uint)
CONTEXT_LENGTH = Setting("LOCALLLM_CONTEXT_LENGTH", _nonneg_int, 0,
                         "Default context length (0 = chosen from available memory).",
                         ollama="OLLAMA_CONTEXT_LENGTH")
FLASH_ATTENTION: Setting[FlashAttention] = Setting(
    "LOCALLLM_FLASH_ATTENTION", parse_flash_attention, "auto",
    "Flash attention: on, off or auto.", ollama="OLLAMA_FLASH_ATTENTION")
KV_CACHE_TYPE: Setting[KVType] = Setting(
    "LOCALLLM_KV_CACHE_TYPE", parse_kv_type, "f16",
    "KV cache type: f16, q8_0, q4_0 or f32 (quantized types need flash attention; "
    "with it off, f16 is used).", ollama="OLLAMA_KV_CACHE_TYPE")
LOAD_TIMEOUT = Setting("LOCALLLM_LOAD_TIMEOUT", _load_timeout, 300.0,
                       "How long a model load may go without progress (more of the file read, "
                       "more memory filled, a log line) before it is abandoned, as Ollama's: "
                       "a slow disk is not a stall. 0 or negative = no limit.",
                       ollama="OLLAMA_LOAD_TIMEOUT")
RUNNER_TIMEOUT = Setting(
    "LOCALLLM_RUNNER_TIMEOUT", parse_duration, 30.0,
    "How long a runner may show no sign of life before the daemon kills it, fails its "
    "requests and reloads the model on the next one (0 or negative = never).  A thread of the "
    "runner reports every second even during a long load or step, so silence means the "
    "process is stopped or frozen, not busy; 30 s leaves room for a machine that swaps.")
GPU_OVERHEAD = Setting("LOCALLLM_GPU_OVERHEAD", parse_size, 0,
                       "Memory of each GPU kept free for other programs, e.g. 1GiB or bytes; "
                       "the planner offloads less and picks a shorter automatic context.",
                       ollama="OLLAMA_GPU_OVERHEAD", ollama_parse=go_uint)
SCHED_SPREAD = Setting("LOCALLLM_SCHED_SPREAD", _bool, False,
                       "Spread every model over all GPUs in proportion to their free memory, "
                       "even when fewer GPUs would hold it.",
                       ollama="OLLAMA_SCHED_SPREAD",
                       ollama_parse=go_bool("OLLAMA_SCHED_SPREAD"))
NOPRUNE = Setting("LOCALLLM_NOPRUNE", _bool, False,
                  "Keep blobs no model uses: at start-up, and when a pull or create replaces a "
                  "model ('rm' still removes the deleted model's own, as Ollama does).",
                  ollama="OLLAMA_NOPRUNE", ollama_parse=go_bool("OLLAMA_NOPRUNE"))
DEBUG = Setting("LOCALLLM_DEBUG", parse_debug_level, 0,
                "Log level: 1 or true = debug (each runner's llama.cpp log, the body of a "
                "request that fails), 2 = trace (also every HTTP connection event and ASGI "
                "message), -1 = warnings and errors only, -2 = errors only.",
                ollama="OLLAMA_DEBUG", ollama_parse=debug_level)
NOHISTORY = Setting("LOCALLLM_NOHISTORY", _bool, False,
                    "'localllm run' reads its line history but adds nothing to the file "
                    "(as '/set nohistory').",
                    ollama="OLLAMA_NOHISTORY", ollama_parse=go_bool("OLLAMA_NOHISTORY"))
LLM_LIBRARY: Setting[LLMLibrary] = Setting(
    "LOCALLLM_LLM_LIBRARY", parse_llm_library, "",
    "Plan models only on this library's GPUs: cuda, rocm, vulkan, metal, or cpu (no layer on "
    "any GPU); Ollama's names (cuda_v12, rocm_v6, cpu_avx2) are read too; default: every "
    "device.",
    ollama="OLLAMA_LLM_LIBRARY", ollama_parse=_ollama_llm_library)
CPU_REPACK: Setting[CpuRepack] = Setting(
    "LOCALLLM_CPU_REPACK", parse_cpu_repack, "auto",
    "Repacked copies of the weights the CPU computes with (llama.cpp's extra CPU buffer "
    "types: AMX, CPU_REPACK; llama-bench's --repack): on, off, or auto, which first runs "
    "each type's kernels on a small product in a throwaway process (once per boot) and "
    "leaves out a type that crashes or computes wrong there, as AMX does where ggml was "
    "built by a compiler that drops its tile setup (GCC 12). off if runners crash with "
    "SIGILL or SIGSEGV on a CPU with AMX.")
API_KEY = Setting("LOCALLLM_API_KEY", _str, "",
                  "When set, every endpoint but / and /health needs the key, as "
                  "'Authorization: Bearer <key>' or 'x-api-key: <key>'.")
SHUTDOWN_GRACE = Setting("LOCALLLM_SHUTDOWN_GRACE", parse_duration, 30.0,
                         "Seconds in-flight generations get to finish on shutdown.")
NUM_THREAD = Setting("LOCALLLM_NUM_THREAD", _nonneg_int, 0,
                     "CPU threads for inference (0 = physical cores).")
STEP_BUDGET = Setting(
    "LOCALLLM_STEP_BUDGET", _step_budget, StepBudget(),
    "How much one engine step may carry while requests are generating: N tokens (their "
    "own plus new prompts', prompts getting at least a quarter), or Nms, a step time the "
    "engine keeps to from its measured step costs. Lower keeps running streams' "
    "inter-token latency steady while prompts arrive, at the cost of the new prompts' "
    "time to first token; 0 = prompts take a whole batch (2048 tokens), as llama-server.")
PROMPT_CACHE = Setting(
    "LOCALLLM_PROMPT_CACHE", _prompt_cache, -1,
    "Host memory per loaded model for the cached prompts of idle slots, e.g. 2GiB: when a "
    "request starts they leave the KV cache (which every step attends over) and come back "
    "when a prompt continues them, as llama-server's --cache-ram. auto or -1 (the default) = "
    "as much as the model's KV cache, at most 8 GiB; 0 = off (idle slots keep their cells "
    "in the KV cache).")
PROMPT_CACHE_DISK = Setting(
    "LOCALLLM_PROMPT_CACHE_DISK", parse_size, 4 << 30,
    "Disk space for cached prompts, shared by all models, e.g. 10GiB: what the prompt cache "
    "holds in memory is also written to prompts/ in the cache folder (LOCALLLM_CACHE; with "
    "only LOCALLLM_HOME set, <home>/cache), keyed by model, adapters and tokens, so a model "
    "reload, an idle unload or a daemon restart does not evaluate a long shared prefix "
    "again; the least recently used go first. Needs LOCALLLM_PROMPT_CACHE on; 0 = off.")
ALLOWED_PATHS: Setting[list[str]] = Setting(
    "LOCALLLM_ALLOWED_PATHS", _list, [],
    "Folders (comma-separated) the daemon may read model files from when /api/create names a "
    "path in 'from'; the model store is always allowed. Clients normally upload files instead.")
MAX_BODY = Setting("LOCALLLM_MAX_BODY", parse_size, 64 << 20,
                   "Largest request body (JSON requests; images are base64 inside them), "
                   "e.g. 64MiB; 0 = no limit.")
MAX_BLOB_SIZE = Setting("LOCALLLM_MAX_BLOB_SIZE", parse_size, 1 << 40,
                        "Largest file accepted by POST /api/blobs (model uploads), e.g. 200G; "
                        "0 = no limit.")
MIN_FREE_DISK = Setting("LOCALLLM_MIN_FREE_DISK", parse_size, 1 << 30,
                        "Free space the model store's disk must keep for /health/ready to "
                        "answer 200, e.g. 1GiB; 0 = no check.")
LOG_FORMAT = Setting("LOCALLLM_LOG_FORMAT", _log_format, "text",
                     "Daemon log lines: text, or json (one object per line, with request ids).")
BACKENDS = Setting("LOCALLLM_BACKENDS", _str, "",
                    "Folder of ggml backend plugins (CUDA, Vulkan, ROCm, RPC), one subfolder per "
                    "ggml version; default: <home>/backends.")
CACHE = Setting("LOCALLLM_CACHE", _str, "",
                 "Cache folder for the llama.cpp source and backend build trees; "
                 "default: the platform's cache directory.")


_HF_REPO_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}")


def parse_hf_repo(raw: str) -> str:
    if not _HF_REPO_RE.fullmatch(raw) or ".." in raw:
        raise ValueError("expected a Hugging Face repo, user/name")
    return raw


CATALOG_REPO = Setting("LOCALLLM_CATALOG_REPO", parse_hf_repo, "localllm/catalog",
                       "Hugging Face repo 'localllm catalog update' downloads catalog.toml from "
                       "(checked against the catalog.toml.sha256 beside it).")
BACKENDS_REPO = Setting("LOCALLLM_BACKENDS_REPO", parse_hf_repo, "localllm/backends",
                        "Hugging Face repo 'localllm backends get' (and 'doctor --fix') fetches "
                        "prebuilt plugin packs from; a pack is installed only if its sha256 is in "
                        "the table this release ships, or is given with --trust.")
RPC_WORKERS: Setting[list[str]] = Setting(
    "LOCALLLM_RPC_WORKERS", _list, [],
    "ggml RPC workers (host:port, comma-separated) whose devices models may be placed on; "
    "see 'localllm worker'.")
LLAMA_PREFIX = Setting("LOCALLLM_LLAMA_PREFIX", _str, "",
                       "Prefix of a llama.cpp install (include/llama.h, lib/) to build the native "
                       "module against instead of llama-cpp-python's; at run time its lib/ is "
                       "loaded first.")
RUNNER_ENGINE = Setting("LOCALLLM_RUNNER_ENGINE", _engine_spec, "localllm.engine.engine:Engine",
                        "For tests only: the engine class the runner child loads (module:Class), "
                        "e.g. a fake one that provokes crashes and slow loads.")

# Image input limits (issue 14): constants, not settings, because the runner and the
# daemon must agree on them.  The byte limits keep a request's images (base64 in one
# runner frame, see runner/protocol.py) well under the 128 MiB frame cap; the pixel
# limits are checked from the file header before anything is decoded (localllm.images.info).
MAX_IMAGES = 16  # per request
MAX_IMAGE_BYTES = 20 << 20  # one encoded image file
MAX_IMAGES_BYTES = 48 << 20  # all of a request's images together
MAX_IMAGE_PIXELS = 50_000_000  # width * height (a decoded RGB copy is 3 bytes a pixel)
MAX_IMAGE_SIDE = 16384  # pixels, either side



def _fetch_mode(raw: str) -> str:
    if raw.lower() == "all":
        return "all"
    return "public" if _bool(raw) else "off"


FETCH_IMAGE_URLS = Setting(
    "LOCALLLM_FETCH_IMAGE_URLS", _fetch_mode, "off",
    "Fetch http(s) image URLs sent in requests: 1 = public addresses only (no private or "
    "loopback address, redirects included; 10 s and 20 MiB per image), all = any address "
    "(a trusted network); off by default.")


def _pixels(raw: str) -> int:
    value = int(raw.replace("_", ""), 10)
    if value < 1:
        raise ValueError("must be a positive number of pixels")
    return value


MAX_REQUEST_PIXELS = Setting(
    "LOCALLLM_MAX_REQUEST_PIXELS", _pixels, 100_000_000,
    "Pixels (width x height, summed) all the images of one request may declare, e.g. "
    "100000000 (two images at the 50-megapixel limit each, or eight 12-megapixel photos). "
    "The runner decodes one image at a time; this bounds the request's decoding work. "
    "The daemon and its runners read the same value.")

REGISTRY: tuple[Setting[object], ...] = (
    HOST, HOME, MODELS, ORIGINS, KEEP_ALIVE, NUM_PARALLEL, MAX_LOADED_MODELS, MAX_QUEUE,
    CONTEXT_LENGTH, FLASH_ATTENTION, KV_CACHE_TYPE, LOAD_TIMEOUT, RUNNER_TIMEOUT,
    GPU_OVERHEAD, SCHED_SPREAD, LLM_LIBRARY, CPU_REPACK, NOPRUNE, DEBUG, NOHISTORY, API_KEY,
    SHUTDOWN_GRACE, NUM_THREAD, ALLOWED_PATHS, MAX_BODY, MAX_BLOB_SIZE, MIN_FREE_DISK,
    LOG_FORMAT, BACKENDS, CACHE, CATALOG_REPO, BACKENDS_REPO, RPC_WORKERS,
    LLAMA_PREFIX, RUNNER_ENGINE, FETCH_IMAGE_URLS, STEP_BUDGET, PROMPT_CACHE,
    PROMPT_CACHE_DISK, MAX_REQUEST_PIXELS,
)  # type: ignore[assignment]


def max_loaded_models(n_gpus: int) -> int:
    """``LOCALLLM_MAX_LOADED_MODELS`` with 0 resolved: 3 per GPU, 3 on a CPU-only machine.

    The caller counts the GPUs (``hardware.detect`` runs a probe subprocess, which
    this module must never do).
    """
    return MAX_LOADED_MODELS.get() or MAX_LOADED_PER_GPU * max(n_gpus, 1)


def client_base_url() -> str:
    """The URL clients use to reach the daemon (0.0.0.0 binds are reached on loopback)."""
    host, port = HOST.get()
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def ollama_models_env() -> str:
    """``OLLAMA_MODELS`` read the way Ollama reads it (spaces, then quotes trimmed), or "".

    Where Ollama itself keeps its models, for ``localllm import ollama``; distinct from
    ``MODELS``, whose fallback to the same variable decides where *our* store is.
    """
    return os.environ.get("OLLAMA_MODELS", "").strip().strip("\"'")

"""How a ``LOCALLLM_*`` value's text becomes its value: the parsers the settings use
(``config_server``, ``config_engine``, ``config_store``, ``config_paths``), and the value
types requests share with them (KV cache types, flash attention, the LLM library, CPU
repacking).  Pure functions of a string: reading the ``LOCALLLM_*`` variables is
``config_setting.Setting``'s alone.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Literal, get_args

from localllm.ollama_env import GO_INT

log = logging.getLogger("localllm.config")

DEFAULT_PORT = 11434


def parse_bool(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected a boolean (1/0, true/false)")


def parse_nonneg_int(raw: str) -> int:
    value = int(raw, 10)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def parse_str(raw: str) -> str:
    return raw


@dataclass(frozen=True)
class StepBudget:
    """LOCALLLM_STEP_BUDGET: tokens per step, or a step time in ms (both 0: no budget)."""

    tokens: int = 0
    ms: float = 0.0

    def __str__(self) -> str:
        return f"{self.ms:g}ms" if self.ms else str(self.tokens)


def parse_step_budget(raw: str) -> StepBudget:
    text = raw.strip().lower()
    if text.endswith("ms"):
        ms = float(text[:-2])
        if not 0 < ms < 3_600_000:
            raise ValueError("must be a positive number of milliseconds")
        return StepBudget(ms=ms)
    return StepBudget(tokens=parse_nonneg_int(text))


def parse_list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def parse_size(raw: str) -> int:
    """Bytes from ``1048576``, ``64MiB``, ``2g`` (binary units; 0 = no limit)."""
    match = _SIZE_RE.fullmatch(raw.strip().lower())
    if match is None or match.group(2) not in _SIZE_UNITS:
        raise ValueError(f"invalid size {raw!r} (e.g. 64MiB, 200G)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def parse_prompt_cache(raw: str) -> int:
    """LOCALLLM_PROMPT_CACHE: ``auto`` or -1 (as large as the KV cache), else a size; 0 = off."""
    return -1 if raw.strip().lower() in ("auto", "-1") else parse_size(raw)


KVType = Literal["f16", "q8_0", "q4_0", "f32"]
# The KV cache types localllm offers: what the runner's LoadOptions, the planner's
# memory arithmetic (scheduler/estimate.py) and the native shim all accept.
# Quantized types need flash attention (llama.cpp quantizes V only with it).
KV_TYPES: tuple[KVType, ...] = get_args(KVType)

FlashAttention = Literal["auto", "on", "off"]
FLASH_ATTENTION_VALUES: tuple[FlashAttention, ...] = get_args(FlashAttention)
_ON = ("on", "1", "true", "yes")
_OFF = ("off", "0", "false", "no")


def parse_kv_type(raw: str) -> KVType:
    """``"Q8_0"`` -> ``"q8_0"``; anything outside ``KV_TYPES`` is a ``ValueError``."""
    low = raw.strip().lower()
    for kv in KV_TYPES:
        if low == kv:
            return kv
    raise ValueError(f"expected a KV cache type: {', '.join(KV_TYPES)}")


def parse_flash_attention(raw: str) -> FlashAttention:
    """``on``/``off``/``auto``; booleans (``1``, ``true``, ``no``, ...) mean on or off."""
    return _auto_on_off(raw, "expected on, off or auto")


def _auto_on_off(raw: str, expected: str) -> Literal["auto", "on", "off"]:
    """``auto``, or a boolean's spelling (``on``, ``1``, ``false``...) as on or off;
    anything else is a ``ValueError`` saying ``expected``."""
    low = raw.strip().lower()
    if low == "auto":
        return "auto"
    if low in _ON:
        return "on"
    if low in _OFF:
        return "off"
    raise ValueError(expected)


def parse_engine_spec(raw: str) -> str:
    module, sep, attr = raw.partition(":")
    if not sep or not module or not attr:
        raise ValueError("expected module:Class")
    return raw


def parse_log_format(raw: str) -> str:
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


def parse_load_timeout(raw: str) -> float:
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


LLMLibrary = Literal["", "cuda", "rocm", "vulkan", "metal", "cpu"]
# hardware.Device.library of each; RPC devices are not a library choice (LOCALLLM_RPC_WORKERS).
LLM_LIBRARY_DEVICES: dict[str, tuple[str, ...]] = {
    "cuda": ("CUDA",),
    "rocm": ("ROCm", "HIP"),
    "vulkan": ("Vulkan",),
    "metal": ("Metal",),
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
            return lib
    raise ValueError("expected auto, cuda, rocm, vulkan, metal or cpu")


def parse_ollama_llm_library(raw: str) -> LLMLibrary:
    """A name with no library here leaves Ollama with none of its GPU libraries: the CPU."""
    try:
        return parse_llm_library(raw)
    except ValueError:
        log.warning(
            "OLLAMA_LLM_LIBRARY=%r names no GPU library (cuda, rocm, vulkan): as "
            "Ollama, only the CPU is used",
            raw,
        )
        return "cpu"


CpuRepack = Literal["auto", "on", "off"]
CPU_REPACK_VALUES: tuple[CpuRepack, ...] = get_args(CpuRepack)


def parse_cpu_repack(raw: str) -> CpuRepack:
    """``auto``, ``on`` or ``off``; booleans (``1``, ``false``...) mean on or off."""
    return _auto_on_off(raw, "expected auto, on or off")


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


def parse_fetch_mode(raw: str) -> str:
    """LOCALLLM_FETCH_IMAGE_URLS: ``all``, a true value (``public``) or a false one (``off``)."""
    if raw.lower() == "all":
        return "all"
    return "public" if parse_bool(raw) else "off"


def parse_pixels(raw: str) -> int:
    """A positive number of pixels (``100_000_000`` or ``100000000``)."""
    value = int(raw.replace("_", ""), 10)
    if value < 1:
        raise ValueError("must be a positive number of pixels")
    return value


_URL_RE = re.compile(r"https?://[A-Za-z0-9_.:\[\]-]+(/[A-Za-z0-9_.~/-]*)?")


def parse_registry(raw: str) -> str:
    """LOCALLLM_OLLAMA_REGISTRY: an ``http(s)://host[:port][/path]`` base URL, without its
    trailing ``/``; ``off`` (or another false value) = ``""``, never asked."""
    if raw.lower() in ("0", "false", "no", "off", "none"):
        return ""
    if not _URL_RE.fullmatch(raw):
        raise ValueError("expected an http(s):// URL, or off")
    return raw.rstrip("/")


_HF_REPO_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}")


def parse_hf_repo(raw: str) -> str:
    if not _HF_REPO_RE.fullmatch(raw) or ".." in raw:
        raise ValueError("expected a Hugging Face repo, user/name")
    return raw

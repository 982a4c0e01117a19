"""Settings of the daemon's edge and its clients: address, access, request and image
limits, logging, and the interactive client's history.  Read through ``config.X``.
"""

from __future__ import annotations

import logging

from localllm.config_setting import Setting
from localllm.config_values import (
    DEFAULT_PORT,
    TRACE,
    parse_bool,
    parse_debug_level,
    parse_duration,
    parse_fetch_mode,
    parse_host,
    parse_list,
    parse_log_format,
    parse_pixels,
    parse_size,
    parse_str,
)
from localllm.ollama_env import debug_level, go_bool

HOST = Setting(
    "LOCALLLM_HOST",
    parse_host,
    ("127.0.0.1", DEFAULT_PORT),
    "Address the daemon binds to and clients connect to (host[:port]).",
    ollama="OLLAMA_HOST",
)
ORIGINS: Setting[list[str]] = Setting(
    "LOCALLLM_ORIGINS",
    parse_list,
    [],
    "Extra CORS origins allowed to call the API (comma-separated).",
    ollama="OLLAMA_ORIGINS",
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
MAX_BODY = Setting(
    "LOCALLLM_MAX_BODY",
    parse_size,
    64 << 20,
    "Largest request body (JSON requests; images are base64 inside them), "
    "e.g. 64MiB; 0 = no limit.",
)
LOG_FORMAT = Setting(
    "LOCALLLM_LOG_FORMAT",
    parse_log_format,
    "text",
    "Daemon log lines: text, or json (one object per line, with request ids).",
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
DEBUG_REQUESTS = Setting(
    "LOCALLLM_DEBUG_REQUESTS",
    parse_str,
    "",
    "Folder where each refused request (a 400) is written with its body, to attach to a bug "
    "report: 1 MiB of body each, the newest 50 kept (private files); off when empty.",
)
NOHISTORY = Setting(
    "LOCALLLM_NOHISTORY",
    parse_bool,
    False,
    "'localllm run' reads its line history but adds nothing to the file (as '/set nohistory').",
    ollama="OLLAMA_NOHISTORY",
    ollama_parse=go_bool("OLLAMA_NOHISTORY"),
)
NO_HINTS = Setting(
    "LOCALLLM_NO_HINTS",
    parse_bool,
    False,
    "Don't print the one line (at most once a day) by which 'run', 'chat' and 'serve' "
    "name the command that would put an unused GPU to work.",
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


def log_level() -> int:
    """The ``logging`` level LOCALLLM_DEBUG asks for, stepping as Ollama's slog levels: 0 INFO,
    1 DEBUG, 2+ TRACE, each step below 0 one quieter (-1 WARNING, as OLLAMA_DEBUG=-1 is WARN)."""
    level = DEBUG.get()
    return TRACE if level >= 2 else logging.INFO - 10 * level


def client_base_url() -> str:
    """The URL clients use to reach the daemon (0.0.0.0 binds are reached on loopback)."""
    host, port = HOST.get()
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"

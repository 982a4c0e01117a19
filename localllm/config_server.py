"""Settings of the daemon's edge and its clients: address, TLS, access, request and image
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
    "Address the daemon binds to and clients connect to (host[:port]); clients reach an "
    "HTTPS daemon at https://host:port.",
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
API_KEYS_FILE = Setting(
    "LOCALLLM_API_KEYS_FILE",
    parse_str,
    "",
    "A file of API keys, one a line: 'label key' (the label names the key in the access log "
    "and /metrics; never the key) or a key alone; '#' starts a comment. A change applies "
    "within a second. The daemon refuses a file other users may read or write, or its group "
    "may write (chmod 600 or 640). Works beside LOCALLLM_API_KEY.",
)
TLS_CERT = Setting(
    "LOCALLLM_TLS_CERT",
    parse_str,
    "",
    "PEM certificate (chain) of the daemon: with LOCALLLM_TLS_KEY, it serves HTTPS; clients "
    "in the same environment then use https://.",
)
TLS_KEY = Setting(
    "LOCALLLM_TLS_KEY",
    parse_str,
    "",
    "PEM private key (unencrypted) of LOCALLLM_TLS_CERT.",
)
TLS_CA = Setting(
    "LOCALLLM_TLS_CA",
    parse_str,
    "",
    "PEM CA bundle trusted beside the usual ones, by clients reaching an HTTPS daemon "
    "(one whose certificate your own CA signed) and by the daemon's downloads.",
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
MCP_ALLOW: Setting[list[str]] = Setting(
    "LOCALLLM_MCP_ALLOW",
    parse_list,
    [],
    "MCP servers the daemon may call for the Responses API's mcp tool: URL prefixes, "
    "comma-separated (e.g. http://127.0.0.1:8931/,https://mcp.example.com/); a server_url "
    "that starts with none of them is a 400. Empty (the default): none.",
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


def host_says_https() -> bool:
    """Whether LOCALLLM_HOST (or OLLAMA_HOST) is written with ``https://``."""
    src = HOST.source()
    return src is not None and src[1].lower().startswith("https://")


def client_scheme() -> str:
    """``https`` when LOCALLLM_HOST says so, or when this environment's daemon serves TLS
    (LOCALLLM_TLS_CERT set: a daemon started from it, by ``serve`` or by a client, does);
    else ``http``.  So a client and the daemon it starts always agree."""
    return "https" if host_says_https() or TLS_CERT.get() else "http"


def client_base_url() -> str:
    """The URL clients use to reach the daemon (0.0.0.0 binds are reached on loopback)."""
    host, port = HOST.get()
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{client_scheme()}://{host}:{port}"

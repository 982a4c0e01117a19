"""Settings of the model store and downloads: where models live, what is kept, what may
be read or uploaded, and where pulls and catalogue updates come from; and how long and how
much of the stored Responses and conversations are kept.  Read through ``config.X``.
"""

from __future__ import annotations

from localllm.config_setting import Setting
from localllm.config_values import (
    parse_bool,
    parse_duration,
    parse_hf_repo,
    parse_list,
    parse_registry,
    parse_size,
    parse_str,
)
from localllm.ollama_env import go_bool

MODELS = Setting(
    "LOCALLLM_MODELS",
    parse_str,
    "",
    "Model store folder (blobs/ and manifests/); default: <home>/models.",
    ollama="OLLAMA_MODELS",
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
ALLOWED_PATHS: Setting[list[str]] = Setting(
    "LOCALLLM_ALLOWED_PATHS",
    parse_list,
    [],
    "Folders (comma-separated) the daemon may read model files from when /api/create names a "
    "path in 'from'; the model store is always allowed. Clients normally upload files instead.",
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
CATALOG_REPO = Setting(
    "LOCALLLM_CATALOG_REPO",
    parse_hf_repo,
    "localllm/catalog",
    "Hugging Face repo 'localllm catalog update' downloads catalog.toml from (used only "
    "if the catalog.toml.sig beside it verifies with a key localllm ships).",
)
OLLAMA_REGISTRY = Setting(
    "LOCALLLM_OLLAMA_REGISTRY",
    parse_registry,
    "https://registry.ollama.ai",
    "Ollama's registry, which 'pull' asks for names the catalogue lacks (qwen3.5, user/model) "
    "and for ollama://NAME; off = never asked.",
)
RESPONSES_RETENTION = Setting(
    "LOCALLLM_RESPONSES_RETENTION",
    parse_duration,
    30 * 24 * 3600.0,
    "How long stored Responses (/v1/responses with store, the default) and conversations are "
    "kept, e.g. 720h (30 days, as OpenAI keeps them) or 1h; a negative value keeps them "
    "until deleted. A conversation counts from its last change.",
)
RESPONSES_MAX_SIZE = Setting(
    "LOCALLLM_RESPONSES_MAX_SIZE",
    parse_size,
    1 << 30,
    "Largest size of the stored Responses and conversations database (responses.sqlite3 "
    "in the home folder), e.g. 500M: past it, a request that would store more is a 507 "
    "until some are deleted or expire; 0 = no limit.",
)

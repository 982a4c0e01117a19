"""Every ``LOCALLLM_*`` setting, gathered in one place: ``config.X`` is how callers read them.

The settings themselves are defined by area: ``config_server`` (the daemon's edge, its
clients, images, logging), ``config_engine`` (scheduling, planning, the runner),
``config_store`` (the model store and downloads) and ``config_paths`` (folders, backends,
the native build); each is a ``config_setting.Setting``, the one reader of ``LOCALLLM_*``
variables (tests/test_config.py checks).  ``children.py`` copies the whole environment for
child processes, and ``native/build_ffi.py`` reads ``LOCALLLM_LLAMA_PREFIX`` itself, at
build time.  The parsers are ``config_values.py``'s, re-exported here too.

Settings are read each time an accessor is called, so tests (and a daemon started with
another environment) see current values.  A malformed value logs a warning and falls back
to the default.

Where Ollama has a variable of the same meaning, it is read when ours is unset, the way
Ollama reads it (``ollama_env.py``); ``ollama_fallbacks`` and ``ollama_ignored`` say which
were used and which mean nothing here.  ``REGISTRY`` feeds ``serve --help`` and the docs.
"""

from __future__ import annotations

import os

from localllm import config_engine, config_paths, config_server, config_store
from localllm.config_engine import (
    CONTEXT_LENGTH as CONTEXT_LENGTH,
    CPU_REPACK as CPU_REPACK,
    DRAFT_GATE as DRAFT_GATE,
    FLASH_ATTENTION as FLASH_ATTENTION,
    GPU_OVERHEAD as GPU_OVERHEAD,
    KEEP_ALIVE as KEEP_ALIVE,
    KV_CACHE_TYPE as KV_CACHE_TYPE,
    LLM_LIBRARY as LLM_LIBRARY,
    LOAD_TIMEOUT as LOAD_TIMEOUT,
    MAX_LOADED_MODELS as MAX_LOADED_MODELS,
    MAX_LOADED_PER_GPU as MAX_LOADED_PER_GPU,
    MAX_QUEUE as MAX_QUEUE,
    NUM_PARALLEL as NUM_PARALLEL,
    NUM_THREAD as NUM_THREAD,
    PROMPT_CACHE as PROMPT_CACHE,
    PROMPT_CACHE_DISK as PROMPT_CACHE_DISK,
    RPC_WORKERS as RPC_WORKERS,
    RUNNER_ENGINE as RUNNER_ENGINE,
    RUNNER_TIMEOUT as RUNNER_TIMEOUT,
    SCHED_SPREAD as SCHED_SPREAD,
    STEP_BUDGET as STEP_BUDGET,
    max_loaded_models as max_loaded_models,
)
from localllm.config_paths import (
    BACKENDS as BACKENDS,
    BACKENDS_REPO as BACKENDS_REPO,
    CACHE as CACHE,
    CORE_CMAKE_ARGS as CORE_CMAKE_ARGS,
    HOME as HOME,
    LLAMA_PREFIX as LLAMA_PREFIX,
)
from localllm.config_server import (
    API_KEY as API_KEY,
    API_KEYS_FILE as API_KEYS_FILE,
    DEBUG as DEBUG,
    DEBUG_REQUESTS as DEBUG_REQUESTS,
    FETCH_IMAGE_URLS as FETCH_IMAGE_URLS,
    HOST as HOST,
    LOG_FORMAT as LOG_FORMAT,
    MAX_BODY as MAX_BODY,
    MAX_IMAGE_BYTES as MAX_IMAGE_BYTES,
    MAX_IMAGE_PIXELS as MAX_IMAGE_PIXELS,
    MAX_IMAGE_SIDE as MAX_IMAGE_SIDE,
    MAX_IMAGES as MAX_IMAGES,
    MAX_IMAGES_BYTES as MAX_IMAGES_BYTES,
    MAX_REQUEST_PIXELS as MAX_REQUEST_PIXELS,
    MCP_ALLOW as MCP_ALLOW,
    NO_HINTS as NO_HINTS,
    NOHISTORY as NOHISTORY,
    ORIGINS as ORIGINS,
    SHUTDOWN_GRACE as SHUTDOWN_GRACE,
    TLS_CA as TLS_CA,
    TLS_CERT as TLS_CERT,
    TLS_KEY as TLS_KEY,
    client_base_url as client_base_url,
    client_scheme as client_scheme,
    host_says_https as host_says_https,
    log_level as log_level,
)
from localllm.config_setting import Setting as Setting
from localllm.config_store import (
    ALLOWED_PATHS as ALLOWED_PATHS,
    CATALOG_REPO as CATALOG_REPO,
    MAX_BLOB_SIZE as MAX_BLOB_SIZE,
    MAX_DOWNLOAD_RATE as MAX_DOWNLOAD_RATE,
    MIN_FREE_DISK as MIN_FREE_DISK,
    MODELS as MODELS,
    NOPRUNE as NOPRUNE,
    OLLAMA_REGISTRY as OLLAMA_REGISTRY,
    RESPONSES_MAX_SIZE as RESPONSES_MAX_SIZE,
    RESPONSES_RETENTION as RESPONSES_RETENTION,
)
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
    parse_hf_repo as parse_hf_repo,
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
from localllm.ollama_env import IGNORED

# Every setting, area by area and in each module's order (``serve --help``,
# docs/configuration.md): a setting defined in an area module is listed without more ado.
REGISTRY: tuple[Setting[object], ...] = tuple(
    value
    for module in (config_server, config_engine, config_store, config_paths)
    for value in vars(module).values()
    if isinstance(value, Setting)
)


def ollama_fallbacks() -> list[tuple[str, str]]:
    """(our setting, Ollama variable) for each setting now taken from an OLLAMA_* variable."""
    return [(st.name, src[0]) for st in REGISTRY if (src := st.source()) and src[0] == st.ollama]


def ollama_ignored() -> list[tuple[str, str]]:
    """(variable, why) for each Ollama variable that is set but means nothing here."""
    return [(var, why) for var, why in IGNORED.items() if os.environ.get(var, "").strip()]

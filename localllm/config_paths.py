"""Settings of localllm's folders and of the native build: the home and cache folders,
the backend plugins (and where their packs come from), the llama.cpp core.  Read through
``config.X``; ``paths.py`` turns them into locations.
"""

from __future__ import annotations

from localllm.config_setting import Setting
from localllm.config_values import parse_hf_repo, parse_str

HOME = Setting(
    "LOCALLLM_HOME",
    parse_str,
    "",
    "Root folder for everything localllm writes (models, logs, chats); "
    "default: the platform's data directory.",
)
CACHE = Setting(
    "LOCALLLM_CACHE",
    parse_str,
    "",
    "Cache folder for the llama.cpp source and backend build trees; "
    "default: the platform's cache directory.",
)
BACKENDS = Setting(
    "LOCALLLM_BACKENDS",
    parse_str,
    "",
    "Folder of ggml backend plugins (CUDA, Vulkan, ROCm, RPC), one subfolder per "
    "ggml version; default: <home>/backends.",
)
BACKENDS_REPO = Setting(
    "LOCALLLM_BACKENDS_REPO",
    parse_hf_repo,
    "localllm/backends",
    "Hugging Face repo 'localllm backends get' (and 'doctor --fix') fetches "
    "prebuilt plugin packs from; a pack is installed only if its sha256 is in "
    "the table this release ships, or is given with --trust.",
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

"""Where localllm keeps its files.

Everything derives from one root: ``LOCALLLM_HOME`` when set, else the platform's
user data directory (platformdirs).  ``LOCALLLM_MODELS`` moves only the model
store.  Functions compute paths on each call and never create anything, so
importing this module touches no disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from localllm import config, ollama_env
from localllm.config_setting import Setting


def _folder(setting: Setting[str], default: Callable[[], Path]) -> Path:
    """The folder ``setting`` names (``~`` expanded), else ``default()``."""
    override = setting.get()
    return Path(override).expanduser() if override else default()


def _platform(kind: Literal["data", "cache", "config"]) -> Path:
    """The platform's folder of that kind for localllm (platformdirs, imported when asked)."""
    import platformdirs

    where = {
        "data": platformdirs.user_data_dir,
        "cache": platformdirs.user_cache_dir,
        "config": platformdirs.user_config_dir,
    }[kind]
    return Path(where("localllm", appauthor=False))


def home() -> Path:
    """The root folder for all of localllm's data."""
    return _folder(config.HOME, lambda: _platform("data"))


def models() -> Path:
    """The model store: ``blobs/`` and ``manifests/`` live here."""
    return _folder(config.MODELS, lambda: home() / "models")


def blobs() -> Path:
    return models() / "blobs"


def manifests() -> Path:
    return models() / "manifests"


def logs() -> Path:
    return home() / "logs"


def run_dir() -> Path:
    """Pid files and sockets of the running daemon."""
    return home() / "run"


def chats_db() -> Path:
    return home() / "chats.sqlite3"


def responses_db() -> Path:
    """Stored Responses and conversations (store/responses_db.py): private, mode 0600."""
    return home() / "responses.sqlite3"


def backends() -> Path:
    """Backend plugins built for this machine: ``<ggml version>/libggml-<name>.so``."""
    return _folder(config.BACKENDS, lambda: home() / "backends")


def cache() -> Path:
    """Re-creatable downloads and build trees (the llama.cpp source, cmake builds)."""
    return _folder(config.CACHE, lambda: _platform("cache"))


def prompt_cache() -> Path:
    """Cached prompt states (engine/diskcache.py): re-creatable, so under the cache folder
    when LOCALLLM_CACHE names one, else under LOCALLLM_HOME when that is set (gigabytes
    belong where the user moved localllm's data), else in the platform's cache folder."""
    if not config.CACHE.get() and config.HOME.get():
        return home() / "cache" / "prompts"
    return cache() / "prompts"


def prompt_cache_key() -> Path:
    """The key that authenticates the prompt cache's files (engine/cachefile.py): in the
    config folder, not beside the files, so a folder anyone could write holds no key."""
    return config_dir() / "prompt-cache.key"


# The Linux install script runs Ollama as the ``ollama`` system user, whose home is here.
OLLAMA_SYSTEM_MODELS = Path("/usr/share/ollama/.ollama/models")


def ollama_models() -> list[Path]:
    """Where an Ollama store may be, most likely first: ``OLLAMA_MODELS`` when set (Ollama
    uses nothing else then), else the user's ``~/.ollama/models`` and, on Linux, the system
    service's folder.  Nothing is checked here (see ``store/ollama_store.find_store``)."""
    import sys

    env = ollama_env.models_dir()
    if env:
        return [Path(env).expanduser()]
    found = [Path.home() / ".ollama" / "models"]
    if sys.platform.startswith("linux"):
        found.append(OLLAMA_SYSTEM_MODELS)
    return found


def config_dir() -> Path:
    """The user's own settings files (the catalogue overrides): the platform's config
    folder, or ``config/`` below ``LOCALLLM_HOME`` when that is set."""
    if config.HOME.get():
        return home() / "config"
    return _platform("config")


def user_catalog() -> Path:
    """The user's catalogue file: adds or overrides library names (``store/catalog.py``)."""
    return config_dir() / "catalog.toml"


def catalog_data() -> Path:
    """Where ``localllm catalog update`` keeps the catalogue it downloaded."""
    return home() / "catalog"

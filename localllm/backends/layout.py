"""Where backend files live: the one place that names the folders and files of plugins.

A leaf: the builder, the packer, the installer, the listing and the loader all
ask here, so none of them imports another just to learn a folder's name.

- ``<backends>/<ggml version>/libggml-<name>.so``: the plugin the runners load;
- beside it ``<name>-libs/`` (runtime libraries a pack or a package-index build
  put there; the plugin's runpath names it) and ``.<plugin>.pack.json`` (the
  record of the pack it was installed from);
- ``<cache>/build/<ggml version>/<name>[-tools]/``: the cmake tree, and
  ``<logs>/backend-build-<name>.log`` its log;
- ``<cache>/cuda-runtime/<wheel>-<version>/``: NVIDIA's runtime libraries from
  one wheel, shared by every plugin whose pack names that wheel.
"""

from __future__ import annotations

from pathlib import Path

from localllm import paths


def plugin_path(ggml_version: str, filename: str) -> Path:
    return paths.backends() / ggml_version / filename


def libs_folder(backend: str) -> str:
    """The folder beside a plugin that holds its runtime libraries (``cuda-libs``)."""
    return f"{backend}-libs"


def libs_folder_of(plugin: Path) -> Path:
    """``libs_folder`` for a plugin file (``libggml-cuda.so`` -> ``cuda-libs/`` beside it)."""
    return plugin.parent / libs_folder(plugin.name.removeprefix("libggml-").split(".")[0])


def record_path(plugin: Path) -> Path:
    """The record ``install`` leaves beside a plugin it installed from a pack."""
    return plugin.with_name(f".{plugin.name}.pack.json")


def build_dir_for(name: str, ggml_version: str) -> Path:
    return paths.cache() / "build" / ggml_version / name


def build_log_path(name: str) -> Path:
    return paths.logs() / f"backend-build-{name}.log"


def runtime_root() -> Path:
    # Absolute: the loader hands these paths to dlopen, whatever the working folder.
    return paths.cache().absolute() / "cuda-runtime"


def runtime_dir(wheel: str, version: str) -> Path:
    return runtime_root() / f"{wheel}-{version}"

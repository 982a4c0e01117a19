"""What the Vulkan plugin's build needs, looked for before cmake runs, with the packages.

The pinned llama.cpp's ``ggml/src/ggml-vulkan/CMakeLists.txt`` asks for
``find_package(Vulkan COMPONENTS glslc REQUIRED)`` (the headers, the loader's
``libvulkan.so`` to link, and the ``glslc`` shader compiler) and
``find_package(SPIRV-Headers CONFIG REQUIRED)`` (its CMake package; the C++
code includes ``spirv/unified1/spirv.hpp``); ``ggml-vulkan.cpp`` uses
``vk::LayerSettingEXT``, which came with headers 1.3.261.  Each is looked for
where CMake looks: ``$VULKAN_SDK`` (the LunarG SDK), ``$CMAKE_PREFIX_PATH``,
then ``/usr/local`` and ``/usr``.  Everything missing is named at once, with
the Debian/Ubuntu and Fedora packages that bring it, instead of the first
cmake error minutes into a build.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

MIN_HEADER = 261  # vk::LayerSettingEXT (VK_EXT_layer_settings), used by ggml-vulkan


@dataclass(frozen=True)
class Need:
    name: str  # for the build log's notes
    what: str  # for the message
    debian: str  # the Debian/Ubuntu package
    fedora: str


HEADERS = Need(
    "Vulkan headers",
    "the Vulkan headers (vulkan/vulkan_core.h, vulkan/vulkan.hpp)",
    "libvulkan-dev",
    "vulkan-headers",
)
LOADER = Need(
    "Vulkan loader",
    "the Vulkan loader to link (libvulkan.so)",
    "libvulkan-dev",
    "vulkan-loader-devel",
)
GLSLC = Need("glslc", "glslc, the shader compiler", "glslc", "glslc")
SPIRV = Need(
    "SPIRV-Headers",
    "the SPIRV headers and their CMake package (SPIRV-HeadersConfig.cmake)",
    "spirv-headers",
    "spirv-headers-devel",
)


@dataclass(frozen=True)
class Found:
    """What was found (notes for the build log), what is missing, and headers too old."""

    notes: tuple[str, ...]
    missing: tuple[Need, ...]
    old_headers: str = ""  # "the Vulkan headers at P are 1.3.239, ..." when too old

    def message(self) -> str:
        """One paragraph for a person: what is missing, then the commands that install it."""
        parts = []
        if self.old_headers:
            parts.append(self.old_headers)
        if self.missing:
            parts.append(
                "the Vulkan plugin's build needs "
                + "; ".join(n.what for n in self.missing)
                + ". Install them: Debian/Ubuntu: sudo apt install "
                + " ".join(dict.fromkeys(n.debian for n in self.missing))
                + "; Fedora: sudo dnf install "
                + " ".join(dict.fromkeys(n.fedora for n in self.missing))
                + "; or install the LunarG Vulkan SDK and set VULKAN_SDK"
            )
        return ". ".join(parts)


def prefixes(env: dict[str, str] | None = None) -> list[Path]:
    """Where CMake would look, in its order: the SDK, CMAKE_PREFIX_PATH, /usr/local, /usr."""
    env = dict(os.environ) if env is None else env
    out = [Path(env["VULKAN_SDK"])] if env.get("VULKAN_SDK") else []
    out += [Path(p) for p in env.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
    return [*out, Path("/usr/local"), Path("/usr")]


def vulkan_header_version(include_dirs: list[str]) -> tuple[int, str]:
    """(VK_HEADER_VERSION, path) of the first vulkan_core.h found; (0, "") if none."""
    for d in include_dirs:
        path = Path(d) / "vulkan" / "vulkan_core.h"
        if path.is_file():
            m = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", path.read_text(errors="replace"))
            return (int(m.group(1)) if m else 0), str(path)
    return 0, ""


def _lib_dirs(prefix: Path) -> list[Path]:
    # lib64 (Fedora), lib/<multiarch> (Debian: x86_64-linux-gnu), lib (the SDK, /usr/local).
    return [prefix / "lib64", *sorted(prefix.glob("lib/*-linux-gnu*")), prefix / "lib"]


def find_loader(roots: list[Path]) -> str:
    """The unversioned libvulkan.so (what the linker takes; the -dev package's link)."""
    names = ("libvulkan.so", "libvulkan.dylib", "vulkan-1.lib")
    return next(
        (str(d / n) for p in roots for d in _lib_dirs(p) for n in names if (d / n).exists()), ""
    )


def find_spirv_config(roots: list[Path]) -> str:
    """SPIRV-Headers' CMake package file, where ``find_package(... CONFIG)`` looks."""
    for p in roots:
        for base in (p / "share", *_lib_dirs(p)):
            for folder in sorted(base.glob("cmake/SPIRV-Headers*")):
                for name in ("SPIRV-HeadersConfig.cmake", "spirv-headers-config.cmake"):
                    if (folder / name).is_file():
                        return str(folder / name)
    return ""


def check(env: dict[str, str] | None = None, roots: list[Path] | None = None) -> Found:
    """Look for every prerequisite; ``roots`` replaces ``prefixes(env)`` (tests)."""
    env = dict(os.environ) if env is None else env
    roots = prefixes(env) if roots is None else roots
    notes: list[str] = []
    missing: list[Need] = []
    old = ""
    version, header = vulkan_header_version([str(p / "include") for p in roots])
    hpp = bool(header) and (Path(header).parent / "vulkan.hpp").is_file()
    if header and version < MIN_HEADER:
        old = (
            f"the Vulkan headers at {header} are 1.3.{version}, and this llama.cpp's Vulkan "
            f"backend needs 1.3.{MIN_HEADER} or newer (vk::LayerSettingEXT): install the "
            "LunarG Vulkan SDK and set VULKAN_SDK, or use a newer distribution's packages"
        )
    elif not hpp:
        missing.append(HEADERS)
    else:
        notes.append(f"Vulkan headers 1.3.{version} ({header})")
    for need, found in (
        (LOADER, find_loader(roots)),
        (GLSLC, _glslc(env, roots)),
        (SPIRV, find_spirv_config(roots)),
    ):
        if found:
            notes.append(f"{need.name}: {found}")
        else:
            missing.append(need)
    return Found(tuple(notes), tuple(missing), old)


def _glslc(env: dict[str, str], roots: list[Path]) -> str:
    """glslc on PATH (absolute entries only: see toolkit's module docstring), else in the SDK."""
    path = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if os.path.isabs(p))
    sdk = [str(r / "bin") for r in roots[:1] if env.get("VULKAN_SDK")]
    return shutil.which("glslc", path=os.pathsep.join([*sdk, path])) or ""

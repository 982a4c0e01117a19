"""A pack's manifest: its shape (``PackManifest``), well formed, and made for this machine.

``check_manifest`` refuses anything but the formats ``FORMATS`` with the fields
``pack`` writes: a backend of the catalogue, its plugin's file name, its
libraries folder, architectures valid for it, files that are the plugin or
plain names inside that folder, each with a sha256 and a size, and (format 2,
CUDA) the runtime wheels it needs instead of carrying them (``Runtime``: the
CUDA major version, and per wheel its name, version, sha256, the folder of its
libraries and their sonames, each with the sha256 of the file where known).
``check_fits`` then says, for a person, why a pack is for another machine: its
platform, its ggml version (a plugin of another version is refused at load),
its ggml commit (the same version number, other code), GPU architectures it
does not cover (``uncovered``), or, for CUDA, a toolkit newer than the driver
supports, with what to do instead.
"""

from __future__ import annotations

import json
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from localllm.backends import catalog
from localllm.backends.layout import libs_folder, record_path
from localllm.errors import LocalLLMError

FORMAT = 2  # what ``pack`` writes: 1 plus the optional "runtime"
FORMATS = (1, 2)
MAX_FILES = 64
MAX_BYTES = 16 << 30  # all files together, unpacked
_SHA = re.compile(r"[0-9a-f]{64}")
_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
_CUDA_ARCH = re.compile(r"\d+[af]?(-real|-virtual)?")
_HIP_ARCH = re.compile(r"gfx[0-9a-f]+(:[a-z+-]+)?")
_WHEEL = re.compile(r"nvidia-[a-z0-9-]{1,60}")
_VERSION = re.compile(r"\d+(\.\d+){1,4}")
_WHEEL_DIR = re.compile(r"nvidia/[a-z0-9_]{1,40}/lib")
_SONAME = re.compile(r"lib[A-Za-z]{1,40}\.so\.\d{1,3}")


class PackError(LocalLLMError):
    """A pack could not be made or is not acceptable; the message says why."""


class FileEntry(TypedDict):
    sha256: str
    size: int


class RuntimeWheel(TypedDict):
    name: str  # nvidia-cublas
    version: str
    sha256: str  # of the wheel file for this platform
    folder: str  # where its libraries sit inside it: nvidia/cu13/lib
    libs: dict[str, str]  # soname -> sha256 of the file ("" when not known)


class Runtime(TypedDict):
    cuda: int  # the CUDA major version the plugin links (libcublas.so.13: 13)
    wheels: list[RuntimeWheel]


class PackManifest(TypedDict):
    format: int
    backend: str
    plugin: str
    ggml_version: str
    ggml_commit: str
    architectures: list[str]
    toolkit: str
    platform: str
    libs_folder: str
    system_libs: list[str]
    made_by: str
    files: dict[str, FileEntry]
    runtime: NotRequired[Runtime]


class PackRecord(PackManifest):
    """What ``install`` leaves beside a plugin it installed from a pack."""

    pack_sha256: str
    origin: str
    trusted_by: str
    plugin_size: int
    plugin_mtime_ns: int
    plugin_sha256: str


def platform_tag() -> str:
    return f"{sys.platform}-{platform.machine().lower()}"


def check_archs(backend: str, archs: list[str]) -> list[str]:
    """``archs`` if each is a valid architecture for ``backend``, else ``PackError``."""
    pattern = {"cuda": _CUDA_ARCH, "rocm": _HIP_ARCH}.get(backend)
    if pattern is None:
        if archs:
            raise PackError(f"the {backend} plugin has no GPU architectures; drop --arch")
        return []
    bad = [a for a in archs if not pattern.fullmatch(a)]
    if bad or not archs:
        raise PackError(
            f"{', '.join(bad) or 'none'}: not {backend} architectures "
            f"(e.g. {'90 or 90-real' if backend == 'cuda' else 'gfx1100'})"
        )
    return archs


def installed_record(plugin: Path) -> PackRecord | None:
    """The record ``install`` left beside ``plugin``, while the file is still the one the
    pack brought (a build or another install since makes it stale)."""
    try:
        value = json.loads(record_path(plugin).read_text())
        st = plugin.stat()
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    if (value.get("plugin_size"), value.get("plugin_mtime_ns")) != (st.st_size, st.st_mtime_ns):
        return None
    return cast(PackRecord, value)


@dataclass(frozen=True)
class Core:
    """What a pack must fit: this core's ggml, this platform, the GPUs here."""

    ggml_version: str
    ggml_commit: str = ""
    archs: list[str] | None = None  # GPU architectures (--arch); None: ask the drivers
    platform: str = field(default_factory=platform_tag)
    cuda_driver: str | None = None  # the CUDA version the driver supports; None: ask it

    def archs_for(self, backend: str) -> list[str]:
        return self.archs if self.archs is not None else machine_archs(backend)

    def driver_cuda(self) -> str:
        """ "13.0" from nvidia-smi's banner, "" when no driver answers."""
        if self.cuda_driver is not None:
            return self.cuda_driver
        from localllm.hardware.probes import run_tool

        m = re.search(r"CUDA Version\s*:\s*(\d+\.\d+)", run_tool(["nvidia-smi"]) or "")
        return m.group(1) if m else ""


def machine_archs(backend: str) -> list[str]:
    """The architectures of this machine's GPUs for ``backend`` (cuda, rocm), else []."""
    from localllm.backends.toolkit import cuda_archs
    from localllm.hardware.probes import run_tool

    if backend == "cuda":
        return cuda_archs(
            run_tool(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]) or ""
        )
    if backend == "rocm":
        return sorted(set(re.findall(r"\bgfx[0-9a-f]+\b", run_tool(["rocminfo"]) or "")))
    return []


def uncovered(backend: str, pack_archs: list[str], here: list[str]) -> list[str]:
    """The GPU architectures ``here`` that a pack built for ``pack_archs`` cannot run on.

    CUDA: an architecture runs its own machine code ("90" or "90-real"; "90a" too, made for
    exactly 9.0; "100f" on 10.0 and later 10.x), or the PTX of an older plain one ("80" or
    "80-virtual"), compiled by the driver at load.
    """
    if backend not in ("cuda", "rocm"):
        return []
    if backend == "rocm":
        return [a for a in here if a not in {p.split(":")[0] for p in pack_archs}]
    return [gpu for gpu in here if not any(_runs(a, gpu) for a in pack_archs)]


def _runs(arch: str, gpu: str) -> bool:
    m = re.fullmatch(r"(\d+)([af]?)(?:-(real|virtual))?", arch)
    if m is None or not gpu.isdigit():
        return False
    base, letter, kind, have = int(m.group(1)), m.group(2), m.group(3) or "", int(gpu)
    family = letter == "f" and base // 10 == have // 10 and base <= have
    if kind != "virtual" and (base == have or family):
        return True
    return kind != "real" and not letter and base <= have


def _refuse(manifest: PackManifest, why: str) -> PackError:
    return PackError(
        f"this {manifest.get('backend', '?')} pack does not fit: {why}; nothing was installed"
    )


def check_manifest(m: Any) -> PackManifest:
    """``m`` if it is a well-formed manifest, else ``PackError`` naming the fault."""
    if not isinstance(m, dict) or m.get("format") not in FORMATS:
        fmt = m.get("format") if isinstance(m, dict) else None
        raise PackError(
            f"the pack's manifest is format {fmt!r}; this localllm reads formats "
            f"{', '.join(map(str, FORMATS))} (a newer localllm made it?)"
        )
    try:
        backend = catalog.get(str(m["backend"]))
        strings = [
            m[k]
            for k in ("plugin", "ggml_version", "ggml_commit", "toolkit", "platform", "libs_folder")
        ]
        if (
            not all(isinstance(s, str) for s in strings)
            or m["plugin"] != backend.filename
            or m["libs_folder"] != libs_folder(backend.name)
        ):
            raise PackError("its plugin or libraries folder is misnamed")
        archs = m["architectures"]
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise PackError("architectures is not a list of names")
        check_archs(backend.name, archs)
        listed = m["files"]
        if not isinstance(listed, dict) or m["plugin"] not in listed or len(listed) > MAX_FILES:
            raise PackError("its file list does not hold the plugin")
        total = 0
        for name, entry in listed.items():
            parts = name.split("/")
            lib = len(parts) == 2 and parts[0] == m["libs_folder"] and _FILE.fullmatch(parts[1])
            if name != m["plugin"] and not lib:
                raise PackError(f"it lists a file outside its folders: {name!r}")
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("sha256"), str)
                and _SHA.fullmatch(entry["sha256"])
                and isinstance(entry.get("size"), int)
                and entry["size"] >= 0
            ):
                raise PackError(f"the entry of {name!r} has no sha256 and size")
            total += entry["size"]
        if total > MAX_BYTES:
            raise PackError(f"its files add up to {total} bytes, more than {MAX_BYTES}")
        if "runtime" in m:
            _check_runtime(m["runtime"], backend.name)
    except (KeyError, TypeError) as exc:
        raise PackError(f"the pack's manifest is malformed ({exc})") from None
    except LocalLLMError as exc:  # ours, or catalog.get's for an unknown backend
        raise PackError(f"the pack's manifest is malformed: {exc}") from None
    return cast(PackManifest, m)


def _check_runtime(rt: Any, backend: str) -> None:
    """``PackError`` unless ``rt`` names CUDA runtime wheels safely (the names become
    folder and file names in the cache)."""
    if backend != "cuda" or not isinstance(rt, dict) or rt.get("cuda") not in (12, 13):
        raise PackError("its runtime is not CUDA 12 or 13 wheels")
    wheels = rt.get("wheels")
    if not isinstance(wheels, list) or not 0 < len(wheels) <= 4:
        raise PackError("its runtime names no wheels, or too many")
    for w in wheels:
        ok = (
            isinstance(w, dict)
            and _WHEEL.fullmatch(str(w.get("name")))
            and _VERSION.fullmatch(str(w.get("version")))
            and _SHA.fullmatch(str(w.get("sha256")))
            and _WHEEL_DIR.fullmatch(str(w.get("folder")))
            and isinstance(w.get("libs"), dict)
            and w["libs"]
            and all(
                _SONAME.fullmatch(str(k)) and (v == "" or _SHA.fullmatch(str(v)))
                for k, v in w["libs"].items()
            )
        )
        if not ok:
            raise PackError(f"its runtime wheel {w!r} is malformed")


def check_fits(m: PackManifest, core: Core) -> None:
    """``PackError`` with the reason when the pack is for another machine or core."""
    if m["platform"] != core.platform:
        raise _refuse(m, f"it is for {m['platform']}, this machine is {core.platform}")
    if m["ggml_version"] != core.ggml_version:
        raise _refuse(
            m,
            f"it is for ggml {m['ggml_version']}, but this localllm's core is ggml "
            f"{core.ggml_version or 'unknown'} (a plugin of another version is "
            f"refused at load). Get a pack for ggml {core.ggml_version}, or build "
            f"it: 'localllm backends build {m['backend']}'",
        )
    have, want = m["ggml_commit"], core.ggml_commit.removesuffix("-dirty")
    if have and want and not (have.startswith(want) or want.startswith(have)):
        raise _refuse(
            m,
            f"it was built from ggml commit {have}, the core from {want}: the "
            "same version number, other code. Build it here instead",
        )
    archs = core.archs_for(m["backend"])
    if m["backend"] in ("cuda", "rocm") and not archs:
        raise _refuse(
            m,
            "no GPU of this machine answered, so its architecture is unknown: "
            "pass --arch (e.g. --arch 90 for an H100)",
        )
    missing = uncovered(m["backend"], m["architectures"], archs)
    if missing:
        raise _refuse(
            m,
            f"it is built for {', '.join(m['architectures'])}, but this "
            f"machine's GPUs are {', '.join(archs)} ({', '.join(missing)} "
            "not covered)",
        )
    need = _cuda_major(m)
    driver = core.driver_cuda() if need else ""
    # CUDA's minor version compatibility: a driver runs the runtime of its own major version.
    if need and driver and need > int(driver.split(".")[0]):
        raise _refuse(
            m,
            f"it is built with {m['toolkit']}, and this NVIDIA driver supports "
            f"CUDA {driver}: update the driver, or build the plugin here "
            "('localllm backends build cuda')",
        )


def _cuda_major(m: PackManifest) -> int:
    """The CUDA major version the plugin needs from the driver (0: not CUDA, or unknown)."""
    if m["backend"] != "cuda":
        return 0
    if "runtime" in m:
        return m["runtime"]["cuda"]
    found = re.match(r"CUDA (\d+)\.", m["toolkit"])
    return int(found.group(1)) if found else 0

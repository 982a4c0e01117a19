"""A pack's manifest: well formed, and made for this machine (platform, ggml, GPUs).

``check_manifest`` refuses anything but format ``FORMAT`` with the fields
``pack`` writes: a backend of the catalogue, its plugin's file name, its
libraries folder, architectures valid for it, and files that are the plugin or
plain names inside that folder, each with a sha256 and a size.
``check_fits`` then says, for a person, why a pack is for another machine: its
platform, its ggml version (a plugin of another version is refused at load),
its ggml commit (the same version number, other code), GPU architectures it
does not cover (``uncovered``), or, for CUDA, a toolkit newer than the driver
supports, with what to do instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from localllm.backends import catalog
from localllm.backends.pack import FORMAT, PackError, check_archs, libs_folder, platform_tag
from localllm.errors import LocalLLMError

MAX_FILES = 64
MAX_BYTES = 16 << 30  # all files together, unpacked
_SHA = re.compile(r"[0-9a-f]{64}")
_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


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


def _refuse(manifest: dict[str, Any], why: str) -> PackError:
    return PackError(
        f"this {manifest.get('backend', '?')} pack does not fit: {why}; nothing was installed"
    )


def check_manifest(m: Any) -> dict[str, Any]:
    """``m`` if it is a well-formed manifest, else ``PackError`` naming the fault."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        fmt = m.get("format") if isinstance(m, dict) else None
        raise PackError(
            f"the pack's manifest is format {fmt!r}; this localllm reads format "
            f"{FORMAT} (a newer localllm made it?)"
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
    except (KeyError, TypeError) as exc:
        raise PackError(f"the pack's manifest is malformed ({exc})") from None
    except LocalLLMError as exc:  # ours, or catalog.get's for an unknown backend
        raise PackError(f"the pack's manifest is malformed: {exc}") from None
    return m


def check_fits(m: dict[str, Any], core: Core) -> None:
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
    need = re.match(r"CUDA (\d+)\.", m["toolkit"]) if m["backend"] == "cuda" else None
    driver = core.driver_cuda() if need else ""
    # CUDA's minor version compatibility: a driver runs the runtime of its own major version.
    if need and driver and int(need.group(1)) > int(driver.split(".")[0]):
        raise _refuse(
            m,
            f"it is built with {m['toolkit']}, and this NVIDIA driver supports "
            f"CUDA {driver}: update the driver, or build the plugin here "
            "('localllm backends build cuda')",
        )

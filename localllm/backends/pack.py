"""``localllm backends pack NAME``: one file with a built plugin, its libraries and a manifest.

A machine that built a plugin packs it for the others (DESIGN §3): a gzipped
tar holding ``manifest.json``, the plugin, and under ``<backend>-libs/`` the
runtime libraries it loads that a machine with only the driver lacks.  For
CUDA those are cuBLAS and the CUDA runtime, half a gigabyte: when NVIDIA
publishes them as wheels pinned here for the CUDA major version the plugin
links (``cuda.runtime_wheels``), the manifest names those wheels instead
(``runtime``) and the installer fetches them once into the cache; only
libraries with no pinned wheel travel in the pack.  Libraries are found the way
the loader finds them: the ``DT_NEEDED`` names of the plugin (and of each
library taken, in turn), looked up in their own runpath; a known toolkit
library (``TOOLKIT_LIBS``) found nowhere else is looked up in the loader's
cache.  The core's libraries (already loaded by the engine) and the system's
(libc, libstdc++, the driver's libcuda) are never taken; the manifest names
the system ones.  The packed copies search only ``$ORIGIN``-relative folders
(``elf.set_search_path``): the builder's folders mean nothing, or something
hostile, elsewhere.

The manifest says what the pack is for (backend, ggml version and commit, GPU
architectures, toolkit, platform) and gives the sha256 and size of every
file.  Architectures and toolkit come from the cmake tree that built the
plugin, when its output is still the installed file, or from the record of
the pack it was installed from; otherwise ``--arch`` must say them.  The
archive is deterministic (sorted names, zero times and owners): the same
plugin packs to the same bytes, so its sha256 can go into the table a release
ships (``trusted.toml``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from localllm import __version__
from localllm.backends import catalog, elf
from localllm.backends.cuda import runtime_wheels
from localllm.backends.isolated import work_dir
from localllm.backends.layout import build_dir_for, libs_folder, plugin_path, record_path
from localllm.backends.manifest import (
    FORMAT,
    PackError,
    PackManifest,
    check_archs,
    installed_record,
    platform_tag,
)
from localllm.backends.source import sha256_of

__all__ = [
    "FORMAT",
    "MANIFEST",
    "SUFFIX",
    "PackError",
    "Packed",
    "libs_folder",
    "make",
    "pack_name",
    "platform_tag",
    "record_path",
]
MANIFEST = "manifest.json"
SUFFIX = ".tar.gz"
# Provided by the core, which the engine has loaded before any plugin.
CORE_LIBS = ("libggml-base.", "libggml.", "libllama.", "libmtmd.")
# The system's or the driver's own: never carried (a copy would fight the installed driver).
SYSTEM_LIBS = (
    "libc.",
    "libm.",
    "libdl.",
    "libpthread.",
    "librt.",
    "ld-linux",
    "libstdc++.",
    "libgcc_s.",
    "libgomp.",
    "libcuda.",
    "libnvidia-",
    "libvulkan.",
    "libdrm",
)
# Runtime libraries of the vendor toolkits: a plugin cannot load without them, and a machine
# with only the driver does not have them.
TOOLKIT_LIBS = (
    "libcudart.",
    "libcublas.",
    "libcublasLt.",
    "libnvrtc",
    "libamdhip64.",
    "libhipblas.",
    "librocblas.",
    "libhipblaslt.",
)


@dataclass(frozen=True)
class Packed:
    path: Path
    sha256: str
    size: int
    manifest: PackManifest


def pack_name(manifest: PackManifest) -> str:
    """``cuda-ggml0.25.3-linux-x86_64-sm90.tar.gz``: what ``get`` looks for in a repo."""
    # Base names only ("90-real" is sm90): a name is a hint, the manifest decides.
    archs = "_".join(
        ("sm" if manifest["backend"] == "cuda" else "") + re.split("[-:]", a)[0]
        for a in manifest["architectures"]
    )
    return (
        f"{manifest['backend']}-ggml{manifest['ggml_version']}-{manifest['platform']}"
        + (f"-{archs}" if archs else "")
        + SUFFIX
    )


def _cmake_value(text: str, key: str) -> str:
    m = re.search(rf"^{re.escape(key)}:[A-Z]+=(.*)$", text, re.MULTILINE)
    return m.group(1).strip() if m else ""


def build_facts(
    backend: catalog.Backend, ggml_version: str, plugin_sha: str
) -> tuple[list[str], str] | None:
    """(architectures, toolkit) from the cmake tree whose output is the installed plugin."""
    for tree in (
        build_dir_for(backend.name, ggml_version),
        build_dir_for(backend.name + "-tools", ggml_version),
    ):
        out = next(
            (p for p in (tree / "bin" / backend.filename, tree / backend.filename) if p.is_file()),
            None,
        )
        cache = tree / "CMakeCache.txt"
        if out is None or not cache.is_file() or sha256_of(out) != plugin_sha:
            continue
        text = cache.read_text(errors="replace")
        key = {"cuda": "CMAKE_CUDA_ARCHITECTURES", "rocm": "GPU_TARGETS"}.get(backend.name)
        raw = _cmake_value(text, key) if key else ""
        archs = [a for a in raw.split(";") if a]
        lang = {"cuda": "CUDA", "rocm": "HIP"}.get(backend.name, "CXX")
        toolkit = ""
        for f in sorted(tree.glob(f"CMakeFiles/*/CMake{lang}Compiler.cmake")):
            body = f.read_text(errors="replace")
            ident = re.search(rf'set\(CMAKE_{lang}_COMPILER_ID "([^"]*)"\)', body)
            ver = re.search(rf'set\(CMAKE_{lang}_COMPILER_VERSION "([^"]*)"\)', body)
            toolkit = " ".join(m.group(1) for m in (ident, ver) if m and m.group(1))
            if lang == "CUDA" and ver:  # nvcc's version is the CUDA toolkit's
                toolkit = f"CUDA {ver.group(1)} (nvcc)"
        try:
            return check_archs(backend.name, archs), toolkit
        except PackError:
            return None  # "native" or "all": the tree cannot say which
    return None


def _search_dirs(lib: Path, info: elf.Dynamic) -> list[Path]:
    origin = str(lib.resolve().parent)
    out = []
    for entry in info.search:
        entry = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        if entry and os.path.isabs(entry):
            out.append(Path(entry))
    return out


def runtime_libs(plugin: Path) -> tuple[dict[str, Path], list[str]]:
    """(soname -> file to carry, system libraries it relies on) for ``plugin``."""
    carry: dict[str, Path] = {}
    system: list[str] = []
    cache: dict[str, str] | None = None
    # A plugin installed from a pack that named runtime wheels: the loader gives it those
    # from the cache, before any search (runtime_wheels.preload).
    first = {p.name: p for p in runtime_wheels.libraries_for(plugin)[0]}
    todo = [plugin]
    while todo:
        lib = todo.pop()
        info = elf.read(lib)
        for name in info.needed:
            if name in carry or name.startswith(CORE_LIBS):
                continue
            found = first.get(name) or next(
                (d / name for d in _search_dirs(lib, info) if (d / name).is_file()), None
            )
            if name.startswith(SYSTEM_LIBS):
                found = None
            elif found is None and name.startswith(TOOLKIT_LIBS):
                cache = elf.ld_cache() if cache is None else cache
                found = Path(cache[name]) if name in cache else None
                if found is None:
                    raise PackError(
                        f"{lib.name} needs {name}, which is not in its search "
                        "path nor in the loader's cache: the pack would not load "
                        "on a machine without the toolkit"
                    )
            if found is None:
                if name not in system:
                    system.append(name)
                continue
            carry[name] = found.resolve()
            todo.append(carry[name])
    return carry, sorted(system)


def _stage(plugin: Path, carry: dict[str, Path], backend: str, stage: Path) -> None:
    """Copies with ``$ORIGIN``-relative search paths: the plugin looks in its libs folder,
    each library beside itself."""
    folder = libs_folder(backend)
    (stage / folder).mkdir(parents=True)
    shutil.copyfile(plugin, stage / plugin.name)
    copies = [(stage / plugin.name, f"$ORIGIN/{folder}")]
    for name, src in carry.items():
        shutil.copyfile(src, stage / folder / name)
        copies.append((stage / folder / name, "$ORIGIN"))
    for path, search in copies:
        if elf.read(path).search_strings:
            elf.set_search_path(path, search)
        elif path.parent == stage and carry:
            raise PackError(
                f"{plugin.name} has no runpath, so it would not find the "
                f"libraries packed beside it ({', '.join(carry)}); rebuild it"
            )


def _tar(stage: Path, names: list[str], out: Path) -> None:
    """A deterministic tar.gz of ``names`` (files and folders below ``stage``) at ``out``."""
    with (
        open(out, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in names:
            path = stage / name
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.size, info.mode = path.stat().st_size, 0o644 if name == MANIFEST else 0o755
            with open(path, "rb") as fh:
                tar.addfile(info, fh)


def make(
    name: str,
    *,
    ggml_version: str,
    ggml_commit: str,
    out: Path | None = None,
    arch: str | None = None,
) -> Packed:
    """Pack the installed plugin ``name`` for the core's ggml version into ``out``: a file
    named ``*.tar.gz``, else a folder, where it gets ``pack_name`` (default: the working
    folder)."""
    backend = catalog.get(name)
    plugin = plugin_path(ggml_version, backend.filename)
    if not plugin.is_file():
        raise PackError(
            f"no {backend.name} plugin is installed for ggml {ggml_version} "
            f"({plugin}): build it first with 'localllm backends build "
            f"{backend.name}'"
        )
    archs, toolkit = _facts(backend, plugin, ggml_version, arch)
    carry, system = runtime_libs(plugin)
    runtime, carry = runtime_wheels.for_pack(carry) if backend.name == "cuda" else (None, carry)
    with tempfile.TemporaryDirectory(prefix=".pack-", dir=work_dir()) as tmp:
        stage = Path(tmp) / "stage"
        _stage(plugin, carry, backend.name, stage)
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
        manifest: PackManifest = {
            "format": FORMAT,
            "backend": backend.name,
            "plugin": plugin.name,
            "ggml_version": ggml_version,
            "ggml_commit": ggml_commit.removesuffix("-dirty"),
            "architectures": archs,
            "toolkit": toolkit,
            "platform": platform_tag(),
            "libs_folder": libs_folder(backend.name),
            "system_libs": system,
            "made_by": f"localllm {__version__}",
            "files": {
                f: {"sha256": sha256_of(stage / f), "size": (stage / f).stat().st_size}
                for f in files
            },
        }
        if runtime is not None:
            manifest["runtime"] = runtime
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        folders = [libs_folder(backend.name)] if carry else []
        target = _write(stage, [MANIFEST, *folders, *files], out, manifest)
    return Packed(target, sha256_of(target), target.stat().st_size, manifest)


def _facts(
    backend: catalog.Backend, plugin: Path, ggml_version: str, arch: str | None
) -> tuple[list[str], str]:
    """(architectures, toolkit) of ``plugin``: from its build tree, else from the record of
    the pack it came from, else ``arch`` (``--arch``), which must agree with them."""
    facts = build_facts(backend, ggml_version, sha256_of(plugin))
    record = installed_record(plugin)
    if facts is None and record is not None and record.get("plugin_sha256") == sha256_of(plugin):
        facts = list(record["architectures"]), str(record.get("toolkit", ""))
    given = check_archs(backend.name, arch.split(",")) if arch else None
    if facts is not None and given is not None and sorted(given) != sorted(facts[0]):
        raise PackError(
            f"{plugin.name} was built for {', '.join(facts[0]) or 'no'} "
            f"architectures, not {arch}: rebuild it with --arch {arch}"
        )
    if facts is None:
        if given is None and backend.name in ("cuda", "rocm"):
            raise PackError(
                f"cannot tell which GPU architectures {plugin} was built for (its "
                "build tree is gone or holds another build): say them with --arch,"
                " or build it again and pack"
            )
        facts = (given or [], "")
    return facts


def _write(stage: Path, names: list[str], out: Path | None, manifest: PackManifest) -> Path:
    """The pack of ``names`` at ``out`` (a ``.tar.gz`` file, else a folder where it gets
    ``pack_name``), written under a temporary name and renamed: never half a pack."""
    target = (out or Path.cwd()).expanduser()
    if target.is_dir() or not target.name.endswith(SUFFIX):  # a folder, maybe a new one
        target = target / pack_name(manifest)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        _tar(stage, names, tmp_out)
        os.replace(tmp_out, target)
    finally:
        tmp_out.unlink(missing_ok=True)
    return target

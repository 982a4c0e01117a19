"""Fetching and unpacking pinned NVIDIA wheels, and completing a toolkit tree (see ``wheels``).

``download`` runs ``pip download`` with this machine's sha256 of every wheel
(``--require-hashes``: pip refuses a file that differs before anything reads
it), no dependencies, wheels only, and no pip cache (half a gigabyte kept twice
helps nobody).  ``unpack_wheel`` takes only regular files below
``nvidia/<folder>/`` and refuses any member whose name could land outside the
tree, and any link or special file (the wheels hold none).  ``complete_tree``
adds what a toolkit install has and the wheels lack: ``lib64`` (nvcc's profile
links from there on 64-bit hosts), the ``libX.so`` development links cmake's
``find_library`` looks for, and ``lib/stubs/libcuda.so``: every driver function
``cuda.h`` declares, as a no-op with the soname ``libcuda.so.1``, built with the
host compiler.  It is only linked against, never loaded: the plugin records
``libcuda.so.1``, and at run time that is the driver's own.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, NamedTuple

from localllm.backends.isolated import pip_argv, stream, work_dir
from localllm.errors import LocalLLMError

RUNTIME = re.compile(r"lib(cudart|cublas|cublasLt)\.so\.\d+")  # what the plugin loads


class CudaWheelError(LocalLLMError):
    """NVIDIA's wheels cannot be used or installed here; the message says why."""


_DRIVER_FN = re.compile(r"\bCUresult\s+(cu\w+)\s*\(")
_EXEC = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


class Pin(NamedTuple):
    """One wheel as pinned: pip fetches exactly this file or nothing."""

    name: str
    version: str
    sha256: str


def download(
    pins: list[Pin],
    dest: Path,
    log: IO[str],
    progress: Callable[[str, int, int], None] | None = None,
    *,
    what: str,
    offline: str,
    find_links: Path | None = None,
) -> list[Path]:
    """The ``pins`` in ``dest`` (in that order), each checked by pip against its sha256;
    from ``find_links`` alone when given (a wheelhouse), else from the package index.
    ``what`` and ``offline`` word the failure ("the CUDA 13.0 wheels", what to do
    without an index)."""
    dest.mkdir(parents=True, exist_ok=True)
    req = dest.parent / "pinned.txt"
    req.write_text("".join(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in pins))
    where = ["--no-index", "--find-links", str(find_links)] if find_links else []
    argv = pip_argv(
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--require-hashes",
        "--no-cache-dir",
        "--progress-bar",
        "off",
        *where,
        "-r",
        str(req),
        "-d",
        str(dest),
    )
    started = [0]
    if progress:
        progress("toolkit", 0, len(pins))

    def on_line(line: str) -> None:
        if line.lstrip().startswith("Downloading ") and progress:
            progress("toolkit", started[0], len(pins))
            started[0] += 1

    rc, tail = stream(argv, log, on_line)
    if "DO NOT MATCH THE HASHES" in "\n".join(tail):
        raise CudaWheelError(
            "a CUDA wheel the package index served does not have the sha256 pinned in this "
            "localllm; pip refused it before anything of it was used. Check the index "
            "(pip config list) or its proxy; the whole output is in the log"
        )
    got = sorted(dest.glob("*.whl"))
    if rc != 0 or len(got) != len(pins):
        last = " | ".join(ln for ln in tail[-3:] if ln)
        raise CudaWheelError(
            f"could not download {what} with pip: {last or 'no file'}. Without a "
            f"package index, {offline}"
        )
    order = {p.name.replace("-", "_"): i for i, p in enumerate(pins)}
    return sorted(got, key=lambda p: order.get(p.name.split("-")[0], len(order)))


def _refuse(wheel: Path, name: str, why: str) -> CudaWheelError:
    return CudaWheelError(f"refusing {wheel.name}: member {name!r} {why}")


def unpack_wheel(wheel: Path, folder: str, dest: Path) -> int:
    """Regular files of ``wheel`` below ``nvidia/<folder>/`` into ``dest``; how many."""
    count = 0
    dest.mkdir(parents=True, exist_ok=True)
    top = dest.resolve()
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            parts = name.split("/")
            if parts[:2] != ["nvidia", folder] or name.endswith("/"):
                continue  # metadata, nvidia/__init__.py, folder entries
            rel = parts[2:]
            if "\\" in name or any(p in ("", ".", "..") or ":" in p for p in rel):
                raise _refuse(wheel, name, "has an unsafe path")
            mode = info.external_attr >> 16
            if mode and not stat.S_ISREG(mode):
                raise _refuse(wheel, name, "is a link or special file")
            target = dest.joinpath(*rel)
            if not target.resolve().is_relative_to(top):
                raise _refuse(wheel, name, "would land outside the toolkit folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            target.chmod(0o755 if mode & _EXEC else 0o644)
            count += 1
    return count


def complete_tree(tree: Path, cxx: str, log: IO[str]) -> None:
    """lib64, the development links and the driver stand-in (see the module docstring)."""
    for need in ("bin/nvcc", "nvvm/bin/cicc", "include/cuda.h", "include/cuda_runtime.h"):
        if not (tree / need).is_file():
            raise CudaWheelError(f"the CUDA wheels hold no {need}: this set cannot compile")
    lib = tree / "lib"
    (tree / "lib64").symlink_to("lib")
    for p in sorted(lib.iterdir()):
        if RUNTIME.fullmatch(p.name):
            (lib / p.name.rsplit(".", 1)[0]).symlink_to(p.name)
    driver_stub(tree, cxx, log)


def driver_stub(tree: Path, cxx: str, log: IO[str]) -> Path:
    """``lib/stubs/libcuda.so``: the driver API of ``tree``'s cuda.h, as no-ops."""
    names: set[str] = set()
    # Both spellings cuda.h maps names to (cuMemcpy_v2, cuMemcpy_ptds): whichever the
    # plugin's sources pick, the linker finds it.
    for extra in ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM=1"]):
        argv = [cxx, "-E", "-P", "-x", "c", *extra, "-I", str(tree / "include"), "-"]
        out = _run(argv, "#include <cuda.h>\n", log)
        names |= set(_DRIVER_FN.findall(out))
    if not names:
        raise CudaWheelError("cuda.h declares no driver function: the wheels look broken")
    stubs = tree / "lib" / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    src = stubs / "libcuda-stub.c"
    src.write_text(
        "/* Link-time stand-in for the NVIDIA driver's libcuda.so.1, never loaded:"
        " see localllm/backends/cuda/unpack.py. */\n"
        + "".join(f"int {n}(void) {{ return 999; }}\n" for n in sorted(names))
    )
    out_path = stubs / "libcuda.so"
    _run(
        [
            cxx,
            "-x",
            "c",
            "-shared",
            "-fPIC",
            "-o",
            str(out_path),
            "-Wl,-soname,libcuda.so.1",
            str(src),
        ],
        None,
        log,
    )
    return out_path


def _run(argv: list[str], stdin: str | None, log: IO[str]) -> str:
    log.write(f"$ {' '.join(argv)}\n")
    try:
        out = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=300, cwd=work_dir()
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CudaWheelError(f"{Path(argv[0]).name} failed: {exc}") from exc
    log.write(out.stderr)
    if out.returncode != 0:
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        raise CudaWheelError(f"making the link-time driver stand-in failed: {tail}")
    return out.stdout

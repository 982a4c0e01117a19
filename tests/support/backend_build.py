"""Stand-ins for building backends: a ggml source tarball, CUDA's header, and a pip that
must not run."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

CMAKE = b"set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 25)\nset(GGML_VERSION_PATCH 3)\n"


def make_tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


CUDA_H = b"""typedef int CUresult;
#define CUDAAPI
#define cuMemAlloc cuMemAlloc_v2
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#define cuMemcpy cuMemcpy_ptds
#endif
CUresult CUDAAPI cuInit(unsigned int flags);
CUresult CUDAAPI cuMemAlloc(void **p, unsigned long n);
CUresult CUDAAPI cuMemcpy(void *d, const void *s, unsigned long n);
"""


def plant_pip(folder: Path, marker: Path) -> None:
    """A ``pip.py`` and a ``pip/`` package in ``folder`` that touch ``marker`` if imported."""
    body = f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nraise SystemExit(1)\n"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pip.py").write_text(body)
    (folder / "pip").mkdir()
    (folder / "pip" / "__init__.py").write_text("")
    (folder / "pip" / "__main__.py").write_text(body)

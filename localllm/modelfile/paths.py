"""File references in Modelfiles: which ``FROM`` values are paths, and where they may point.

The CLI resolves paths relative to the Modelfile and uploads the files; the
daemon itself only reads a path named in ``/api/create``'s ``from`` when it lies
inside the model store or a folder listed in ``LOCALLLM_ALLOWED_PATHS``, so an
API client cannot make the daemon read arbitrary files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from localllm import config
from localllm.errors import Forbidden, InvalidRequest

_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def looks_like_path(value: str) -> bool:
    """Whether a ``FROM`` value names a file or folder rather than a model."""
    v = value.strip()
    return (
        v.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or v in (".", "..")
        or v.lower().endswith(".gguf")
        or bool(_DRIVE.match(v))
    )


def resolve_local(value: str, base_dir: Path) -> Path:
    """A Modelfile path as the CLI reads it: ``~`` expanded, relative to the Modelfile."""
    path = Path(os.path.expanduser(value.strip()))
    return path if path.is_absolute() else base_dir / path


def model_files(path: Path) -> list[Path]:
    """The GGUF file(s) a path stands for: the file, or a folder's ``*.gguf`` in name order."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
        if not files:
            raise InvalidRequest(f'no GGUF files in folder "{path}"')
        return files
    if not path.is_file():
        raise InvalidRequest(f'FROM path "{path}" does not exist')
    return [path]


def allowed_roots(store_root: Path) -> list[Path]:
    roots = [store_root, *(Path(p).expanduser() for p in config.ALLOWED_PATHS.get())]
    return [r.resolve() for r in roots]


def allowed_path(value: str, store_root: Path) -> Path:
    """``value`` resolved (symlinks too) if the daemon may read it; 400/403 otherwise."""
    path = Path(os.path.expanduser(value.strip()))
    if not path.is_absolute():
        raise InvalidRequest(
            f'FROM path "{value}" is relative; the server needs an absolute '
            "path (the localllm CLI uploads local files instead)"
        )
    real = path.resolve()
    for root in allowed_roots(store_root):
        if real == root or root in real.parents:
            if not real.exists():
                raise InvalidRequest(f'FROM path "{value}" does not exist')
            return real
    raise Forbidden(
        f'FROM path "{value}" is outside the folders this server may read; '
        "upload the file instead (localllm create does) or add its folder to "
        "LOCALLLM_ALLOWED_PATHS"
    )

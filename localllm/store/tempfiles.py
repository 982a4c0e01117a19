"""How the store writes files safely, and tells its debris from work in progress.

Temp files are ``.tmp-<pid>-…`` beside their destination: a file under its final name is
always whole (``atomic_write``), start-up clean-up removes at once the temp files whose
writer process is gone, and only old ones of an unknown writer (older names without a
pid).  Partial downloads carry no pid (a pull resumes another process's partial), so
``open_by_live_process`` asks ``/proc`` who holds them open.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")
TMP_PREFIX = ".tmp-"
_TMP_PID = re.compile(r"\.tmp-(\d+)-")
_UNKNOWN_TMP_AGE = 3600.0


def tmp_name(stem: str = "") -> str:
    """A fresh temp-file name tagged with this process's id (see ``stale_tmp``)."""
    return f"{TMP_PREFIX}{os.getpid()}-{stem}{secrets.token_hex(8)}"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (ours, or another user's)."""
    return pid > 0 and _pid_alive(pid)


def open_by_live_process(files: Iterable[Path]) -> set[Path] | None:
    """Which of ``files`` some running process holds open, from ``/proc/*/fd``.

    Partial names carry no pid (a pull resumes another process's partial), but a
    download keeps its partial open from first byte to commit, retries included.
    None where ``/proc`` cannot tell (not Linux): callers must then assume the worst.
    """
    wanted: dict[tuple[int, int], Path] = {}
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        wanted[(st.st_dev, st.st_ino)] = path
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    found: set[Path] = set()
    if not wanted:
        return found
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                st = fd.stat()  # follows the link to the open file
            except OSError:
                continue
            hit = wanted.get((st.st_dev, st.st_ino))
            if hit is not None:
                found.add(hit)
    return found


def stale_tmp(path: Path, now: float) -> bool:
    """Whether a ``.tmp-*`` file is debris: its writer's process has ended, or (no pid
    in the name) it is over an hour old.  Partial downloads (``-partial``) never are."""
    match = _TMP_PID.match(path.name)
    if match is not None:
        return not _pid_alive(int(match.group(1)))
    try:
        return now - path.stat().st_mtime > _UNKNOWN_TMP_AGE
    except FileNotFoundError:
        return False


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], T]) -> T:
    """Run ``write`` into a temp file beside ``path``, fsync it and rename it to ``path``
    when ``write`` returns: a file under its name is always whole.  Its result."""
    tmp = path.with_name(tmp_name(f"{path.name}."))
    try:
        with open(tmp, "wb") as fh:
            result = write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return result


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file, fsync and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: fh.write(data))

"""Free space on the model store's disk: the floor a writer must keep
(``LOCALLLM_MIN_FREE_DISK``), refused with ``NoSpace`` (507), and a full disk told to
clients as the same 507 rather than an internal error with our paths in it.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

from localllm.errors import LocalLLMError
from localllm.format import format_bytes


class NoSpace(LocalLLMError):
    """Storing this would leave the store's disk below the free space it must keep."""

    status = 507  # Insufficient Storage (RFC 4918)


def check_room(root: Path, incoming: int, keep_free: int, *, stored: int = 0) -> None:
    """Raise ``NoSpace`` when ``incoming`` more bytes under ``root`` would leave less
    than ``keep_free`` free (nothing to check when ``keep_free`` is 0); ``stored``:
    what the writer holds already, for the message.  The message names sizes and
    the setting, not the folder: it goes to clients."""
    if keep_free <= 0:
        return
    _, free = free_space(root)
    if free - incoming >= keep_free:
        return
    if stored:
        what = f"after {format_bytes(stored)} of this blob, {format_bytes(free)} is"
    elif incoming:
        what = (
            f"storing {format_bytes(incoming)} would leave {format_bytes(max(free - incoming, 0))}"
        )
    else:
        what = f"only {format_bytes(free)} is"
    raise NoSpace(
        f"not enough disk space: {what} free on the model store's disk, below "
        f"LOCALLLM_MIN_FREE_DISK ({format_bytes(keep_free)}); free some space "
        "(localllm rm, localllm prune) or lower the setting"
    )


def free_space(path: Path) -> tuple[Path, int]:
    """Free bytes on the disk that holds ``path`` (or, before it exists, its nearest
    existing parent), and the folder actually measured; creates nothing."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


@contextlib.contextmanager
def disk_full_is_no_space() -> Iterator[None]:
    # A full disk is the client's answer (507), not an internal error with our paths in it.
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpace("not enough disk space: the model store's disk is full") from None
        raise

"""Whether a plugin file may be loaded: who could have written it or the folders above it.

Loading a plugin runs its code in the runner, the probe and the worker, so a
plugin is as trustworthy as every account that could have written the file or
replaced any folder on its way.  ``why_unsafe`` walks the real path of the file
(symlinks resolved) up to ``/`` and refuses when the file is not a regular file,
or when the file or any folder above it is owned by someone other than this
user or root, or is writable by group or others.  Above the backends folder a
world-writable folder with the sticky bit (``/tmp``) is allowed: the sticky
bit keeps others from renaming or replacing what this user owns inside it,
and the folders below are checked in turn.  The backends folder and everything
inside it get no such exception.  Every refusal names the path and its fix.
On platforms without POSIX owners (Windows) nothing is checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _check(path: Path, st: os.stat_result, uid: int, sticky_ok: bool) -> str:
    """Why ``path`` (already lstat'ed) could be written by another account, or ""."""
    if st.st_uid not in (uid, 0):
        return (
            f"{path} belongs to {_owner(st.st_uid)}, not to you or root: move the "
            "backends folder (LOCALLLM_BACKENDS) to a folder of your own, or have it "
            "chown'ed to you"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & _OTHERS_WRITE and not (sticky_ok and mode & stat.S_ISVTX):
        who = (
            "group and others"
            if mode & _OTHERS_WRITE == _OTHERS_WRITE
            else "its group"
            if mode & stat.S_IWGRP
            else "others"
        )
        return f"{path} is writable by {who} (mode {mode:o}): run 'chmod go-w {path}'"
    return ""


def why_unsafe(path: Path, backends_root: Path, uid: int | None = None) -> str:
    """ "" when the plugin at ``path`` may be loaded, else why not (a sentence with the fix).

    ``backends_root`` is the backends folder: from there down, no folder may be
    writable by others even with the sticky bit.  ``uid`` is the account that
    counts as "you" (default: this process's effective user).
    """
    if not hasattr(os, "geteuid"):
        return ""
    me = os.geteuid() if uid is None else uid
    try:
        entry_dir = Path(os.path.realpath(path.parent))
        real = Path(os.path.realpath(path))
        root = Path(os.path.realpath(backends_root))
        st = os.lstat(real)
    except OSError as exc:
        return f"refusing to load {path}: cannot check it: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return f"refusing to load {path}: not a regular file"
    why = _check(real, st, me, sticky_ok=False)
    if why:
        return f"refusing to load {path}: {why}"
    # The folder holding the entry and the folder holding the real file (they differ when
    # the entry is a symlink): either could be swapped by whoever may write it.
    seen: set[Path] = set()
    for start in (entry_dir, real.parent):
        for folder in (start, *start.parents):
            if folder in seen:
                break
            seen.add(folder)
            try:
                fst = os.lstat(folder)
            except OSError as exc:
                return f"refusing to load {path}: cannot check {folder}: {exc.strerror or exc}"
            if not stat.S_ISDIR(fst.st_mode):
                return f"refusing to load {path}: {folder} is not a folder"
            inside = folder == root or root in folder.parents
            why = _check(folder, fst, me, sticky_ok=not inside)
            if why:
                return f"refusing to load {path}: {why}"
    return ""


def make_dirs(folder: Path) -> None:
    """Create ``folder`` and any missing parent as 0755, whatever the umask: a umask of 002
    would make them group-writable, and the plugins in them would be refused at load."""
    missing = []
    for d in (folder, *folder.parents):
        if d.exists():
            break
        missing.append(d)
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue  # made meanwhile by another build: its mode is checked at load
        d.chmod(0o755)

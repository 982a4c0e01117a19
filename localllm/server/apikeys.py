"""The daemon's API keys: ``LOCALLLM_API_KEY`` and the labelled keys of ``LOCALLLM_API_KEYS_FILE``.

The file holds one key a line, for a team sharing a daemon::

    # label   key
    alice     3f9c0e5e4b2a...
    ci-runner 9d1e77c0aa41...
    b81f0c2e7d55...            <- a key alone: labelled key-<8 hex digits of its SHA-256>

A label is 1-64 letters, digits, ``_ . @ -``; a key is 1-4096 printable ASCII
characters without spaces.  ``#`` starts a comment (a whole line, or after a space),
blank lines are skipped, and a malformed line is skipped with a warning that names
its number, never its text.  A key's label is what the access log and ``/metrics``
show of it (``key_label``); the key itself is never logged.  ``LOCALLLM_API_KEY`` is
labelled ``default``.

Changes are picked up without a restart: a request that needs a key looks at the
file's size, times, inode and mode at most once a second (no watcher thread), and
reads it again when they changed, so a key removed from the file stops working
within a second.  A file written in the same clock tick as it was last read cannot
be told apart by its times: while its mtime is that recent, it is read again at
each check ("racy git").

The file must be private, as ssh insists for a private key: the daemon refuses to
start when other users may read or write it, or its group may write it (a group
may read it: a service account's group).  A file that turns unreadable, disappears
or becomes open to others while the daemon runs stops every key in it (an error in
the log says why) until it is fixed; ``LOCALLLM_API_KEY`` keeps working.

Keys are matched by their SHA-256 digest, so the time a lookup takes says nothing
about how close a guess was; ``LOCALLLM_API_KEY`` is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from localllm.errors import LocalLLMError

log = logging.getLogger("localllm.server")

# Where the security layer leaves the accepted key's label for the access log and metrics.
SCOPE_KEY_LABEL = "localllm.key_label"
DEFAULT_LABEL = "default"  # LOCALLLM_API_KEY's
RECHECK_SECONDS = 1.0
MAX_FILE_BYTES = 1 << 20
_RACY_NS = 2_000_000_000  # a file modified this close to its last read is read again
_LABEL = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_KEY = re.compile(r"[!-~]{1,4096}")  # printable ASCII, no space: what a header carries whole

Stamp = tuple[int, int, int, int, int]  # mtime, ctime, size, inode, mode


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def default_label(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


def parse(text: str) -> tuple[dict[bytes, str], list[str]]:
    """The keys of a keys file (digest -> label) and a warning per line skipped."""
    keys: dict[bytes, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*", "", raw).strip()
        if not line:
            continue
        words = line.split()
        if len(words) == 1:
            label, key = default_label(words[0]), words[0]
        elif len(words) == 2:
            label, key = words
        else:
            problems.append(f"line {number}: more than a label and a key")
            continue
        if not _LABEL.fullmatch(label):
            problems.append(f"line {number}: a label is 1-64 letters, digits, '_', '.', '@', '-'")
        elif not _KEY.fullmatch(key):
            problems.append(f"line {number}: a key is printable ASCII without spaces")
        elif digest(key) in keys:
            problems.append(f"line {number}: a key already listed (the first label stays)")
        else:
            keys[digest(key)] = label
    return keys, problems


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode)


def _exposure(st: os.stat_result) -> str:
    """Why the file is too open to trust ('' when it is private enough)."""
    if os.name != "posix":
        return ""  # modes say nothing about Windows ACLs
    if st.st_mode & 0o027:
        return (
            f"other users can read or change it (mode {st.st_mode & 0o777:o}); "
            "chmod 600 it (640 lets a group read it)"
        )
    return ""


def read_file(path: str) -> tuple[dict[bytes, str], list[str], os.stat_result]:
    """Read and check the keys file; LocalLLMError when it cannot be used at all."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size > MAX_FILE_BYTES:
                raise LocalLLMError(f"LOCALLLM_API_KEYS_FILE={path}: larger than 1 MiB")
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise LocalLLMError(
            f"LOCALLLM_API_KEYS_FILE={path}: cannot read it ({exc.strerror or exc})"
        ) from None
    if why := _exposure(st):
        raise LocalLLMError(f"LOCALLLM_API_KEYS_FILE={path}: {why}")
    keys, problems = parse(raw.decode("utf-8", "replace"))
    return keys, problems, st


def check_file(path: str) -> int:
    """At start: the file must be readable and private (else LocalLLMError); the number
    of keys, each skipped line warned about."""
    keys, problems, _ = read_file(path)
    for problem in problems:
        log.warning("LOCALLLM_API_KEYS_FILE=%s: skipped %s", path, problem)
    if not keys:
        log.warning("LOCALLLM_API_KEYS_FILE=%s holds no key yet: no key is accepted", path)
    return len(keys)


@dataclass
class KeyRing:
    """The keys a request may carry, each with its label; the file re-read as it changes."""

    api_key: str = ""
    path: str = ""
    clock: Callable[[], float] = time.monotonic
    _keys: dict[bytes, str] = field(default_factory=dict)
    _stamp: Stamp | None = None
    _read_at_ns: int = 0
    _checked: float = float("-inf")
    _problem: str = ""

    @property
    def required(self) -> bool:
        """Whether requests need a key at all (a keys file with no key still does)."""
        return bool(self.api_key or self.path)

    def label(self, token: str) -> str | None:
        """The label of the key ``token``, or None when it is no key of ours."""
        if not token:
            return None
        if self.api_key and hmac.compare_digest(token.encode(), self.api_key.encode()):
            return DEFAULT_LABEL
        if not self.path:
            return None
        self._refresh()
        return self._keys.get(digest(token))

    def _refresh(self) -> None:
        now = self.clock()
        if now - self._checked < RECHECK_SECONDS:
            return
        self._checked = now
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._fail(f"cannot read it ({exc.strerror or exc})")
            return
        racy = st.st_mtime_ns >= self._read_at_ns - _RACY_NS
        if _stamp(st) == self._stamp and not racy:
            return
        read_at = time.time_ns()
        try:
            keys, problems, st = read_file(self.path)
        except LocalLLMError as exc:
            self._fail(str(exc).partition(": ")[2])
            return
        changed = keys != self._keys or self._problem
        self._keys, self._stamp, self._read_at_ns, self._problem = keys, _stamp(st), read_at, ""
        if changed:
            for problem in problems:
                log.warning("LOCALLLM_API_KEYS_FILE=%s: skipped %s", self.path, problem)
            labels = ", ".join(sorted(set(keys.values()))) or "none"
            log.info("LOCALLLM_API_KEYS_FILE: %d key(s) (labels: %s)", len(keys), labels)

    def _fail(self, why: str) -> None:
        """Fail closed: no key of the file works until it can be read and trusted again."""
        self._keys, self._stamp = {}, None
        if why != self._problem:
            self._problem = why
            log.error("LOCALLLM_API_KEYS_FILE=%s: %s; its keys are refused", self.path, why)

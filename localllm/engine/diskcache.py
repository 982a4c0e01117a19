"""Parked prompt states on disk, so a reload, an idle unload or a daemon restart keeps them.

The second tier behind ``park.py``: a copy that the host-memory cache takes
(``llama_state_seq_get_data``) is also written here, by a thread of its own so
no step waits on the disk, and a prompt that continues a copy found here
further than anything in memory brings it back through the same restore as a
parked copy.  An agent's long system prompt then costs one file read after a
restart instead of a prefill (minutes on a CPU for an 8B model).

Layout: ``<root>/<model key>/<prefix hash>.llpc``; the model key hashes what
makes saved cells valid (``cachefile.model_identity``: the model files' identity,
the store's blob digest or the file's content, libllama, the KV cache type, flash
attention), and the files' format, atomic writes and trust are ``cachefile.py``'s.
Nothing is handed to ``llama_state_seq_set_data`` before the size, the identity,
the owner and mode, and the MAC under this user's key are checked: a truncated,
corrupt, planted or foreign file is deleted and its prompt evaluated again.  The
folders are 0700 and the files 0600 (they hold what was asked); a cache folder
another account owns or may write, or an unusable key, turns the disk tier off
with a log line saying why.

The budget (``LOCALLLM_PROMPT_CACHE_DISK``) covers every model's folder: after
each write the least recently used files go (a file's mtime is its last use),
whichever runner wrote them.  Copies shorter than ``MIN_TOKENS`` are not
written: evaluating them costs less than reading a file.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import queue
import struct
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localllm.engine import cachefile
from localllm.engine.cachefile import SUFFIX
from localllm.engine.parked import Parked

if TYPE_CHECKING:
    from localllm.runner.messages import LoadOptions

log = logging.getLogger(__name__)

MIN_TOKENS = 256
MAX_PENDING = 4  # copies queued for the writer; more are dropped rather than held in memory


def open_disk(opts: LoadOptions, paths: list[str], n_ctx: int, n_swa: int) -> DiskCache | None:
    """The disk cache a runner loaded with ``opts`` uses, None when it has none."""
    if opts.prompt_cache_disk <= 0 or not opts.prompt_cache_dir or opts.embedding:
        return None
    from localllm.engine.binding import llama_version, native

    ffi, _ = native()  # buffers for the cells read back
    root = Path(opts.prompt_cache_dir)
    try:
        if not opts.prompt_cache_key:
            raise ValueError("no key file was given")
        key = cachefile.load_key(Path(opts.prompt_cache_key))
        cachefile.private_dir(root)
        identity = cachefile.model_identity(paths, llama_version(), opts.kv_type, opts.flash_attn)
        cache = DiskCache(root, identity, opts.prompt_cache_disk, ffi, n_ctx, n_swa, key=key)
    except (OSError, ValueError) as exc:
        log.warning("prompt cache: no disk cache for this model: %s", exc)
        return None
    return cache


class DiskCache:
    """One model's copies on disk (an index of their headers) and the writer thread.

    ``n_ctx`` bounds the copies this context can take back; ``n_swa`` as in park.py."""

    def __init__(
        self,
        root: Path,
        identity: cachefile.Identity,
        budget: int,
        ffi: Any,
        n_ctx: int,
        n_swa: int = 0,
        *,
        key: bytes,
    ) -> None:
        self.root, self.identity, self.budget, self.ffi = root, identity, budget, ffi
        self.n_ctx, self.n_swa, self.key = n_ctx, n_swa, key
        self.dir = root / cachefile.key(identity)
        if self.dir.exists():
            cachefile.private_dir(self.dir)  # ValueError: another's, or others may write it
        self._lock = threading.Lock()  # entries: the engine reads, the writer adds and drops
        self._queue: queue.Queue[Parked | None] = queue.Queue()
        self._pending: list[Parked] = []
        self._writer: threading.Thread | None = None
        self.entries: list[Parked] = self._scan()

    # ---- the engine's side --------------------------------------------------------
    def best(self, prompt: list[int], adapters: tuple[str, ...]) -> tuple[Parked, int] | None:
        """The copy on disk sharing the longest reusable prefix with ``prompt`` (at least
        ``MIN_TOKENS``), and that length."""
        best: tuple[Parked, int] | None = None
        with self._lock:
            for e in self.entries:
                n = e.reusable(prompt, adapters, self.n_swa)
                if (
                    n >= MIN_TOKENS
                    and len(e.tokens) <= self.n_ctx
                    and (best is None or n > best[1])
                ):
                    best = (e, n)
        return best

    def token_lists(self, adapters: tuple[str, ...]) -> list[list[int]]:
        """The tokens of every copy here made under ``adapters`` (checkpoints.py)."""
        with self._lock:
            return [e.tokens for e in self.entries if e.adapters == adapters]

    def load(self, entry: Parked) -> Parked | None:
        """``entry``'s cells read back and checked; None (and the file gone) when it is
        missing, truncated, corrupt or another model's."""
        from localllm.engine.parked import Parked

        path = self.dir / entry.file
        try:
            with open(path, "rb") as f:
                _, head = cachefile.checked_header(f, self.identity)
                if head is None or head[0]["n_tokens"] != len(entry.tokens):
                    raise ValueError("bad header")
                meta, tokens = head
                data = self.ffi.new("uint8_t[]", meta["size"])
                if f.readinto(self.ffi.buffer(data)) != meta["size"]:
                    raise ValueError("truncated")
            raw = cachefile.pack_tokens(tokens)
            mac = cachefile.mac(self.key, meta, raw, self.ffi.buffer(data))
            if tokens != entry.tokens or not hmac.compare_digest(mac, str(meta.get("mac"))):
                raise ValueError("not written by this user's localllm (its MAC does not match)")
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            log.warning("prompt cache: ignoring %s: %s", path.name, exc)
            self.drop(entry)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used: the last to go
        return Parked(tokens, entry.adapters, entry.exact, data, meta["size"], entry.file)

    def touch(self, entry: Parked) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.dir / entry.file)

    def drop(self, entry: Parked) -> None:
        """Forget a copy and delete its file (it failed to load, or was superseded)."""
        with self._lock:
            self.entries = [e for e in self.entries if e.file != entry.file]
        with contextlib.suppress(OSError):
            (self.dir / entry.file).unlink()

    def put(self, entry: Parked) -> None:
        """Queue a copy taken into host memory for writing, unless it is short, too big, or
        a copy already here (or queued) serves every prompt it would."""
        n = len(entry.tokens) if entry.exact < 0 else entry.exact
        if n < MIN_TOKENS or entry.size > self.budget or entry.data is None:
            return
        with self._lock:
            if any(
                e.reusable(entry.tokens, entry.adapters, self.n_swa) >= n
                for e in (*self.entries, *self._pending)
            ):
                return
            if len(self._pending) >= MAX_PENDING:
                return
            self._pending.append(entry)
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write_loop, name="prompt-cache-disk", daemon=True
            )
            self._writer.start()
        self._queue.put(entry)

    def close(self, timeout: float) -> None:
        """Let the writer finish what is queued, for at most ``timeout`` seconds."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join(timeout)

    # ---- files --------------------------------------------------------------------
    def _name(self, entry: Parked) -> str:
        return cachefile.key([entry.adapters, entry.exact, entry.tokens]) + SUFFIX

    def _scan(self) -> list[Parked]:
        """The index: every whole file of this model here, oldest use first; what is not
        whole or not this model's is deleted, and so are writes a dead runner left."""
        from localllm.engine.parked import Parked

        found: list[tuple[float, Parked]] = []
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        for name in names:
            path = self.dir / name
            if name.startswith("."):
                cachefile.sweep_temp(path)
                continue
            if not name.endswith(SUFFIX):
                continue
            try:
                with open(path, "rb") as f:
                    st, head = cachefile.checked_header(f, self.identity)
                if head is None:
                    raise ValueError("not a whole cache file of this model")
                meta, tokens = head
                found.append(
                    (
                        st.st_mtime,
                        Parked(
                            tokens,
                            tuple(meta["adapters"]),
                            int(meta["exact"]),
                            None,
                            int(meta["size"]),
                            name,
                        ),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
                log.warning("prompt cache: removing %s: %s", name, exc)
                with contextlib.suppress(OSError):
                    path.unlink()
        return [p for _, p in sorted(found, key=lambda x: x[0])]

    def _write_loop(self) -> None:
        # Hashing and writing a large copy takes a core for a second or more: let the
        # steps of the requests running meanwhile go first.  Only Linux gives a thread its
        # own nice (elsewhere a thread id passed as a pid could name another process).
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while (entry := self._queue.get()) is not None:
            try:
                self._write(entry)
            except OSError as exc:
                log.warning("prompt cache: could not write a copy: %s", exc)
            finally:
                with self._lock:
                    self._pending = [e for e in self._pending if e is not entry]

    def _write(self, entry: Parked) -> None:
        name = self._name(entry)
        raw = cachefile.pack_tokens(entry.tokens)
        data = self.ffi.buffer(entry.data, entry.size)
        try:
            cachefile.private_dir(self.dir)
        except ValueError as exc:
            raise OSError(str(exc)) from None
        meta: cachefile.Header = {
            "identity": self.identity,
            "adapters": list(entry.adapters),
            "exact": entry.exact,
            "n_tokens": len(entry.tokens),
            "size": entry.size,
        }
        meta["mac"] = cachefile.mac(self.key, meta, raw, data)
        cachefile.write(self.dir / name, meta, raw, data)
        entry.file = name
        stored = type(entry)(entry.tokens, entry.adapters, entry.exact, None, entry.size, name)
        with self._lock:
            # Copies this one serves as well are redundant now (the rule park.py keeps).
            gone = [
                e
                for e in self.entries
                if e.exact < 0
                and e.file != name
                and stored.reusable(e.tokens, e.adapters, self.n_swa) >= len(e.tokens)
            ]
            self.entries = [e for e in self.entries if e not in gone and e.file != name]
            self.entries.append(stored)
        for e in gone:
            with contextlib.suppress(OSError):
                (self.dir / e.file).unlink()
        self._evict()

    def _evict(self) -> None:
        """Delete the least recently used files of every model until the budget holds."""
        files: list[tuple[float, int, Path]] = []
        for path in self.root.glob(f"*/*{SUFFIX}"):
            with contextlib.suppress(OSError):
                st = path.stat()
                files.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.budget:
                break
            with contextlib.suppress(OSError):
                path.unlink()
            total -= size
        if total < sum(size for _, size, _ in files):  # some went: this model's too?
            with self._lock:
                self.entries = [e for e in self.entries if (self.dir / e.file).exists()]

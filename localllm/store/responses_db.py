"""Stored Responses and conversations: one SQLite file, private to its owner.

Owned here: the database ``paths.responses_db()`` (the standard library's
``sqlite3``, WAL mode), its retention and its size bound.  What is kept is
opaque JSON to this module: the ``response`` object as it was answered, the
request's own ``input`` items (each with its id), the id of the response it
continued, and each conversation's metadata and items in order.  Shaping them
into OpenAI's objects is :mod:`localllm.compat.responses.stored`'s; the routes
are :mod:`localllm.server.routes_stored`.

Every method blocks on the disk, so the daemon calls them from worker threads:
one connection (``check_same_thread=False``) behind a lock, opened on first
use, so constructing a :class:`ResponsesDB` touches nothing.  The file and its
WAL companions are created mode 0600: a stored conversation may be private.

Rows older than the retention (``LOCALLLM_RESPONSES_RETENTION``; a
conversation counts from its last change) are invisible at once and deleted
at the next write.  Past ``LOCALLLM_RESPONSES_MAX_SIZE``, :meth:`ResponsesDB.check_room`
refuses with a 507 that names the setting.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localllm.api.wire import JSONObject
from localllm.errors import LocalLLMError
from localllm.format import format_bytes as fmt_size

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    stored REAL NOT NULL,
    previous TEXT,
    response TEXT NOT NULL,
    input TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_stored ON responses (stored);
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    created INTEGER NOT NULL,
    changed REAL NOT NULL,
    metadata TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS conversation_items (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    item TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conversation_items_by ON conversation_items (conversation, seq);
"""
# A response's chain is followed at most this far back (the context ends it long before).
MAX_CHAIN = 10_000


class StoreFull(LocalLLMError):
    """The database reached ``LOCALLLM_RESPONSES_MAX_SIZE``."""

    status = 507


@dataclass(frozen=True)
class StoredResponse:
    id: str
    response: JSONObject  # the response object as answered
    input: list[JSONObject]  # this request's input items, each with its id
    previous: str | None  # the response this one continued


@dataclass(frozen=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ResponsesDB:
    """The stored Responses and conversations of one daemon (see the module docstring)."""

    def __init__(self, path: Path, retention_s: float, max_size: int) -> None:
        self.path = path
        self.retention_s = retention_s
        self.max_size = max_size
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    # -- the connection -----------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Created private before SQLite opens it; SQLite gives its -wal and -shm files the
        # database's own mode.  An older file is made private too.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(self.path, 0o600)
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(_SCHEMA)
        return conn

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                self._conn = self._open()
            yield self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A transaction that first deletes what outlived the retention."""
        with self._db() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                cutoff = self._cutoff()
                conn.execute("DELETE FROM responses WHERE stored < ?", (cutoff,))
                conn.execute("DELETE FROM conversations WHERE changed < ?", (cutoff,))
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _cutoff(self) -> float:
        return -math.inf if self.retention_s == math.inf else time.time() - self.retention_s

    def check_room(self) -> None:
        """A 507 naming the setting when the database is at its size bound."""
        if self.max_size <= 0:
            return
        with self._db() as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            page = conn.execute("PRAGMA page_size").fetchone()[0]
        used = (pages - free) * page
        if used >= self.max_size:
            raise StoreFull(
                f"the response store is full ({fmt_size(used)} of LOCALLLM_RESPONSES_MAX_SIZE="
                f"{fmt_size(self.max_size)}): delete stored responses or conversations, "
                "shorten LOCALLLM_RESPONSES_RETENTION, raise the limit, or send store: false"
            )

    # -- responses ----------------------------------------------------------------------

    def save_response(
        self, response: JSONObject, items: list[JSONObject], previous: str | None
    ) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
                (str(response["id"]), time.time(), previous, _dumps(response), _dumps(items)),
            )

    def response(self, response_id: str) -> StoredResponse | None:
        with self._db() as conn:
            row = conn.execute(
                "SELECT previous, response, input FROM responses WHERE id = ? AND stored >= ?",
                (response_id, self._cutoff()),
            ).fetchone()
        if row is None:
            return None
        return StoredResponse(response_id, json.loads(row[1]), json.loads(row[2]), row[0])

    def chain(self, response_id: str) -> list[StoredResponse] | None:
        """The response and those it continued, oldest first; None when it is unknown.
        A link deleted or expired ends the chain there."""
        found: list[StoredResponse] = []
        at: str | None = response_id
        while at is not None and len(found) < MAX_CHAIN:
            stored = self.response(at)
            if stored is None:
                break
            found.append(stored)
            at = stored.previous
        return found[::-1] if found else None

    def delete_response(self, response_id: str) -> bool:
        with self._write() as conn:
            return conn.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    # -- conversations ------------------------------------------------------------------

    def create_conversation(
        self, conv_id: str, metadata: dict[str, str], items: list[JSONObject]
    ) -> Conversation:
        now = time.time()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?)",
                (conv_id, int(now), now, _dumps(metadata)),
            )
            self._insert_items(conn, conv_id, items)
        return Conversation(conv_id, int(now), metadata)

    def conversation(self, conv_id: str) -> Conversation | None:
        with self._db() as conn:
            row = conn.execute(
                "SELECT created, metadata FROM conversations WHERE id = ? AND changed >= ?",
                (conv_id, self._cutoff()),
            ).fetchone()
        return None if row is None else Conversation(conv_id, row[0], json.loads(row[1]))

    def update_conversation(self, conv_id: str, metadata: dict[str, str]) -> bool:
        with self._write() as conn:
            return (
                conn.execute(
                    "UPDATE conversations SET metadata = ?, changed = ? WHERE id = ?",
                    (_dumps(metadata), time.time(), conv_id),
                ).rowcount
                > 0
            )

    def delete_conversation(self, conv_id: str) -> bool:
        with self._write() as conn:
            return conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,)).rowcount > 0

    def _insert_items(
        self, conn: sqlite3.Connection, conv_id: str, items: list[JSONObject]
    ) -> None:
        conn.executemany(
            "INSERT INTO conversation_items (conversation, id, item) VALUES (?, ?, ?)",
            [(conv_id, str(item["id"]), _dumps(item)) for item in items],
        )

    def add_items(self, conv_id: str, items: list[JSONObject]) -> bool:
        """Append ``items``; False when the conversation is unknown."""
        with self._write() as conn:
            touched = conn.execute(
                "UPDATE conversations SET changed = ? WHERE id = ?", (time.time(), conv_id)
            ).rowcount
            if touched:
                self._insert_items(conn, conv_id, items)
            return touched > 0

    def items(self, conv_id: str) -> list[JSONObject]:
        """The conversation's items, oldest first."""
        with self._db() as conn:
            rows = conn.execute(
                "SELECT item FROM conversation_items WHERE conversation = ? ORDER BY seq",
                (conv_id,),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def delete_item(self, conv_id: str, item_id: str) -> bool:
        with self._write() as conn:
            gone = conn.execute(
                "DELETE FROM conversation_items WHERE conversation = ? AND id = ?",
                (conv_id, item_id),
            ).rowcount
            if gone:
                conn.execute(
                    "UPDATE conversations SET changed = ? WHERE id = ?", (time.time(), conv_id)
                )
            return gone > 0

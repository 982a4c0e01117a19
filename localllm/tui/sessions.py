"""Chats kept on disk: one SQLite file (``paths.chats_db()``) with chats and their messages.

A chat holds its model and its settings (system prompt, sampling options,
keep-alive) as JSON, so reopening it restores exactly what the user chose.
Messages keep content, thinking, tool calls, the reply's stats, a
``partial`` flag for replies cut short (stopped, or the daemon went away) and
the user's image attachments (name, size and the file's base64, so a reopened
chat sends the very same bytes again and the engine's prefix cache still
matches).

Schema versions: 1 had no ``images`` column; ``_migrate`` adds it to a
database an older version created.

The file is opened on first use, never at import.  ``clock`` is injectable so
that snapshot tests see fixed timestamps.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from localllm.api.wire import ToolCall

if TYPE_CHECKING:
    from localllm.api.bodies import ChatMessage, Options

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    thinking TEXT NOT NULL DEFAULT '',
    tool_calls TEXT NOT NULL DEFAULT '[]',
    stats TEXT NOT NULL DEFAULT '{}',
    partial INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_chat ON messages(chat_id, id);
"""
_VERSION = 2


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a database of any earlier version up to ``_VERSION``.

    Columns are looked up rather than trusting ``user_version`` alone: version 1
    wrote its number on every open, so a number says less than the table does.
    """
    columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    with db:
        if "images" not in columns:
            db.execute("ALTER TABLE messages ADD COLUMN images TEXT NOT NULL DEFAULT '[]'")
        db.execute(f"PRAGMA user_version = {_VERSION}")


@dataclass
class ChatSettings:
    """What a chat sends with every request; ``None`` leaves the model's default."""

    system: str = ""
    temperature: float | None = None
    top_p: float | None = None
    num_ctx: int | None = None
    seed: int | None = None
    keep_alive: str | None = None
    # MCP servers' tools (``tui/mcptools.py``) when ``chat`` has no ``--mcp``: the file
    # and whether its calls run unasked (``--yes-tools``).
    mcp_file: str | None = None
    trust_tools: bool = False

    def options(self) -> Options:
        """The ``options`` object of a chat request: only what the user set."""
        pairs = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "num_ctx": self.num_ctx,
            "seed": self.seed,
        }
        return {k: v for k, v in pairs.items() if v is not None}

    @classmethod
    def from_json(cls, text: str) -> ChatSettings:
        try:
            raw = json.loads(text or "{}")
        except ValueError:
            raw = {}
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class AttachmentJSON(TypedDict):
    """An ``Attachment`` as its message's ``images`` column keeps it."""

    name: str
    size: int
    data: str


class ReplyStats(TypedDict, total=False):
    """What is kept with an assistant message (``tui/format.reply_stats``) and shown."""

    prompt_tokens: int
    tokens: int
    tok_s: float | None  # the daemon's decode rate
    ttft: float | None  # seconds the user waited for the first token
    done_reason: str
    interrupted: str  # the reply was cut short: "stopped", or "interrupted" by an error


@dataclass(frozen=True)
class Attachment:
    """An image sent with a user message: its file name, size and base64 bytes."""

    name: str
    size: int
    data: str  # base64, as the request carries it

    def to_json(self) -> AttachmentJSON:
        return {"name": self.name, "size": self.size, "data": self.data}

    @classmethod
    def from_json(cls, raw: AttachmentJSON) -> Attachment:
        return cls(str(raw.get("name", "image")), int(raw.get("size", 0)), str(raw.get("data", "")))


@dataclass
class StoredMessage:
    role: str
    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)  # as the reply carried them
    stats: ReplyStats = field(default_factory=lambda: ReplyStats())
    partial: bool = False
    images: list[Attachment] = field(default_factory=list)
    id: int = 0
    created_at: float = 0.0

    def wire(self) -> ChatMessage:
        """The message as a chat request expects it in ``messages``."""
        out: ChatMessage = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.images:
            out["images"] = [a.data for a in self.images]
        return out


@dataclass
class Chat:
    id: int
    title: str
    model: str
    settings: ChatSettings
    created_at: float
    updated_at: float


class Sessions:
    """The chat store.  ``Sessions(path)`` opens (and creates) the database lazily."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._db: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys = ON")
            db.executescript(_SCHEMA)
            _migrate(db)
            self._db = db
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- chats --------------------------------------------------------------------
    def create(
        self, model: str, title: str = "New chat", settings: ChatSettings | None = None
    ) -> Chat:
        now = self.clock()
        text = json.dumps(asdict(settings or ChatSettings()))
        with self.db:
            cur = self.db.execute(
                "INSERT INTO chats (title, model, settings, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (title, model, text, now, now),
            )
        return self.get(int(cur.lastrowid or 0))

    def get(self, chat_id: int) -> Chat:
        row = self.db.execute("SELECT * FROM chats WHERE id = ?", (chat_id,)).fetchone()
        if row is None:
            raise KeyError(chat_id)
        return _chat(row)

    def chats(self) -> list[Chat]:
        """Most recently used first."""
        rows = self.db.execute("SELECT * FROM chats ORDER BY updated_at DESC, id DESC")
        return [_chat(r) for r in rows]

    def rename(self, chat_id: int, title: str) -> None:
        with self.db:
            self.db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def set_model(self, chat_id: int, model: str) -> None:
        self._update(chat_id, "model", model)

    def save_settings(self, chat_id: int, settings: ChatSettings) -> None:
        self._update(chat_id, "settings", json.dumps(asdict(settings)))

    def delete(self, chat_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    def _update(self, chat_id: int, column: str, value: Any) -> None:
        with self.db:
            self.db.execute(
                f"UPDATE chats SET {column} = ?, updated_at = ? WHERE id = ?",
                (value, self.clock(), chat_id),
            )

    # -- messages -----------------------------------------------------------------
    def messages(self, chat_id: int) -> list[StoredMessage]:
        rows = self.db.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,))
        return [_message(r) for r in rows]

    def add(self, chat_id: int, message: StoredMessage) -> StoredMessage:
        now = self.clock()
        with self.db:
            cur = self.db.execute(
                "INSERT INTO messages (chat_id, role, content, thinking, tool_calls, stats, "
                "partial, images, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    chat_id,
                    message.role,
                    message.content,
                    message.thinking,
                    json.dumps(message.tool_calls),
                    json.dumps(message.stats),
                    int(message.partial),
                    _images_json(message.images),
                    now,
                ),
            )
            self.db.execute("UPDATE chats SET updated_at = ? WHERE id = ?", (now, chat_id))
        message.id, message.created_at = int(cur.lastrowid or 0), now
        return message

    def update(self, message: StoredMessage) -> None:
        with self.db:
            self.db.execute(
                "UPDATE messages SET content = ?, thinking = ?, tool_calls = ?, stats = ?, "
                "partial = ? WHERE id = ?",
                (
                    message.content,
                    message.thinking,
                    json.dumps(message.tool_calls),
                    json.dumps(message.stats),
                    int(message.partial),
                    message.id,
                ),
            )

    def truncate(self, chat_id: int, from_id: int) -> None:
        """Forget message ``from_id`` and everything after it (edit, regenerate)."""
        with self.db:
            self.db.execute(
                "DELETE FROM messages WHERE chat_id = ? AND id >= ?", (chat_id, from_id)
            )


def _chat(row: sqlite3.Row) -> Chat:
    return Chat(
        id=row["id"],
        title=row["title"],
        model=row["model"],
        settings=ChatSettings.from_json(row["settings"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _message(row: sqlite3.Row) -> StoredMessage:
    return StoredMessage(
        role=row["role"],
        content=row["content"],
        thinking=row["thinking"],
        tool_calls=json.loads(row["tool_calls"] or "[]"),
        stats=json.loads(row["stats"] or "{}"),
        partial=bool(row["partial"]),
        images=[Attachment.from_json(a) for a in json.loads(row["images"] or "[]")],
        id=row["id"],
        created_at=row["created_at"],
    )


def _images_json(images: list[Attachment]) -> str:
    return json.dumps([a.to_json() for a in images])

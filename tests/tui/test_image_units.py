"""Image attachments without the app: pasted text to paths, reading a file with its
checks, the chat store's migration and round trip, exports."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from localllm import config
from localllm.errors import InvalidRequest
from localllm.format import format_file_size
from localllm.images.files import pasted_images, read_image, to_path
from localllm.tui.format import attachment_text, export_json, export_markdown
from localllm.tui.sessions import Attachment, ChatSettings, Sessions, StoredMessage
from tests.support.visionmodel import RED, png

# The schema the TUI wrote before images (user_version 1), to migrate from.
V1_SCHEMA = """
CREATE TABLE chats (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE, role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '', thinking TEXT NOT NULL DEFAULT '',
    tool_calls TEXT NOT NULL DEFAULT '[]', stats TEXT NOT NULL DEFAULT '{}',
    partial INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL);
CREATE INDEX messages_by_chat ON messages(chat_id, id);
PRAGMA user_version = 1;
INSERT INTO chats VALUES (1, 'old chat', 'm', '{}', 1.0, 1.0);
INSERT INTO messages (chat_id, role, content, created_at) VALUES (1, 'user', 'hi', 1.0);
"""

CAT = Attachment("cat.png", 12_600, "aGVsbG8=")


def test_pasted_text_to_image_paths(tmp_path: Path) -> None:
    (tmp_path / "cat.png").write_bytes(b"x")
    (tmp_path / "my dog.JPG").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    cat, dog = tmp_path / "cat.png", tmp_path / "my dog.JPG"
    assert pasted_images(f"{cat}\n") == [cat]
    assert pasted_images(f"'{dog}'") == [dog] == pasted_images(f'"{dog}"')
    assert pasted_images(str(dog)) == [dog]  # bare spaces, one path
    assert pasted_images(dog.as_uri()) == [dog]  # file:///.../my%20dog.JPG
    assert pasted_images(r"cat.png my\ dog.JPG", cwd=tmp_path) == [cat, dog]
    assert pasted_images(f"{cat.as_uri()}\n{dog.as_uri()}\n") == [cat, dog]
    # Anything else is text to insert.
    for text in (
        "",
        "what is in cat.png?",
        str(tmp_path / "notes.txt"),
        str(tmp_path / "missing.png"),
        f"{cat} {tmp_path / 'missing.png'}",
        "it's cat.png",
        str(tmp_path),
    ):
        assert pasted_images(text, cwd=tmp_path) == [], text


def test_typed_paths_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert to_path("cat.png") == tmp_path / "cat.png"
    assert to_path("~/a b.png") == tmp_path / "home" / "a b.png"
    assert to_path(" 'sub/x.png' ") == tmp_path / "sub" / "x.png"


def test_read_image_checks_before_attaching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    red = tmp_path / "red.png"
    red.write_bytes(png(32, 32, RED))
    data, info = read_image(red)
    assert data == red.read_bytes() and (info.format, info.width) == ("png", 32)
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(InvalidRequest, match=r"^empty\.png is empty$"):
        read_image(tmp_path / "empty.png", 3)
    # WebP and AVIF are attached as they are (the daemon re-encodes them); HEIC is not.
    import io

    from PIL import Image

    for fmt, name in (("WEBP", "shot.webp"), ("AVIF", "photo.avif")):
        out = io.BytesIO()
        Image.new("RGB", (8, 6), RED).save(out, fmt)
        (tmp_path / name).write_bytes(out.getvalue())
        data, info = read_image(tmp_path / name)
        assert data == out.getvalue() and (info.format, info.width, info.height) == (
            fmt.lower(),
            8,
            6,
        )
    heic = (tmp_path / "photo.avif").read_bytes().replace(b"avif", b"heic")
    (tmp_path / "photo.heic").write_bytes(heic)
    with pytest.raises(InvalidRequest, match=r"^photo\.heic: HEIC images are not supported"):
        read_image(tmp_path / "photo.heic")
    monkeypatch.setattr(config, "MAX_IMAGE_BYTES", 10)
    with pytest.raises(InvalidRequest, match=r"^red\.png is \d+ B; the limit is 10 B$"):
        read_image(red)


def test_an_old_store_gains_the_images_column(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(V1_SCHEMA)
    store = Sessions(path)
    [old] = store.messages(1)
    assert (old.content, old.images) == ("hi", [])
    store.add(1, StoredMessage("user", "look", images=[CAT]))
    store.close()
    again = Sessions(path)
    assert [m.images for m in again.messages(1)] == [[], [CAT]]
    assert again.db.execute("PRAGMA user_version").fetchone()[0] == 2
    again.close()
    assert Sessions(path).messages(1)[1].images == [CAT]  # a second open changes nothing


def test_the_wire_message_and_exports_carry_the_images(tmp_path: Path) -> None:
    message = StoredMessage("user", "what is it?", images=[CAT])
    assert message.wire() == {"role": "user", "content": "what is it?", "images": ["aGVsbG8="]}
    assert "images" not in StoredMessage("user", "hi").wire()
    assert attachment_text(CAT) == "📎 cat.png · 12.3 KiB"
    assert [format_file_size(n) for n in (812, 12_600, 4 << 20)] == ["812 B", "12.3 KiB", "4.0 MiB"]
    chat = Sessions(tmp_path / "c.sqlite3").create("m", "T", ChatSettings())
    md = export_markdown(chat, [message])
    assert "what is it?\n\nImage: `cat.png` (12.3 KiB)\n" in md
    data = json.loads(export_json(chat, [message, StoredMessage("assistant", "a cat")]))
    assert data["messages"][0]["images"] == [{"name": "cat.png", "size": 12_600}]
    assert "images" not in data["messages"][1]

"""Image files named in a ``run`` prompt: found, taken out of the text, attached, reported."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from localllm import config
from localllm.cli.attach import attach, find_images
from localllm.errors import InvalidRequest
from tests.support.visionmodel import RED, png


def test_paths_of_existing_images_are_attached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cat.png").write_bytes(png(32, 32, RED))
    (tmp_path / "my dog.JPG").write_bytes(b"\xff\xd8jpeg")
    text, paths = find_images("describe ./cat.png and 'my dog.JPG', not ./missing.png")
    assert text == "describe and , not ./missing.png"
    assert paths == [Path("./cat.png"), Path("my dog.JPG")]
    assert find_images(r"compare cat.png with my\ dog.JPG")[1] == [
        Path("cat.png"),
        Path("my dog.JPG"),
    ]
    # No file of that name: the words stay a question.
    assert find_images("what is a .png file?") == ("what is a .png file?", [])
    message = attach(f"what is in {tmp_path / 'cat.png'}?")
    assert message == {
        "role": "user",
        "content": "what is in ?",
        "images": [base64.b64encode(png(32, 32, RED)).decode()],
    }
    assert f"Added image '{tmp_path / 'cat.png'}' (" in capsys.readouterr().err
    assert attach("hello") == {"role": "user", "content": "hello"}


def test_a_too_large_file_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config, "MAX_IMAGE_BYTES", 10)
    (tmp_path / "big.png").write_bytes(b"x" * 11)
    with pytest.raises(InvalidRequest, match=r"big\.png is 11 B; the limit is 10 B"):
        attach(f"see {tmp_path / 'big.png'}")

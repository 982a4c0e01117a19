"""The bounded JSON reader: the same values as ``json.loads``, linear time, limits named."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from localllm.errors import InvalidRequest
from localllm.server import jsonparse
from localllm.server.jsonparse import MAX_DEPTH, _Parser, json_depth

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


def big_path(raw: bytes) -> Any:
    return _Parser(raw).parse()


@settings(max_examples=300, deadline=None)
@given(
    value=_values,
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    slice_size=st.integers(1, 24),
)
def test_the_sliced_reader_reads_what_json_loads_reads(
    value: Any, ascii_only: bool, indent: int | None, slice_size: int
) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()
    with pytest.MonkeyPatch.context() as mp:
        # Tiny slices cut every string mid-escape, mid-character and mid-surrogate-pair.
        mp.setattr(jsonparse, "SLICE", slice_size)
        assert big_path(raw) == json.loads(raw)


@pytest.mark.parametrize("slice_size", range(1, 14))
def test_escapes_and_characters_cut_by_a_slice(
    monkeypatch: pytest.MonkeyPatch, slice_size: int
) -> None:
    monkeypatch.setattr(jsonparse, "SLICE", slice_size)
    for raw in (
        b'"\\ud83d\\ude00 x\\ud83d\\ude01"',
        '"é😀中\\n\\\\\\""'.encode(),
        b'"\\ud83d"',
        b'"\\\\\\\\ud83d"',
        b'{"a\\"b": ["\\u00e9", "\\/"]}',
    ):
        assert big_path(raw) == json.loads(raw), raw


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[1,]",
        b'{"a" 1}',
        b'{"a": 1,}',
        b'"abc',
        b'"a\x01b"',
        b'"\\x"',
        b"[1] 2",
        b"tru",
        b"01",
        b"{1: 2}",
        b'"\\u12"',
        b"\xff",
        b'"\xc3"',
        b"[-]",
        b"[1.]",
    ],
)
def test_bad_json_is_refused_by_both_readers(raw: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(raw)
    with pytest.raises(InvalidRequest, match="invalid JSON"):
        big_path(raw)
    with pytest.raises(InvalidRequest, match="invalid JSON"):
        jsonparse.loads(raw)


def test_depth_and_value_limits_on_the_large_path(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert json_depth(ok, stop_after=10) == 11 and big_path(ok) is not None
    with pytest.raises(InvalidRequest, match=f"deeper than {MAX_DEPTH}"):
        big_path(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    with pytest.raises(InvalidRequest, match="deeper than"):
        big_path(b'{"a":' * 100_000)
    monkeypatch.setattr(jsonparse, "MAX_VALUES", 1000)
    assert len(big_path(b"[" + b"1," * 998 + b"1]")) == 999
    with pytest.raises(InvalidRequest, match="more than 1000 values"):
        big_path(b"[" + b"1," * 1000 + b"1]")
    monkeypatch.setattr(jsonparse, "MAX_CONTAINERS", 100)
    assert len(big_path(b"[" + b"[]," * 98 + b"{}]")) == 99
    with pytest.raises(InvalidRequest, match="more than 100 objects and arrays"):
        big_path(b"[" + b'{"a": []},' * 50 + b"[]]")


def test_both_paths_cap_values_at_the_module_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonparse, "SMALL", 16)
    monkeypatch.setattr(jsonparse, "MAX_VALUES", 10)
    with pytest.raises(InvalidRequest, match="more than 10 values"):
        jsonparse.loads(b"[" + b"0," * 20 + b"0]")


def test_the_escape_storm_is_scanned_in_linear_time() -> None:
    # The reproduction from issue #26, at 1 MB instead of 48 KB: the regex it replaced
    # needed ~10 s for 48 KB and grew with the square of the size (hours here).
    storm = b"[" * 101 + b'"' + b'\\"' * 500_000
    start = time.process_time()
    assert json_depth(storm) == 101
    with pytest.raises(InvalidRequest):
        jsonparse.loads(storm)
    assert time.process_time() - start < 2.0


def test_the_large_path_is_linear_in_the_length_of_one_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = b'{"prompt": "' + b'\\"ab\\u00e9' * 400_000 + b'"}'  # 4.4 MB of escapes
    monkeypatch.setattr(jsonparse, "SLICE", 64 << 10)
    start = time.process_time()
    assert jsonparse.loads(body) == json.loads(body)
    assert time.process_time() - start < 5.0


def _deep(levels: int) -> str:
    # U+0122 is the bytes 22 01 in UTF-16-LE: a quote to a reader of bytes as UTF-8,
    # which then took every bracket after it for a string's text.
    return '{"\u0122": 1, "messages": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-16", "utf-32-le", "utf-32"])
def test_utf16_and_utf32_bodies_are_refused_however_shallow_or_deep(codec: str) -> None:
    for text in (_deep(MAX_DEPTH + 400), '{"model": "m"}'):
        raw = text.encode(codec)
        assert len(raw) <= jsonparse.SMALL  # the path that handed bytes to json.loads
        with pytest.raises(InvalidRequest, match=r"not UTF-8.*send JSON as UTF-8"):
            jsonparse.loads(raw)
    big = ('{"pad": "' + "x" * jsonparse.SMALL + '", "m": 1}').encode(codec)
    with pytest.raises(InvalidRequest, match="not UTF-8"):
        jsonparse.loads(big)


def test_a_byte_order_mark_is_refused_on_both_paths() -> None:
    for raw in (b'\xef\xbb\xbf{"a": 1}', b'\xef\xbb\xbf{"a": "' + b"x" * jsonparse.SMALL + b'"}'):
        with pytest.raises(InvalidRequest, match="byte order mark"):
            jsonparse.loads(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "caf\xe9"}',  # Latin-1
        b'{"a": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8 (json.loads lets it in)
        b'{"a": "\xc3"}',
        b'{"\xff": 1}',
    ],
)
def test_invalid_utf8_is_refused_by_both_paths(raw: bytes) -> None:
    with pytest.raises(InvalidRequest, match=r"not UTF-8 .* at byte"):
        jsonparse.loads(raw)
    big = raw[:-1] + b', "pad": "' + b"x" * jsonparse.SMALL + b'"}'
    with pytest.raises(InvalidRequest, match=r"not UTF-8 .* at byte"):
        jsonparse.loads(big)
    assert jsonparse.loads('{"a": "café 😀"}'.encode()) == {"a": "café 😀"}


def test_the_small_path_counts_values_and_containers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert jsonparse.SMALL >= 4096  # these bodies go to json.loads whole
    monkeypatch.setattr(jsonparse, "MAX_CONTAINERS", 100)
    assert len(jsonparse.loads(b"[" + b"[]," * 98 + b"{}]")) == 99
    with pytest.raises(InvalidRequest, match="more than 100 objects and arrays"):
        jsonparse.loads(b"[" + b'{"a": []},' * 50 + b"[]]")
    # Brackets, braces and commas inside strings count for nothing.
    assert jsonparse.loads(json.dumps(["[{,]}" * 300]).encode()) == ["[{,]}" * 300]
    monkeypatch.setattr(jsonparse, "MAX_VALUES", 1000)
    assert len(jsonparse.loads(b"[" + b"1," * 998 + b"1]")) == 999
    with pytest.raises(InvalidRequest, match="more than 1000 values"):
        jsonparse.loads(b"[" + b"1," * 1000 + b"1]")
    # Empty containers are one value each, as the large path counts them.
    doc = {"k": [[], {}, [1, {"x": []}]] * 10, "s": "a,b"}
    raw = json.dumps(doc).encode().replace(b"[]", b"[ \n]")
    values = _Parser(raw)
    values.parse()
    monkeypatch.setattr(jsonparse, "MAX_VALUES", values.values)
    assert jsonparse.loads(raw) == doc
    monkeypatch.setattr(jsonparse, "MAX_VALUES", values.values - 1)
    with pytest.raises(InvalidRequest, match="values"):
        jsonparse.loads(raw)

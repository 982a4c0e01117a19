"""The tagged-call machinery (``tagged.py``): lenient pieces, wildcards, ids, CDATA."""

from __future__ import annotations

from localllm.toolcalls.base import ToolSet
from localllm.toolcalls.tagged import IDENT, WILD, Piece, Shape, Tagged
from tests.support.toolcall_helpers import TOOLS


def test_piece_whitespace_is_lenient() -> None:
    piece = Piece("</p>\n<q>")
    assert piece.match("</p><q>x", 0, False) == (7, None)
    assert piece.match("  </p>\n\n <q>", 0, False) == (12, None)
    assert piece.match("</p", 0, False) is None  # may still arrive
    assert piece.match("</p", 0, True) == -1
    assert piece.match("<x>", 0, False) == -1


def test_piece_wildcard_and_id() -> None:
    piece = Piece(f'" index="{WILD}"<|sep|>')
    assert piece.match('" index="12"<|sep|>', 0, False) == (19, None)
    assert piece.match('" index="12"<|se', 0, False) is None
    ident = Piece(f"<b>{IDENT}<n>")
    assert ident.match("<b>call_1<n>", 0, True) == (12, "call_1")


def test_values_typed_by_schema_and_cdata() -> None:
    shape = Shape(
        call_open="<c ",
        name_end=">",
        call_close="</c>",
        json_args=False,
        param_open="<a ",
        key_end=">",
        param_close="</a>",
    )
    syntax, tools = Tagged(shape), ToolSet(TOOLS)
    got = syntax.parse(
        "<c get_weather><a location>42</a><a unit><![CDATA[</a>]]></a></c>", tools, True
    )
    assert got is not None and got.calls is not None
    assert got.calls[0].arguments == {"location": "42", "unit": "</a>"}
    got = syntax.parse("<c special_function><a arg1>42</a></c>", tools, True)
    assert got is not None and got.calls is not None and got.calls[0].arguments == {"arg1": 42}


def test_markers_include_the_tags_a_token_is_made_of() -> None:
    shape = Shape(call_open="<|open|>call<|sep|>", name_end="<|args|>", call_close="<|end|>")
    assert {"<|open|>call<|sep|>", "<|open|>", "<|sep|>", "<|args|>"} <= set(shape.markers)

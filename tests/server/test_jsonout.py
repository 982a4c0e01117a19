"""Responses rendered a piece at a time are byte for byte what JSONResponse renders."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.responses import JSONResponse
from hypothesis import given, settings, strategies as st

from localllm.server import jsonout

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=12) | st.dictionaries(st.text(max_size=6), inner, max_size=6)
    ),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(value=_values, leaves=st.integers(1, 5), slice_size=st.integers(1, 8))
def test_pieces_render_what_json_response_renders(value: Any, leaves: int, slice_size: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jsonout, "LEAVES", leaves)
        mp.setattr(jsonout, "SLICE", slice_size)
        mp.setattr(jsonout, "CHUNK", slice_size)
        assert jsonout.dumps(value) == JSONResponse(value).body
        assert b"".join(jsonout.dumps_chunks(value)) == JSONResponse(value).body


def test_tuples_and_non_string_keys_render_as_json_renders_them() -> None:
    value = {"a": (1, 2), "b": {1: "x", None: 2.5}}
    assert jsonout.dumps(value) == JSONResponse(value).body


def test_nan_is_refused_as_json_response_refuses_it() -> None:
    with pytest.raises(ValueError):
        JSONResponse({"x": [math.nan]})
    with pytest.raises(ValueError):
        jsonout.dumps({"x": [math.nan]})

"""Large documents are let go of a piece at a time, and all of them is let go."""

from __future__ import annotations

import gc
import weakref

from localllm.inference.release import dismantle


class Leaf:
    pass


def test_everything_is_freed_and_nothing_kept() -> None:
    leaves = [Leaf() for _ in range(50)]
    refs = [weakref.ref(x) for x in leaves]
    doc = {"a": [list(leaves[:10]), tuple(leaves[10:40]), {"b": leaves[40:]}], "n": 3}
    del leaves
    gc.disable()  # freed by reference counting, as it goes, not by a collection
    try:
        dismantle(doc)
        del doc
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_containers_holding_containers_are_emptied_from_the_top() -> None:
    inner = [[1.0] * 350 for _ in range(100)]
    outer = {"embeddings": inner, "model": "m"}
    dismantle(outer)
    assert outer == {} and inner == []

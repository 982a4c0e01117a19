"""Letting go of a large document a piece at a time, so no single free holds the GIL long.

Freeing a container frees everything only it holds, all inside one C call: the
20,000 embedding rows of a batch (7M floats) took 60-130 ms to free, with the
interpreter lock held the whole time, whichever thread dropped them.  ``dismantle``
takes a document apart from the top in a Python loop, so each container holding
containers is emptied on its own and each of its children (a row of floats, a
message) is freed by its own short call; the loop hands the lock on in between.
"""

from __future__ import annotations

from typing import Any


def dismantle(value: Any) -> None:
    """Free ``value`` (the caller's last reference) a child at a time."""
    stack = [value]
    del value
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            children: list[Any] = list(item.values())
            item.clear()
        elif isinstance(item, list):
            children = item[:]
            item.clear()
        elif isinstance(item, tuple) and len(item) > 16:
            children = list(item)
        else:
            continue  # freed as the next pop replaces it
        # Only children that hold more are taken apart further; a row of scalars is freed
        # whole, which is short.
        stack.extend(c for c in children if isinstance(c, (dict, list, tuple)) and c)
        del children, item

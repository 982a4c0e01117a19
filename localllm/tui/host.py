"""What a screen may ask of the app that shows it: its client, named by a ``Protocol``.

Screens get the client in their constructors (``ChatScreen`` hands it on to the
model picker, which hands it to the search and the pull); a screen pushed on its
own, without one, finds the app's here.  A leaf: the screens import this, never
``tui/app.py``, so no screen depends on the app that imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from localllm.api.client import AsyncClient


@runtime_checkable
class ClientHost(Protocol):
    """An app that holds the daemon's client (``LocalLLMApp`` does)."""

    client: AsyncClient


def host_client(app: object) -> AsyncClient:
    """The client of ``app``; a TypeError names an app that has none."""
    if not isinstance(app, ClientHost):
        raise TypeError(f"{type(app).__name__} holds no daemon client")
    return app.client

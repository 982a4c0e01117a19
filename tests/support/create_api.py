"""Uploading blobs and calling ``/api/create`` through a client (the route tests' ASGI one)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx


def digest_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


async def upload(client: httpx.AsyncClient, path: Path) -> str:
    digest = digest_of(path)
    r = await client.post(f"/api/blobs/{digest}", content=path.read_bytes())
    assert r.status_code in (200, 201)
    return digest


async def create(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/api/create", json=body)

"""Fixtures for the store tests: a Store in the test's LOCALLLM_HOME (the Hub stand-in,
``hubstub``, is tests/support/hub.py's)."""

from __future__ import annotations

import pytest

from localllm.store.local import Store


@pytest.fixture
def store() -> Store:
    return Store()

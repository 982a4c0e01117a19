"""Property-based requests from the daemon's own OpenAPI document: no input may cause a 5xx.

The app runs in-process (ASGI) on the fake runner, with one model in the
store, so generated requests reach model management and the inference routes
without spawning children.  Bounded: a few examples per operation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from localllm.server.app import create_app
from localllm.store.local import Store
from tests.support.fake_scheduler import fake_scheduler
from tests.support.models import add_model

pytestmark = pytest.mark.slow  # over 10 s: started first (tests/conftest.py)

# Operations under test: model management and a few inference endpoints.  Pulls are
# left out: whether the Hub answers is not the daemon's doing.
OPERATIONS = (
    r"^/api/(tags|show|delete|copy|blobs/\{digest\}|create|version|ps|generate|chat"
    r"|embed|embeddings|rerank|eval)$|^/v1/(chat/completions|completions|models(/\{model\})?"
    r"|responses|messages|messages/count_tokens|rerank|systemone)$"
    r"|^/health"
)


@pytest.fixture
def api_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # anything hf.co fails fast
    store = Store(tmp_path / "store")
    add_model(store, tmp_path, "m:latest")
    # The test client calls itself "testserver": no Host guard here (tested elsewhere).
    app = create_app(store, bind_host="0.0.0.0", scheduler=fake_scheduler())
    return schemathesis.openapi.from_asgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.include(path_regex=OPERATIONS).parametrize()
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: Any) -> None:
    response = case.call()
    assert response.status_code < 500, (
        case.method,
        case.formatted_path,
        case.body,
        response.status_code,
        response.text[:500],
    )

"""A real daemon for load tests: the tiny model with a template whose answers fill num_predict."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, start_daemon
from tests.support.models import add_tiny

# The tiny model's successor of "T" is "T" (see tests/support/tinymodel.py): a generation
# prompt ending in "T" makes every answer run to num_predict, so each request
# streams a known number of tokens instead of stopping at once.
LOOPING_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}.{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT{% endif %}"
)


@pytest.fixture
def bench_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    # 512 tokens per slot: room for the first prompts, made before their length is calibrated.
    monkeypatch.setenv("LOCALLLM_NUM_PARALLEL", "4")
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "2048")
    add_tiny(tmp_path, "tiny", chat_template=LOOPING_TEMPLATE)
    with start_daemon(tmp_path) as daemon:
        yield daemon

"""TUI fixtures: one real daemon per module serving tiny models (helpers: tests/support/tui.py).

``tiny-chat`` has a chat template that renders only the messages' contents, so
the tiny model's greedy continuation of the conversation is a known text
(``tests.support.tinymodel.expected_greedy`` of the rendered prompt).  ``broken`` is
stored fine but its weights are cut short, so loading it fails; ``spare`` is
there to be deleted.  ``tiny-vision`` is ``tiny-chat`` with tests/support/visionmodel.py's
projector: a message ending in an image continues with that colour's greedy text.

Starting the daemon costs seconds, so the behaviour tests of a module share
one; each test still gets its own ``LOCALLLM_HOME`` (the chat store lives
there) from the autouse fixture.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localllm import paths
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, module_home, start_daemon
from tests.support.models import add_tiny, import_gguf
from tests.support.tinymodel import make_tiny_model
from tests.support.tui import CONTENTS_TEMPLATE, break_weights
from tests.support.visionmodel import make_projector


@pytest.fixture(scope="module")
def tui_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_home(
        tmp_path_factory, "tui-daemon", LOCALLLM_NUM_PARALLEL="2", LOCALLLM_CONTEXT_LENGTH="512"
    ) as tmp:
        add_tiny(tmp, "tiny-chat", chat_template=CONTENTS_TEMPLATE)
        add_tiny(tmp, "broken", n_ctx_train=1024)
        add_tiny(tmp, "spare", n_ctx_train=512)
        break_weights("broken")
        model = make_tiny_model(tmp / "gguf-vision", chat_template=CONTENTS_TEMPLATE)
        import_gguf(
            Store(paths.models()),
            parse_name("tiny-vision"),
            [model],
            projector=make_projector(tmp / "mmproj"),
        )
        with start_daemon(tmp) as daemon:
            yield daemon

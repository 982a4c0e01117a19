"""runner.lastwords: the one line a client is told of a runner's end, and no paths in it."""

from __future__ import annotations

import pytest

from localllm.runner.lastwords import MAX_LINE, reason, scrub_paths, with_reason
from tests.support.fake_engine import LAST_WORDS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "llama.cpp could not load "
            "/home/alice/.local/share/localllm/models/blobs/sha256-ab: bad",
            "llama.cpp could not load sha256-ab: bad",
        ),
        (
            "/home/a/src/ggml/src/ggml.c:1234: GGML_ASSERT(x) failed",
            "ggml.c:1234: GGML_ASSERT(x) failed",
        ),
        ("open ~/models/x.gguf failed", "open x.gguf failed"),
        ("(from '/root/.venv/lib/libggml-base.so')", "(from 'libggml-base.so')"),
        # Not paths: URLs, endpoints, relative paths, a bare root entry.
        ("see https://huggingface.co/org/repo/blob/main/x.gguf", None),
        ("lost RPC worker 127.0.0.1:50052, [::1]:50053", None),
        ("ggml/src/ggml-rpc/ggml-rpc.cpp:585: crashed", None),
        ("no /models here", None),
    ],
)
def test_scrub_paths(text: str, expected: str | None) -> None:
    assert scrub_paths(text) == (text if expected is None else expected)


def test_the_reason_is_the_best_line_not_the_last() -> None:
    # Memory first, then assertions and aborts, then errors; never a backtrace line.
    assert reason(LAST_WORDS) == (
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1099511627776"
    )
    assert reason(LAST_WORDS[2:]) == "ggml-backend.cpp:1234: GGML_ASSERT(buf != NULL) failed"
    assert (
        reason(
            [
                "llama_model_load: error loading model: tensor 'x' data is not within /h/a/m.gguf",
                "llama_model_load_from_file_impl: failed to load model",
            ]
        )
        == "llama_model_load: error loading model: tensor 'x' data is not within m.gguf"
    )
    assert reason(["#3  0x00007f00deadbeef in abort () from /lib/libc.so.6"]) == ""
    assert reason([]) == ""


def test_the_runners_own_routine_lines_are_not_a_reason() -> None:
    # An earlier request's failure, logged at INFO, is not why the process died.
    tail = [
        "runner[42] INFO localllm.runner.worker: request r1 failed: bad prompt",
        "load_tensors: loaded 291 tensors",
    ]
    assert reason(tail) == ""
    assert reason([*tail, "runner[42] ERROR localllm.runner.worker: engine error: boom"]) == (
        "runner[42] ERROR localllm.runner.worker: engine error: boom"
    )


def test_one_short_line_at_most() -> None:
    long = "error: " + "x" * 5000
    assert len(reason(["a", long, "b"])) == MAX_LINE
    assert with_reason("ended", []) == "ended"
    assert with_reason("ended", ["out of memory\nsecond line"]).count("\n") <= 1

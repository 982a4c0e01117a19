"""A pure-Python stand-in for ``localllm.engine.engine.Engine`` (runner tests only).

It lets the process tests provoke what the real engine should never do on
purpose: slow loads, crashes during load or mid-step, a step that raises.  The
behaviour is chosen by words in the model path (``slowload``, ``crashload``,
``failload``, ``longload`` takes ``LONG_S``, ``readload`` reads steadily for
``READ_S`` (a slow disk: progress), ``stopload`` stops the process,
``abortload`` dies as llama.cpp does when an allocation fails: log lines with
paths, a backtrace, SIGABRT) and in the prompt (``boom`` raises in ``step``,
``pathboom`` raises with a path in the message, ``abort`` dies as ``abortload``
does, ``noisy`` logs an error line and goes on, ``segv`` kills the process,
``longstep`` makes its second step take ``LONG_S``, ``hangstep`` never ends
it).  Long loads and steps sleep, which releases the GIL as a native call does.  Each step emits one
piece ``"<n> "`` per active request after a short sleep, so streams last long
enough to be killed in the middle.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from localllm.errors import InvalidRequest, ModelLoadError
from localllm.runner.messages import (
    CompletionRequest,
    Done,
    Failed,
    LoadOptions,
    PairFormat,
    Piece,
)

STEP_S = 0.02
LONG_S = 1.5
READ_S = 4.0
HOME_PATH = "/home/alice/private/models/blobs/sha256-1234abcd"
# What llama.cpp and ggml print when a buffer cannot be allocated: the reason, then
# an assertion with a source path, then gdb's backtrace (ggml_print_backtrace).
LAST_WORDS = (
    f"llama_model_load_from_file_impl: loading {HOME_PATH}",
    "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1099511627776",
    "/home/alice/src/llama.cpp/ggml/src/ggml-backend.cpp:1234: GGML_ASSERT(buf != NULL) failed",
    "[New LWP 4242]",
    "0x00007feb2c8ea42f in __GI___wait4 (pid=4243) at ../sysdeps/unix/sysv/linux/wait4.c:30",
    "#0  0x00007feb2c8ea42f in __GI___wait4 () at ../sysdeps/unix/sysv/linux/wait4.c:30",
    "#1  0x00007feb2cb1f2a9 in ggml_abort () from /home/alice/.venv/lib/libggml-base.so",
    "#28 0x00007feb2c829d90 in __libc_start_call_main () from /lib/x86_64-linux-gnu/libc.so.6",
)


def die_like_llama_cpp() -> None:
    for line in LAST_WORDS:
        print(line, file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGABRT)


class NoAdapters:
    """The fake loads no LoRA adapters, so it never has a load to report."""

    def take_loads(self) -> list[tuple[str, int]]:
        return []


class FakeEngine:
    """Implements ``localllm.runner.engine_api.EngineAPI`` (tests/runner/test_engine_api.py)."""

    def __init__(self, model_paths: list[str], opts: LoadOptions) -> None:
        path = model_paths[0]
        print(f"fake engine loading {path}", file=sys.stderr)
        # Something that prints to fd 1 the way native code might: must not break frames.
        os.write(1, b"native noise on fd 1\n")
        if "slowload" in path:
            time.sleep(60)
        if "longload" in path:
            time.sleep(LONG_S)
        if "readload" in path:
            end = time.monotonic() + READ_S
            with open("/dev/zero", "rb", buffering=0) as disk:
                while time.monotonic() < end:
                    disk.read(1 << 20)
                    time.sleep(0.05)
        if "stopload" in path:
            os.kill(os.getpid(), signal.SIGSTOP)
        if "crashload" in path:
            os.kill(os.getpid(), signal.SIGSEGV)
        if "abortload" in path:
            die_like_llama_cpp()
        if "failload" in path:
            raise ModelLoadError(f"{path}: not a GGUF file")
        self.opts = opts
        self.active: dict[str, tuple[CompletionRequest, int]] = {}
        self.cancelled: set[str] = set()
        self.adapters = NoAdapters()

    def submit(self, req: CompletionRequest) -> None:
        if req.prompt == "":
            raise InvalidRequest("empty prompt")
        if len(self.active) >= self.opts.n_parallel:
            raise InvalidRequest("no free slot")
        self.active[req.id] = (req, 0)

    def cancel(self, req_id: str) -> None:
        if req_id in self.active:
            self.cancelled.add(req_id)

    def has_work(self) -> bool:
        return bool(self.active)

    def step(self) -> list[Piece | Done | Failed]:
        time.sleep(STEP_S)
        events: list[Piece | Done | Failed] = []
        for req_id, (req, n) in list(self.active.items()):
            if req_id in self.cancelled:
                self.cancelled.discard(req_id)
                del self.active[req_id]
                events.append(Done(id=req_id, reason="cancel", eval_count=n))
                continue
            if req.prompt == "boom" and n == 2:
                raise RuntimeError("boom")
            if req.prompt == "pathboom" and n == 1:
                raise RuntimeError(f"cannot read {HOME_PATH}.lora")
            if req.prompt == "abort" and n == 2:
                die_like_llama_cpp()
            if req.prompt == "noisy" and n == 1:  # an error line that is not fatal
                print("ggml_fake: error: a transient failure, retried", file=sys.stderr, flush=True)
            if req.prompt == "longstep" and n == 1:
                time.sleep(LONG_S)
            if req.prompt == "hangstep" and n == 1:
                time.sleep(3600)  # a native call that never returns (the heartbeat runs on)
            if req.prompt == "segv" and n == 2:
                os.kill(os.getpid(), signal.SIGSEGV)
            if req.prompt == "bad":
                del self.active[req_id]
                events.append(Failed(id=req_id, message="bad prompt", status=400))
                continue
            events.append(
                Piece(
                    id=req_id, text=f"{n} ", token=n, logprob=-0.5, top_logprobs=[(f"{n} ", -0.5)]
                )
            )
            n += 1
            if req.num_predict >= 0 and n >= req.num_predict:
                del self.active[req_id]
                events.append(
                    Done(
                        id=req_id,
                        reason="length",
                        prompt_tokens=3,
                        eval_count=n,
                        eval_ns=n * 1000,
                        prompt_eval_ns=5,
                    )
                )
            else:
                self.active[req_id] = (req, n)
        return events

    def embed(self, inputs: list[str], *, truncate: bool = True) -> tuple[list[list[float]], int]:
        if any(not s for s in inputs):
            raise InvalidRequest("empty input")
        return [[float(len(s)), 1.0] for s in inputs], sum(len(s) for s in inputs)

    def rerank(
        self, query: str, documents: list[str], fmt: PairFormat, *, truncate: bool = True
    ) -> tuple[list[float], int]:
        # Scores as its embeddings are made: from lengths, the query's against each document's.
        return [float(len(query) - len(d)) for d in documents], sum(map(len, documents))

    def score(
        self, prompts: list[str], options: list[list[str]]
    ) -> tuple[list[list[float]], int, int]:
        # Each option's logprob from its length: -1 a character, whatever the prompt.
        logprobs = [[-float(len(o)) for o in opts] for opts in options]
        read = sum(len(p) for p in prompts)
        return logprobs, read, read + sum(len(o) for opts in options for o in opts)

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        return ([1] if add_special else []) + [ord(c) for c in text]

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        # Token 1 is its BOS: written out only when control tokens are asked for.
        return "".join(chr(t) for t in tokens if special or t != 1)

    def info(self) -> dict[str, object]:
        return {"engine": "fake", "n_ctx": self.opts.n_ctx}

    def memory_report(self) -> dict[str, dict[str, int]]:
        return {"CPU": {"weights": 10, "kv": 20, "compute": 30}}

    def close(self) -> None:
        print("fake engine closed", file=sys.stderr)

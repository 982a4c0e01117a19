"""Tokenize and detokenize with a model's own tokenizer, and count a chat request's prompt.

The use case behind ``/api/tokenize``, ``/api/detokenize``, llama-server's
``/tokenize``, ``/detokenize`` and ``/apply-template``, and the ``input_tokens``
routes: clients count tokens before they send (to fit a context, to chunk
documents for an embedding model, to price a request).  The tokenizer is
libllama's, in the model's runner, so the model is loaded (or reused) as a
generation would load it (an embedding model as ``/api/embed`` does, so the
next embedding request finds it loaded).

Refused with a 400 before anything loads: no model, a model without a
vocabulary (nothing to tokenize with), text over ``MAX_TEXT_BYTES`` or with a
lone surrogate, more than ``MAX_TOKENS`` tokens, token ids outside the
vocabulary (libllama would read past its table); for the chat-shaped routes, an
embedding model (it has no chat to count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from localllm.errors import InvalidRequest
from localllm.inference.options import resolve_options
from localllm.inference.service import InferenceService, Target, base_load
from localllm.runner.messages import LoadOptions

# The text one request may tokenize: about 130,000 tokens of English, a novel.  The
# ids come back through the runner's pipe and are read on the event loop (runner/
# traffic.py), a tokenizer that spells byte by byte gives one a byte, and a million
# ids cost that loop 60 ms here: half a megabyte keeps it near 30.
MAX_TEXT_BYTES = 512 << 10
MAX_TOKENS = 1 << 19  # ids one detokenize request may send (a 512K context's worth)


def require_model(model: str) -> None:
    if not model:
        raise InvalidRequest("model is required")


def vocabulary(target: Target, model: str) -> int:
    """The model's vocabulary size; ``InvalidRequest`` when it has none."""
    kind = target.info.kv.get("tokenizer.ggml.model")
    if not target.info.n_vocab or kind in (None, "none", ""):
        raise InvalidRequest(
            f'model "{model}" has no tokenizer (its GGUF has no vocabulary), so it cannot tokenize'
        )
    return target.info.n_vocab


def text_target(svc: InferenceService, model: str) -> Target:
    """The model, checked to have a tokenizer (a worker thread's work: it reads the store)."""
    require_model(model)
    target = svc.target(model)
    vocabulary(target, model)
    return target


def chat_target(target: Target, model: str) -> None:
    """A chat-shaped count or render needs a model that chats."""
    vocabulary(target, model)
    if target.info.pooling_type is not None:
        raise InvalidRequest(
            f'model "{model}" is an embedding model; it has no chat prompt to count or render'
        )


def check_text(text: str) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRequest("text is not valid Unicode (it holds a lone surrogate)") from None
    if size > MAX_TEXT_BYTES:
        raise InvalidRequest(
            f"text is {size} bytes; the limit is {MAX_TEXT_BYTES} bytes a request (split it)"
        )


def check_tokens(tokens: Sequence[int], n_vocab: int) -> None:
    if len(tokens) > MAX_TOKENS:
        raise InvalidRequest(f"{len(tokens)} tokens; the limit is {MAX_TOKENS} a request")
    for i, token in enumerate(tokens):
        if not 0 <= token < n_vocab:
            raise InvalidRequest(
                f"token {i} is {token}, not an id of this model's vocabulary (0 to {n_vocab - 1})"
            )


def _load(
    svc: InferenceService, target: Target, options: Mapping[str, object] | None
) -> LoadOptions:
    if target.info.rank_head:  # as /api/rerank loads it
        from localllm.inference.rerank import rerank_load

        return rerank_load(target, options)
    load = base_load(resolve_options(target.params, options))
    if target.info.pooling_type is not None:  # as /api/embed loads it
        load.embedding = True
        load.n_parallel = 1
    return load


async def tokenize(
    svc: InferenceService,
    target: Target,
    text: str,
    *,
    add_special: bool = False,
    parse_special: bool = True,
    options: Mapping[str, object] | None = None,
    keep_alive: Any = None,
) -> list[int]:
    """``text``'s token ids; ``add_special`` adds BOS/EOS as a prompt gets them,
    ``parse_special`` reads control tokens written out (``<|im_start|>``) as themselves."""
    check_text(text)
    load = _load(svc, target, options)
    async with svc.scheduler.use(target.spec, load, svc.keep_alive(keep_alive)) as model:
        return await model.runner.tokenize(
            text, add_special=add_special, parse_special=parse_special
        )


async def detokenize(
    svc: InferenceService,
    target: Target,
    tokens: Sequence[int],
    *,
    options: Mapping[str, object] | None = None,
    keep_alive: Any = None,
) -> str:
    """The text of ``tokens``, control tokens written out (so text -> tokens -> text
    gives the text back, as llama-server's ``/detokenize``)."""
    check_tokens(tokens, vocabulary(target, target.spec.name))
    load = _load(svc, target, options)
    async with svc.scheduler.use(target.spec, load, svc.keep_alive(keep_alive)) as model:
        return await model.runner.detokenize(list(tokens), special=True)

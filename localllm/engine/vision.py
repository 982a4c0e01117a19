"""Images in prompts: the projector (libmtmd), image-aware prompts and the image step.

Owns everything the engine does with images:

* ``Projector`` loads an mmproj GGUF next to the text model (``mtmd_init_from_file``,
  on the text model's first offload device when layers are offloaded).
* ``media_prompt`` checks a request's images (``localllm.images.info``: count, bytes,
  header size, before anything is decoded) and tokenizes its text with them into
  the slot's *keys*: text tokens as they are, and for each image position a
  negative pseudo-token derived from the image's sha256 (libmtmd's bitmap id)
  and its offset.  Prefix reuse compares keys, so turn 2 about the same picture
  reuses its KV cells and never re-encodes it, while a different picture
  diverges at its first position.  The shim decodes the images one at a time
  (``ll_mtmd_tokenize``), so the runner holds one decoded bitmap, not all of them.
* ``image_step`` advances ONE slot's image per engine step: it encodes the image
  when the slot reaches it, then decodes at most ``n_ubatch`` of its embeddings
  (a separate ``llama_decode``: a llama batch holds tokens or embeddings, not
  both), so other slots wait at most one encode plus one chunk, about what a
  text prefill chunk costs them.  Its positions come from the slot's ``Positions``
  (positions.py): for an M-RoPE text model (Qwen2/2.5/3-VL) libmtmd's 4-component
  grid from the image's start position (temporal, row, column, spare per token:
  ``_Chunks.image_positions``), after which the slot's next position moves on by
  the image's ``n_pos``, not its token count.  It takes the engine's pieces it
  works with (projector, context, slots) and hands sampling and failures back to
  the engine's own steps.

No image layout is refused for its positions: libmtmd picks M-RoPE from the text
model's rope type and gives each image token's place (Qwen's grid, HunyuanVL's rows),
so ``mrope`` always agrees with ``n_pos_per_embd``.  Audio chunks are refused (400).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from localllm.engine.binding import last_errors, take_log
from localllm.engine.model import FLASH_ATTN, Model, _Owner, no_parts
from localllm.engine.slots import OVERFLOW, Slot
from localllm.errors import InvalidRequest, LocalLLMError
from localllm.images.info import check_images
from localllm.runner.messages import MEDIA_MARKER, CompletionRequest, Event, Failed, LoadOptions

if TYPE_CHECKING:
    from localllm.engine.model import Context

# The engine's steps an image hands back to: sampling a slot whose prompt just ended,
# and failing a slot whose decode failed (slot, cells before, llama_decode's code).
Sample = Callable[[Slot], list[Event]]
Fail = Callable[[Slot, int, int], Failed]

_CHUNK_TEXT, _CHUNK_IMAGE = 0, 1
_ERRORS = {
    1: "the prompt's image markers do not match its images",
    2: "image {n} could not be preprocessed for this model",
    3: "image {n} could not be decoded (corrupt, truncated or an unsupported format)",
    4: "image {n} is audio; this model takes images",
}
_MODEL_SIZE = re.compile(r"model size:\s*([\d.]+) MiB")
_BACKEND = re.compile(r"CLIP using (\S+) backend")
_COMPUTE = re.compile(r"(\S+) compute buffer size =\s*([\d.]+) MiB")


def image_keys(image_id: str, occurrence: int, n: int) -> list[int]:
    """Cache keys for an image chunk's ``n`` positions: negative, so never a real token.

    ``occurrence`` tells apart chunks of one image (models that slice an image
    emit several chunks with the same id)."""
    digest = hashlib.sha256(f"{image_id}/{occurrence}".encode()).hexdigest()
    base = int(digest[:15], 16) << 20  # 60 bits of the hash, 20 bits of offset
    return [-1 - base - i for i in range(n)]


@dataclass
class Span:
    """One image chunk's place in the prompt's keys."""

    start: int
    n: int
    chunk: int  # index in the tokenized chunks
    n_pos: int  # positions it takes (fewer than ``n`` for M-RoPE)


@dataclass
class Media:
    """A request's tokenized images: the chunks (owned), their spans, the held embeddings."""

    chunks: _Chunks
    spans: list[Span]
    held: int = -1  # the chunk whose embeddings ``embd`` holds
    embd: Any = field(default=None, repr=False)

    def span_at(self, pos: int) -> Span | None:
        return next((s for s in self.spans if s.start <= pos < s.start + s.n), None)

    def text_end(self, pos: int, limit: int) -> int:
        """Where the text starting at ``pos`` ends: the next image (or ``limit``)."""
        if self.span_at(pos) is not None:
            return pos
        return min([s.start for s in self.spans if s.start >= pos] + [limit])

    def reusable(self, n: int) -> int:
        """A cached prefix of ``n`` keys, cut back to the start of an image it splits."""
        s = self.span_at(n)
        return s.start if s is not None and s.start < n else n

    def release(self) -> None:
        self.held, self.embd = -1, None


class _Chunks(_Owner):
    """libmtmd's tokenized prompt: its text and image chunks."""

    def __init__(self, ffi: Any, lib: Any, h: Any) -> None:
        self.ffi, self.lib, self._h = ffi, lib, h

    def _free(self, h: Any) -> None:
        self.lib.ll_chunks_free(h)

    def image_positions(self, chunk: int, n: int, pos0: int) -> Any:
        """The 4-component positions of image chunk ``chunk`` (``n`` tokens) starting at
        ``pos0``, row-major, as a cffi int32_t[4 * n]."""
        out = self.ffi.new("int32_t[]", 4 * n)
        got = self.lib.ll_chunk_image_pos(self.handle, chunk, pos0, out, 4 * n)
        if got != n:
            raise LocalLLMError(f"libmtmd gave positions for {got} of the image's {n} tokens")
        return out


class Projector(_Owner):
    """A loaded mmproj GGUF, tied to the text model it was loaded for."""

    def __init__(
        self,
        path: str,
        model: Model,
        *,
        use_gpu: bool,
        device: int,
        n_threads: int,
        flash_attn: str = "auto",
    ) -> None:
        self.ffi, self.lib = model.ffi, model.lib
        take_log()
        h = self.lib.ll_mtmd_load(
            path.encode(),
            model.handle,
            int(use_gpu),
            device,
            n_threads,
            FLASH_ATTN.get(flash_attn, -1),
            1,
        )
        self.load_log = take_log()
        if h == self.ffi.NULL:
            raise LocalLLMError(
                f"libmtmd could not load the projector {path}: {last_errors(self.load_log)}"
            )
        self._h = h
        self.marker = self.ffi.string(self.lib.ll_mtmd_default_marker()).decode()
        self.n_embd = int(self.lib.ll_mtmd_n_embd(h))
        self.mrope = bool(self.lib.ll_mtmd_uses_mrope(h))
        self.non_causal = bool(self.lib.ll_mtmd_non_causal(h))
        self.vision = bool(self.lib.ll_mtmd_supports_vision(h))
        # The text model's positions per embedding row: 4 for M-RoPE (then every image
        # goes with libmtmd's grid positions), else 1.
        self.n_pos_per_embd = model.n_pos_per_embd

    def _free(self, h: Any) -> None:
        self.lib.ll_mtmd_free(h)

    def memory(self) -> dict[str, dict[str, int]]:
        """Bytes its weights and compute buffer took, per device, from libmtmd's log."""
        mib = 1024 * 1024
        dev = m.group(1) if (m := _BACKEND.search(self.load_log)) else "CPU"
        size = _MODEL_SIZE.search(self.load_log)
        out = {dev: {**no_parts(), "model": int(float(size.group(1)) * mib) if size else 0}}
        for name, val in _COMPUTE.findall(self.load_log):
            d = out.setdefault("CPU" if name.startswith("CPU") else name.split("_")[0], no_parts())
            d["compute"] += int(float(val) * mib)
        return out

    def tokenize(
        self,
        text: str,
        images: Sequence[bytes],
        add_special: bool,
        parse_special: bool,
        *,
        at_once: bool = False,
    ) -> tuple[list[int], Media]:
        """The prompt's keys and chunks; the shim decodes one image at a time.

        ``at_once``: every image decoded first, as libmtmd's own single tokenization
        (the reference the tests hold the default to)."""
        ffi = self.ffi
        bufs = [ffi.from_buffer(b) for b in images]  # the request's bytes, not copies
        arr = ffi.new("const unsigned char *[]", bufs or [ffi.NULL])
        lens = ffi.new("size_t[]", [len(b) for b in images] or [0])
        err, bad = ffi.new("int *"), ffi.new("int *")
        fn = self.lib.ll_mtmd_tokenize_at_once if at_once else self.lib.ll_mtmd_tokenize
        h = fn(
            self.handle,
            text.encode(),
            int(add_special),
            int(parse_special),
            arr,
            lens,
            len(images),
            err,
            bad,
        )
        if h == ffi.NULL:
            take_log()  # libmtmd's own lines say no more than the message below
            msg = _ERRORS.get(int(err[0]), "the images could not be tokenized")
            which = int(bad[0])
            raise InvalidRequest(
                msg.format(n=which + 1) if which >= 0 else msg.replace("image {n}", "an image")
            )
        chunks = _Chunks(ffi, self.lib, h)
        keys: list[int] = []
        spans: list[Span] = []
        seen: dict[str, int] = {}
        kind, n, n_pos = ffi.new("int *"), ffi.new("int *"), ffi.new("int *")
        idb = ffi.new("char[]", 128)
        for i in range(int(self.lib.ll_chunks_count(h))):
            self.lib.ll_chunk_info(h, i, kind, n, n_pos, idb, len(idb))
            if kind[0] == _CHUNK_TEXT:
                toks = ffi.new("int32_t[]", max(n[0], 1))
                got = self.lib.ll_chunk_text_tokens(h, i, toks, n[0])
                keys.extend(ffi.unpack(toks, got))
            elif kind[0] == _CHUNK_IMAGE:
                image_id = ffi.string(idb).decode()
                seen[image_id] = seen.get(image_id, -1) + 1
                spans.append(Span(len(keys), int(n[0]), i, int(n_pos[0])))
                keys.extend(image_keys(image_id, seen[image_id], int(n[0])))
            else:
                raise InvalidRequest("audio input is not supported")
        return keys, Media(chunks, spans)

    def encode(self, media: Media, span: Span) -> Any:
        """The span's embeddings (``span.n * n_embd`` floats), now held by ``media``."""
        size = span.n * self.n_embd
        out = self.ffi.new("float[]", size)
        rc = self.lib.ll_mtmd_encode(self.handle, media.chunks.handle, span.chunk, out, size)
        if rc != 0:
            raise LocalLLMError(f"encoding the image failed: {last_errors(take_log())}")
        media.held, media.embd = span.chunk, out
        return out


def load_projector(
    opts: LoadOptions, model: Model, devices: Sequence[int], n_threads: int
) -> Projector | None:
    """The projector ``opts`` names, on the first offload device when layers are offloaded."""
    if not opts.projector:
        return None
    use_gpu = opts.n_gpu_layers != 0 and bool(devices)
    return Projector(
        opts.projector,
        model,
        use_gpu=use_gpu,
        device=devices[0] if use_gpu else -1,
        n_threads=n_threads,
        flash_attn=opts.flash_attn,
    )


def media_prompt(
    proj: Projector | None, req: CompletionRequest, n_ctx_slot: int
) -> tuple[list[int], Media]:
    """A request with images as checked keys and its tokenized images."""
    if proj is None or not proj.vision:
        raise InvalidRequest("this model does not support images")
    if not isinstance(req.prompt, str):
        raise InvalidRequest("images need a text prompt with image markers")
    check_images(req.images)
    markers = req.prompt.count(MEDIA_MARKER)
    if markers != len(req.images):
        raise InvalidRequest(f"the prompt has {markers} image markers for {len(req.images)} images")
    text = (
        req.prompt.replace(MEDIA_MARKER, proj.marker) if proj.marker != MEDIA_MARKER else req.prompt
    )
    keys, media = proj.tokenize(text, req.images, req.add_special, req.parse_special)
    if len(keys) >= n_ctx_slot:
        # Truncating could cut an image in half: refuse instead.
        raise InvalidRequest(OVERFLOW)
    return keys, media


def image_step(
    proj: Projector,
    ctx: Context,
    slots: Sequence[Slot],
    step: int,
    n_ubatch: int,
    only: tuple[str, ...] | None,
    sample: Sample,
    fail: Fail,
) -> list[Event]:
    """Advance one slot whose prompt is at an image (round-robin by ``step``, the
    engine's step count): at most ``n_ubatch`` embeddings decoded; its events."""
    n = len(slots)
    for k in range(n):
        s = slots[(step + k) % n]
        a = s.active
        if a is None or a.media is None or (only is not None and a.adapters != only):
            continue
        span = a.media.span_at(a.n_past)
        if span is not None:
            return _advance(proj, ctx, s, span, step, n_ubatch, sample, fail)
    return []


def _advance(
    proj: Projector,
    ctx: Context,
    s: Slot,
    span: Span,
    step: int,
    n_ubatch: int,
    sample: Sample,
    fail: Fail,
) -> list[Event]:
    a = s.active
    assert a is not None and a.media is not None
    t0 = time.perf_counter_ns()
    a.last_step = step
    off = a.n_past - span.start
    # The image's start position: the slot's next one, or (for its later parts) the one
    # before the image, the next having moved past the whole image with its first part.
    start = s.pos.next - (span.n_pos if off else 0)
    try:
        embd = a.media.embd if a.media.held == span.chunk else proj.encode(a.media, span)
        grid = pos4 = proj.ffi.NULL  # grid owns the positions pos4 points into
        if proj.n_pos_per_embd == 4:
            grid = a.media.chunks.image_positions(span.chunk, span.n, start)
            pos4 = grid + 4 * off
    except LocalLLMError as exc:
        s.active = None
        a.sampler.close()
        return [Failed(a.req.id, exc.message, exc.status)]
    # A non-causal image attends within itself: it must go in one batch.
    n = span.n - off if proj.non_causal else min(n_ubatch, span.n - off)
    last = a.n_past + n == len(a.prompt)
    before = len(s.cache)
    pos0 = s.pos.add_image(n, span.n_pos, off == 0)
    assert pos0 == start
    s.cache.extend(a.prompt[a.n_past : a.n_past + n])
    rc = ctx.decode_embd(
        embd, off * proj.n_embd, n, proj.n_embd, pos0 + off, pos4, s.seq, last, proj.non_causal
    )
    del grid
    a.prompt_ns += time.perf_counter_ns() - t0
    if rc != 0:
        return [fail(s, before, rc)]
    a.n_past += n
    if off + n == span.n:
        a.media.release()
    if not last:
        return []
    s.logits_index = n - 1
    return sample(s)

"""Typed owners of the native handles: Model, Context and Batch.

Each class owns one shim handle, frees it in ``close()`` (also a context manager), and
converts between Python values and C buffers; requests and slots are engine.py's job.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Any

from localllm.engine.binding import last_errors, native, take_log
from localllm.engine.plugins import local_offload_devices
from localllm.errors import InvalidModelFile, ModelLoadError

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
_BUF_RE = re.compile(r"(\S+)\s+(model|KV|RS|compute|output|LoRA) buffer size =\s*([\d.]+) MiB")
_KIND = {
    "model": "model",
    "LoRA": "model",
    "KV": "kv",
    "RS": "kv",
    "compute": "compute",
    "output": "compute",
}


def no_parts() -> dict[str, int]:
    """A device's bytes by part before anything is counted: the parts every report has."""
    return {"model": 0, "kv": 0, "compute": 0}


def buffer_sizes(log: str, ram: Collection[str] | None = None) -> dict[str, dict[str, int]]:
    """Per device, the bytes of model / KV / compute buffers llama.cpp logged allocating.

    ``ram``: more buffer names that are system RAM; by default the CPU backend's
    extra buffer types ("AMX" holds repacked weights in RAM, not on a device).
    """
    if ram is None:
        from localllm.engine.cpu_buffers import host_buffer_names

        ram = host_buffer_names()
    out: dict[str, dict[str, int]] = {}
    for name, kind, mib in _BUF_RE.findall(log):
        dev = name.split("_")[0]
        if name.endswith("_Host") or name.startswith("CPU") or name in ram:
            dev = "CPU"  # pinned host buffers, mapped files and repacked copies live in RAM
        d = out.setdefault(dev, no_parts())
        d[_KIND[kind]] += int(float(mib) * 1024 * 1024)
    return out


class _Owner:
    """Base: a handle freed once by ``_free``; usable as a context manager."""

    _h: Any = None

    def _free(self, h: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def close(self) -> None:
        h, self._h = self._h, None
        if h is not None:
            self._free(h)

    def __enter__(self) -> _Owner:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter shutdown there is nothing left to report to
            pass

    @property
    def handle(self) -> Any:
        if self._h is None:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._h


SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}


class Model(_Owner):
    """A loaded GGUF (one file or all its splits) and its vocabulary."""

    def __init__(
        self,
        paths: Sequence[str],
        *,
        n_gpu_layers: int = 0,
        main_gpu: int = 0,
        use_mmap: bool = True,
        vocab_only: bool = False,
        devices: Sequence[int] | None = None,
        split_mode: str = "layer",
        tensor_split: Sequence[float] = (),
        cpu_patterns: Sequence[str] = (),
        use_extra_bufts: bool = True,
    ) -> None:
        self.ffi, self.lib = native()
        if not paths:
            raise ModelLoadError("no model file given")
        keep = [self.ffi.new("char[]", str(p).encode()) for p in paths]
        arr = self.ffi.new("const char *[]", keep)
        take_log()
        if devices is None:  # this machine's GPUs, as llama.cpp's own default would be
            devices = local_offload_devices()
        devs = self.ffi.new("int[]", list(devices) or [0])
        split = self.ffi.new("float[]", [float(x) for x in tensor_split] or [0.0])
        pats = [self.ffi.new("char[]", p.encode()) for p in cpu_patterns]
        pat_arr = self.ffi.new("const char *[]", pats or [self.ffi.NULL])
        h = self.lib.ll_model_load(
            arr,
            len(keep),
            n_gpu_layers,
            main_gpu,
            int(use_mmap),
            int(vocab_only),
            devs,
            len(devices),
            SPLIT_MODES.get(split_mode, 1),
            split,
            len(tensor_split),
            pat_arr,
            len(pats),
            int(use_extra_bufts),
        )
        self.load_log = take_log()
        if h == self.ffi.NULL:
            raise InvalidModelFile(
                f"llama.cpp could not load {paths[0]}: {last_errors(self.load_log)}"
            )
        self._h = h
        self.n_vocab = int(self.lib.ll_model_n_vocab(h))
        self.bos = int(self.lib.ll_token_bos(h))
        self.eos = int(self.lib.ll_token_eos(h))
        self._pieces: dict[int, bytes] = {}  # token -> bytes; -1 - token: rendered special
        self._markers: dict[tuple[str, ...], frozenset[int]] = {}
        self._eog: dict[int, bool] = {}
        self._buf = self.ffi.new("char[]", 256)

    def _free(self, h: Any) -> None:
        self.lib.ll_model_free(h)

    # ---- metadata -----------------------------------------------------------------
    @property
    def chat_template(self) -> str | None:
        p = self.lib.ll_model_chat_template(self.handle)
        return None if p == self.ffi.NULL else self.ffi.string(p).decode("utf-8", "replace")

    @property
    def n_ctx_train(self) -> int:
        return int(self.lib.ll_model_n_ctx_train(self.handle))

    @property
    def n_swa(self) -> int:
        """The sliding attention window (0: every layer sees the whole context)."""
        return int(self.lib.ll_model_n_swa(self.handle))

    @property
    def n_layer(self) -> int:
        return int(self.lib.ll_model_n_layer(self.handle))

    @property
    def n_embd(self) -> int:
        return int(self.lib.ll_model_n_embd(self.handle))

    @property
    def n_pos_per_embd(self) -> int:
        """4 for an M-RoPE model (its embedding batches carry 4 positions per row), else 1."""
        return int(self.lib.ll_model_n_pos_per_embd(self.handle))

    @property
    def description(self) -> str:
        n = self.lib.ll_model_desc(self.handle, self._buf, len(self._buf))
        return "" if n < 0 else self.ffi.string(self._buf).decode("utf-8", "replace")

    # ---- vocabulary ---------------------------------------------------------------
    def is_eog(self, token: int) -> bool:
        v = self._eog.get(token)
        if v is None:
            v = self._eog[token] = bool(self.lib.ll_token_is_eog(self.handle, token))
        return v

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        """The tokens of ``text``; a long one is read a chunk at a time (``tokenize``)."""
        from localllm.engine.tokenize import tokenize_all

        return tokenize_all(self.tokenize_bytes, text, add_special, parse_special)

    def tokenize_bytes(self, raw: bytes, add_special: bool, parse_special: bool) -> list[int]:
        """One libllama call over UTF-8 ``raw``."""
        cap = len(raw) + 8
        while True:
            out = self.ffi.new("int32_t[]", cap)
            n = self.lib.ll_tokenize(
                self.handle, raw, len(raw), out, cap, int(add_special), int(parse_special)
            )
            if n >= 0:
                return list(self.ffi.unpack(out, n))
            cap = -n

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes one token renders to, cached; control tokens render as empty
        unless ``special``."""
        key = -1 - token if special else token
        p = self._pieces.get(key)
        if p is None:
            flag = int(special)
            n = self.lib.ll_token_to_piece(self.handle, token, self._buf, len(self._buf), flag)
            if n < 0:
                big = self.ffi.new("char[]", -n)
                n = self.lib.ll_token_to_piece(self.handle, token, big, -n, flag)
                p = bytes(self.ffi.buffer(big, n))
            else:
                p = bytes(self.ffi.buffer(self._buf, n))
            self._pieces[key] = p
        return p

    def marker_tokens(self, markers: Sequence[str]) -> frozenset[int]:
        """Ids of the markers that are one token each (cached per marker list).

        A marker the vocabulary spells with several ordinary tokens already comes
        out as text, so only single tokens need the special rendering."""
        key = tuple(markers)
        ids = self._markers.get(key)
        if ids is None:
            found = set()
            for m in key:
                toks = self.tokenize(m, add_special=False, parse_special=True) if m else []
                if len(toks) == 1:
                    found.add(toks[0])
            ids = self._markers[key] = frozenset(found)
        return ids

    def token_text(self, token: int, special: bool = True) -> str:
        """One token as text, special tokens rendered (for logprobs and info)."""
        buf = self.ffi.new("char[]", 256)
        n = self.lib.ll_token_to_piece(self.handle, token, buf, 256, int(special))
        return "" if n < 0 else bytes(self.ffi.buffer(buf, n)).decode("utf-8", "replace")

    def detokenize(
        self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False
    ) -> str:
        arr = self.ffi.new("int32_t[]", list(tokens))
        cap = max(16, 8 * len(tokens))
        while True:
            buf = self.ffi.new("char[]", cap)
            n = self.lib.ll_detokenize(
                self.handle, arr, len(tokens), buf, cap, int(remove_special), int(unparse_special)
            )
            if n >= 0:
                return bytes(self.ffi.buffer(buf, n)).decode("utf-8", "replace")
            cap = -n


class Context(_Owner):
    """A llama context: KV cache with ``n_seq_max`` sequences, decode, outputs."""

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int,
        n_seq_max: int,
        n_batch: int,
        n_ubatch: int,
        n_threads: int,
        flash_attn: str = "auto",
        kv_type: str = "f16",
        embeddings: bool = False,
        pooling: int = -1,
        kv_unified: bool = True,
        device_sampling: bool = False,
    ) -> None:
        """``device_sampling``: planned for sampler chains that run in the decode
        (engine/device_sampling.py), whose graph takes more memory."""
        self.ffi, self.lib = model.ffi, model.lib
        self.model = model
        take_log()
        h = self.lib.ll_context_new(
            model.handle,
            n_ctx,
            n_seq_max,
            n_batch,
            n_ubatch,
            n_threads,
            n_threads,
            FLASH_ATTN.get(flash_attn, -1),
            kv_type.encode(),
            int(embeddings),
            pooling,
            int(kv_unified),
            int(device_sampling),
        )
        self.load_log = take_log()
        if h == self.ffi.NULL:
            raise ModelLoadError(
                f"llama.cpp could not create a context: {last_errors(self.load_log)}"
            )
        self._h = h
        self.n_ctx = int(self.lib.ll_n_ctx(h))
        self.pooling = int(self.lib.ll_pooling_type(h))
        self.device_sampling = bool(self.lib.ll_device_sampling(h))
        self._ids = self.ffi.new("int32_t[]", 64)
        self._lps = self.ffi.new("float[]", 64)
        self._tlp = self.ffi.new("float *")
        self._gp = self.ffi.new("float *")

    def _free(self, h: Any) -> None:
        self.lib.ll_context_free(h)

    def decode(self, batch: Batch) -> int:
        return int(self.lib.ll_decode(self.handle, batch.handle))

    def decode_embd(
        self,
        embd: Any,
        offset: int,
        n: int,
        n_embd: int,
        pos0: int,
        pos4: Any,
        seq: int,
        last: bool,
        non_causal: bool,
    ) -> int:  # cffi float[], int32_t*
        return int(
            self.lib.ll_decode_embd(
                self.handle, embd + offset, n, n_embd, pos0, pos4, seq, last, non_causal
            )
        )

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        return bool(self.lib.ll_mem_seq_rm(self.handle, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        self.lib.ll_mem_seq_cp(self.handle, src, dst, p0, p1)

    def seq_pos_min(self, seq: int) -> int:
        return int(self.lib.ll_mem_seq_pos_min(self.handle, seq))

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        self.lib.ll_mem_seq_add(self.handle, seq, p0, p1, delta)

    def can_shift(self) -> bool:
        return bool(self.lib.ll_mem_can_shift(self.handle))

    def seq_save(self, seq: int) -> tuple[Any, int] | None:
        """A copy of sequence ``seq``'s cells in host memory (a cffi buffer and its size),
        ``None`` when llama.cpp writes none."""
        size = int(self.lib.ll_state_seq_size(self.handle, seq))
        if size <= 0:
            return None
        buf = self.ffi.new("uint8_t[]", size)
        got = int(self.lib.ll_state_seq_get(self.handle, seq, buf, size))
        return (buf, got) if got > 0 else None

    def seq_load(self, seq: int, data: Any, size: int) -> bool:
        """Put cells saved by ``seq_save`` back as sequence ``seq`` (emptied first)."""
        return int(self.lib.ll_state_seq_set(self.handle, seq, data, size)) > 0

    def set_embeddings(self, on: bool) -> None:
        self.lib.ll_set_embeddings(self.handle, int(on))

    def embedding(self, *, seq: int = -1, index: int = -1) -> list[float] | None:
        """A pooled embedding by sequence, or one output's embedding by batch index."""
        p = (
            self.lib.ll_embeddings_seq(self.handle, seq)
            if seq >= 0
            else self.lib.ll_embeddings_ith(self.handle, index)
        )
        if p == self.ffi.NULL:
            return None
        return list(self.ffi.unpack(p, self.model.n_embd))

    def score(self, seq: int) -> float | None:
        """A rank-pooled sequence's score: the first of its classifier outputs (None when
        llama.cpp pooled nothing for it)."""
        p = self.lib.ll_embeddings_seq(self.handle, seq)
        return None if p == self.ffi.NULL else float(p[0])

    def greedy(self, index: int) -> tuple[int, float]:
        """The most likely token of output ``index`` and its probability; -1 when the
        last decode left no logits there."""
        t = int(self.lib.ll_greedy(self.handle, index, self._gp))
        return t, float(self._gp[0])

    def top_logprobs(self, index: int, token: int, n: int) -> tuple[float, list[tuple[int, float]]]:
        """The sampled token's logprob and the n best (token, logprob), from raw logits."""
        n = max(0, min(n, 64))
        k = self.lib.ll_top_logprobs(self.handle, index, token, n, self._ids, self._lps, self._tlp)
        if k < 0:
            return 0.0, []
        return float(self._tlp[0]), [(int(self._ids[i]), float(self._lps[i])) for i in range(k)]


class Batch(_Owner):
    """A reusable llama_batch of up to ``capacity`` tokens (one sequence id each)."""

    def __init__(self, capacity: int) -> None:
        self.ffi, self.lib = native()
        self.capacity = capacity
        self._h = self.lib.ll_batch_new(capacity)
        if self._h == self.ffi.NULL:
            raise MemoryError("llama_batch_init failed")

    def _free(self, h: Any) -> None:
        self.lib.ll_batch_free(h)

    def clear(self) -> None:
        self.lib.ll_batch_clear(self.handle)

    def __len__(self) -> int:
        return int(self.lib.ll_batch_size(self.handle))

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        return int(self.lib.ll_batch_add(self.handle, token, pos, seq, int(logits)))

    def add_seq(self, tokens: Sequence[int], pos0: int, seq: int, logits_last: bool) -> int:
        arr = self.ffi.new("int32_t[]", list(tokens))
        return int(
            self.lib.ll_batch_add_seq(self.handle, arr, len(tokens), pos0, seq, int(logits_last))
        )

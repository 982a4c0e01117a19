"""Build a model from a structured create request (the daemon side of ``/api/create``).

Two phases.  ``Creator.plan`` checks everything that can be checked without
writing (name, base model or files, adapters, a vision projector, a draft model,
parameters, template, messages, quantization type) and raises a 4xx error;
routes call it before the response starts, so bad input is a plain HTTP error.
``Creator.run`` then writes blobs, emitting Ollama's statuses (``parsing GGUF``,
``quantizing F16 model to Q4_K_M``, ``using existing layer sha256:…``,
``creating new layer sha256:…``, ``writing manifest``, ``success``), and writes
the manifest last: a failure on the way leaves only content-addressed blobs,
which the store's GC removes, never a half-made model.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from localllm.errors import InvalidRequest, LocalLLMError, ModelNotFound
from localllm.gguf.info import ModelInfo, read_model_info, read_model_info_split
from localllm.modelfile.checks import (
    check_messages,
    check_parameters,
    check_template,
    check_text_sizes,
)
from localllm.modelfile.draft_check import Draft, check_vocabulary, resolve_draft
from localllm.modelfile.lora_check import check_adapter_fits
from localllm.modelfile.paths import allowed_path, looks_like_path, model_files
from localllm.modelfile.quantize import QUANTIZABLE, quant_type, quantize_file
from localllm.store.importer import config_for
from localllm.store.local import Store
from localllm.store.manifests import Entry, Layer, Manifest, Media
from localllm.store.names import ModelName, parse_digest, parse_name
from localllm.store.projector import is_loadable_projector, projector_header
from localllm.template.select import check_gguf_template

if TYPE_CHECKING:
    from localllm.api.wire import ProgressEvent

# Where a create's progress goes, a base model's pull relayed (named for mypy only: no
# import of api/).  It takes any progress event, so a pull's sink can be handed on as is.
Emit: TypeAlias = "Callable[[ProgressEvent], None]"
PullFn: TypeAlias = "Callable[[str, Emit, threading.Event | None], None]"


@dataclass
class CreateSpec:
    """The fields of a create request, already shaped (see ``routes_create``)."""

    model: str
    from_: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    adapters: dict[str, str] = field(default_factory=dict)
    projector: dict[str, str] = field(default_factory=dict)  # {file name: digest}, at most one
    draft: str | dict[str, str] | None = None  # a store model's name, or {file name: digest}
    template: str | None = None
    system: str | None = None
    license: list[str] = field(default_factory=list)
    parameters: dict[str, Any] | None = None
    messages: list[dict[str, str]] | None = None
    quantize: str | None = None


@dataclass
class Plan:
    """What ``run`` will do; everything in it was validated."""

    name: ModelName
    info: ModelInfo | None  # None until an hf.co base has been pulled
    model_layers: list[Layer] = field(default_factory=list)  # already in the store
    import_paths: list[Path] = field(default_factory=list)  # files to copy in (allowed paths)
    pull: str | None = None  # an hf.co name to pull first
    base: Entry | None = None
    adapters: list[tuple[str, str, int]] = field(default_factory=list)  # (file, digest, size)
    quantize: str | None = None  # libllama type name
    projector: Layer | None = None  # replaces the base model's projector
    draft: Draft | None = None  # replaces the base model's draft
    spec: CreateSpec = field(default_factory=lambda: CreateSpec(""))


class Creator:
    """Creates models in ``store``; ``pull`` fetches an ``hf.co/…`` base that is missing."""

    def __init__(self, store: Store, pull: PullFn | None = None) -> None:
        self.store = store
        self.pull = pull

    # -- phase 1: validate ---------------------------------------------------------
    def plan(self, spec: CreateSpec) -> Plan:
        name = parse_name(spec.model)
        plan = Plan(name=name, info=None, spec=spec)
        check_text_sizes(
            template=spec.template,
            system=spec.system,
            licenses=spec.license,
            parameters=spec.parameters,
            messages=spec.messages,
        )
        if spec.quantize:
            plan.quantize = quant_type(spec.quantize)
        if spec.files:
            self._plan_files(plan, spec.files)
        elif spec.from_:
            self._plan_from(plan, spec.from_.strip())
        else:
            raise InvalidRequest("neither 'from' nor 'files' was given: nothing to build on")
        if plan.info is not None and plan.info.is_adapter:
            raise InvalidRequest("the base model is a LoRA adapter; use it with ADAPTER instead")
        spec.parameters = check_parameters(spec.parameters)
        spec.messages = check_messages(spec.messages)
        if spec.template is not None:
            check_template(spec.template, spec.messages or [], spec.system)
        elif plan.info is not None:  # the GGUF's own template is untrusted input too
            check_gguf_template(plan.info.chat_template)
        plan.projector = self._check_projector(spec.projector, plan.projector)
        if spec.draft is not None:
            plan.draft = resolve_draft(self.store, spec.draft, self._blob)
            self._check_draft_vocabulary(plan)
        for fname, digest in spec.adapters.items():
            plan.adapters.append(self._check_adapter(fname, digest, plan))
        if plan.quantize and plan.info is not None:
            self._check_quantizable(plan, plan.info)
        return plan

    def _blob(self, digest: str, what: str) -> Path:
        want = parse_digest(digest)
        if not self.store.blobs.exists(want):
            raise InvalidRequest(
                f'{what}: blob "{want}" not found; upload it first (POST /api/blobs/{want})'
            )
        return self.store.blobs.path(want)

    def _plan_files(self, plan: Plan, files: dict[str, str]) -> None:
        # Split GGUFs are named -00001-of-0000N: sorting the names puts the parts in order.
        # As Ollama: a clip GGUF among the files is the projector, not a model part.
        clip = {f: d for f, d in files.items() if is_loadable_projector(self._blob(d, f))}
        if len(clip) > 1:
            raise InvalidRequest(f"more than one projector file: {', '.join(sorted(clip))}")
        plan.projector = self._check_projector(clip, None)
        names = sorted(f for f in files if f not in clip)
        for fname in names:
            # Names are free (a blob path names its file "sha256-…"); the GGUF check below
            # reads the content.  Only formats we know we cannot import are named here.
            if fname.lower().endswith((".safetensors", ".bin", ".pt", ".pth")):
                raise InvalidRequest(f'"{fname}": only GGUF files can be imported')
        paths = [self._blob(files[f], f) for f in names]
        plan.info = read_model_info_split(paths)
        split = len(names) > 1
        plan.model_layers = [
            Layer(Media.MODEL, parse_digest(files[f]), p.stat().st_size, f if split else None)
            for f, p in zip(names, paths, strict=True)
        ]

    def _plan_from(self, plan: Plan, source: str) -> None:
        if looks_like_path(source):
            path = allowed_path(source, self.store.root)
            plan.import_paths = model_files(path)
            plan.info = read_model_info_split(plan.import_paths)
            return
        base_name = parse_name(source)
        if not self.store.manifests.exists(base_name):
            if self.pull is not None and (base_name.is_hf or _in_catalog(base_name)):
                plan.pull = base_name.display  # pulled in run(), stored under this name
                return
            raise ModelNotFound(
                f'FROM model "{source}" not found: pull it first, or give the '
                "path of a GGUF file" + _closest(base_name)
            )
        plan.base = self.store.get(base_name)
        self._use_base(plan, plan.base)

    def _use_base(self, plan: Plan, base: Entry) -> None:
        plan.model_layers = base.manifest.by_type(Media.MODEL)
        if not plan.model_layers:
            raise InvalidRequest(f"{base.name.display} has no model layer")
        plan.info = read_model_info_split(self.store.model_paths(base))

    def _check_projector(self, given: dict[str, str], found: Layer | None) -> Layer | None:
        if len(given) > 1 or (given and found is not None):
            raise InvalidRequest("a model takes one projector")
        for fname, digest in given.items():
            path = self._blob(digest, f"PROJECTOR {fname}")
            projector_header(path, f'PROJECTOR "{fname}"')  # a clip GGUF, or a 400
            return Layer(Media.PROJECTOR, parse_digest(digest), path.stat().st_size, fname)
        return found

    def _check_draft_vocabulary(self, plan: Plan) -> None:
        # (No base yet: an hf.co base not pulled; checked again after the pull.)
        bases = [self.store.blobs.path(ly.digest) for ly in plan.model_layers]
        bases += plan.import_paths
        if plan.draft is not None and bases:
            check_vocabulary(plan.draft, bases[0])  # the first part holds the tokenizer

    def _check_adapter(self, fname: str, digest: str, plan: Plan) -> tuple[str, str, int]:
        base = plan.info
        path = self._blob(digest, f"ADAPTER {fname}")
        info = read_model_info(path)
        if not info.is_adapter:
            raise InvalidRequest(
                f'ADAPTER "{fname}" is not a LoRA adapter (its GGUF general.type is not "adapter")'
            )
        if base is not None and info.architecture != base.architecture:
            raise InvalidRequest(
                f'ADAPTER "{fname}" was made for a "{info.architecture}" model, '
                f'but the base model is "{base.architecture}"'
            )
        if base is not None:  # (None: an hf.co base not pulled yet; checked again after)
            check_adapter_fits(
                fname,
                path,
                [self.store.blobs.path(ly.digest) for ly in plan.model_layers] + plan.import_paths,
            )
        return fname, parse_digest(digest), path.stat().st_size

    def _check_quantizable(self, plan: Plan, info: ModelInfo) -> None:
        if info.file_type.upper() == plan.quantize:
            plan.quantize = None  # already that type: nothing to do
            return
        if info.file_type.upper() not in QUANTIZABLE:
            raise InvalidRequest(
                f"quantization is only supported for F16, BF16 and F32 models; "
                f"this one is {info.file_type}"
            )
        if len(plan.model_layers) + len(plan.import_paths) > 1:
            raise InvalidRequest("quantizing a split GGUF is not supported")

    # -- phase 2: write ------------------------------------------------------------------
    def run(self, plan: Plan, emit: Emit, cancel: threading.Event | None = None) -> None:
        spec = plan.spec
        if plan.pull is not None:
            assert self.pull is not None

            def relay(event: ProgressEvent) -> None:
                if event.get("status") != "success":  # the create's own success comes last
                    emit(event)

            self.pull(plan.pull, relay, cancel)
            plan.base = self.store.get(parse_name(plan.pull))
            self._use_base(plan, plan.base)
            # Checks that needed the base's metadata.
            assert plan.info is not None
            plan.adapters = [self._check_adapter(f, d, plan) for f, d, _ in plan.adapters]
            self._check_draft_vocabulary(plan)
            if plan.quantize:
                self._check_quantizable(plan, plan.info)
        emit({"status": "parsing GGUF"})
        info = plan.info
        assert info is not None
        layers = [self._existing(layer, emit) for layer in plan.model_layers]
        for path in plan.import_paths:
            layers.append(self._import(path, emit, named=len(plan.import_paths) > 1))
        _check_cancel(cancel)
        if plan.quantize:
            layers, info = self._quantize(layers[0], info, plan.quantize, emit, cancel)
        base = plan.base
        # A projector or draft of this create's own, else the base model's.
        for own, media in (
            (plan.projector, Media.PROJECTOR),
            (plan.draft.layer if plan.draft else None, Media.DRAFT),
        ):
            if own is not None:
                layers.append(self._existing(own, emit))
            elif base is not None:
                layers += base.manifest.by_type(media)
        if base is not None:
            layers += [self._existing(a, emit) for a in base.manifest.by_type(Media.ADAPTER)]
        for fname, digest, size in plan.adapters:
            layers.append(self._existing(Layer(Media.ADAPTER, digest, size, fname), emit))
        layers += self._text_layers(spec, base, emit)
        _check_cancel(cancel)
        config = self.store.put_config(config_for(info))
        emit({"status": "writing manifest"})
        self.store.commit(plan.name, Manifest(config, layers))
        emit({"status": "success"})

    def _existing(self, layer: Layer, emit: Emit) -> Layer:
        emit({"status": f"using existing layer {layer.digest}"})
        return layer

    def _import(self, path: Path, emit: Emit, *, named: bool) -> Layer:
        from localllm.store.blobs import sha256_file

        digest = sha256_file(path)
        size = path.stat().st_size
        if self.store.blobs.exists(digest):
            emit({"status": f"using existing layer {digest}"})
        else:
            emit({"status": f"creating new layer {digest}"})
            self.store.blobs.import_file(path, expected=digest)
        return Layer(Media.MODEL, digest, size, path.name if named else None)

    def _quantize(
        self, layer: Layer, info: ModelInfo, ftype: str, emit: Emit, cancel: threading.Event | None
    ) -> tuple[list[Layer], ModelInfo]:
        from localllm.store.blobs import sha256_file

        status = f"quantizing {info.file_type.upper()} model to {ftype}"
        total = max(info.tensor_count, 1)
        emit({"status": status, "total": total, "completed": 0})
        tmp = self.store.blobs._tmp()  # the store's temp naming: stale ones are pruned
        try:
            quantize_file(
                self.store.blobs.path(layer.digest),
                tmp,
                ftype,
                lambda done, n: emit({"status": status, "total": n, "completed": done}),
                cancel,
            )
            new_info = read_model_info(tmp)
            digest = sha256_file(tmp)
            size = tmp.stat().st_size
            exists = self.store.blobs.exists(digest)
            emit({"status": f"{'using existing' if exists else 'creating new'} layer {digest}"})
            self.store.blobs._commit(tmp, digest)  # a rename: the file is already hashed
        finally:
            tmp.unlink(missing_ok=True)
        return [Layer(Media.MODEL, digest, size)], new_info

    def _text_layers(self, spec: CreateSpec, base: Entry | None, emit: Emit) -> list[Layer]:
        """Template, system, params, messages and license layers: the request's, else the base's."""
        store = self.store
        inherited = {
            m: base.manifest.first(m) if base is not None else None
            for m in (Media.TEMPLATE, Media.SYSTEM, Media.MESSAGES)
        }
        out: list[Layer] = []

        def add(media: str, data: bytes) -> None:
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            verb = "using existing" if store.blobs.exists(digest) else "creating new"
            emit({"status": f"{verb} layer {digest}"})
            out.append(store.put_bytes(media, data))

        for media, text in ((Media.TEMPLATE, spec.template), (Media.SYSTEM, spec.system)):
            if text is not None:
                add(media, text.encode())
            elif (layer := inherited[media]) is not None:
                out.append(self._existing(layer, emit))
        params = dict(store.params(base)) if base is not None else {}
        params.update(spec.parameters or {})
        if params:
            add(Media.PARAMS, _json(params))
        if spec.messages is not None:
            if spec.messages:
                add(Media.MESSAGES, _json(spec.messages))
        elif (layer := inherited[Media.MESSAGES]) is not None:
            out.append(self._existing(layer, emit))
        licenses = [ly for ly in base.manifest.by_type(Media.LICENSE)] if base else []
        out += [self._existing(ly, emit) for ly in licenses]
        seen = {ly.digest for ly in licenses}
        for text in spec.license:
            digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                add(Media.LICENSE, text.encode())
        return out


def _json(value: Any) -> bytes:
    import json

    return json.dumps(value, sort_keys=True).encode()


def _in_catalog(name: ModelName) -> bool:
    """Whether the library-name catalogue pulls ``name`` (``FROM llama3.2``).  A family it
    has with a tag it lacks is its own error (the family's tags)."""
    from localllm.store import catalog

    if name.is_hf:
        return False
    return catalog.load().resolve(name) is not None


def _closest(name: ModelName) -> str:
    from localllm.store import catalog

    close = [] if name.is_hf else catalog.load().closest(name)
    hint = f"; closest in the catalogue: {', '.join(close)}" if close else ""
    return f"{hint} (localllm search {name.model} looks on Hugging Face)"


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise LocalLLMError("create cancelled", status=499)

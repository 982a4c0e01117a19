"""An Ollama model store laid out exactly as Ollama writes it, built from the tiny test models.

The layout and formats are taken from Ollama's own source (ollama/ollama):

* ``manifest/paths.go``: ``$OLLAMA_MODELS/manifests/<host>/<namespace>/<model>/<tag>``
  and ``$OLLAMA_MODELS/blobs/sha256-<hex>`` (``:`` of the digest replaced by ``-``),
  folders made ``0755``;
* ``manifest/manifest.go``: the manifest (``schemaVersion`` 2, the Docker v2 manifest
  media type, ``config`` and ``layers`` of ``mediaType``/``digest``/``size`` and optional
  ``from``/``name``) written by ``json.NewEncoder``: compact JSON and a newline;
* ``manifest/layer.go``: blobs renamed from a temp file and chmod ``0644``;
* ``types/model/config.go``: the config blob's fields (``model_format`` ... ``os``);
* ``server/images.go``: the layer media types ``application/vnd.ollama.image.*``;
* ``types/model/name.go``: default host ``registry.ollama.ai``, namespace ``library``.

``three_models`` builds the store the import tests use: ``llama3.2:latest`` (Go
template, system prompt, parameters, message history, license),
``someuser/tiny-vision:v1`` (a vision projector) and ``hf.co/someone/Tiny-GGUF:Q8_0``
(a LoRA adapter, its template under the legacy ``prompt`` media type and an obsolete
``embed`` layer); the two text models share one weights blob, as Ollama stores them.
``snapshot`` records every file's bytes, mode and mtime, to prove the store untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
IMAGE = "application/vnd.ollama.image."

# llama3.2:latest: what its chat renders to is checked token by token (tests/support/tinymodel.py
# counts one token per character), and the reply is the tiny model's continuation of the
# last character: "m" -> "nop..." cut by the "s" stop parameter.
TEMPLATE_A = (
    "{{- if .System }}<|system|>{{ .System }}{{ end }}"
    "{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}{{ end }}<|assistant|>m"
)
SYSTEM_A = "You are terse."
PARAMS_A = {"stop": ["s"], "temperature": 0, "num_ctx": 512}
MESSAGES_A = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
LICENSE_A = "MIT License\nCopyright (c) tiny"
REPLY_A = "nopqr"
TEMPLATE_VISION = "{{ range .Messages }}{{ .Content }}{{ end }}"
TEMPLATE_HF = "{{ .Prompt }}"  # stored as the legacy "prompt" layer
REMAP_HF = {"a": "c"}  # its adapter: after "a" comes "c"
NAMES = ["llama3.2:latest", "someuser/tiny-vision:v1", "hf.co/someone/Tiny-GGUF:Q8_0"]


@dataclass
class OllamaStore:
    """Writes blobs and manifests the way Ollama does, into ``root``."""

    root: Path
    written: list[str] = field(default_factory=list)  # manifest names, as Ollama lists them

    def __post_init__(self) -> None:
        (self.root / "blobs").mkdir(parents=True, exist_ok=True, mode=0o755)
        (self.root / "manifests").mkdir(parents=True, exist_ok=True, mode=0o755)

    def blob(self, data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.blob_path(digest)
        if not path.exists():
            tmp = path.with_name("sha256-tmp")  # Ollama: os.CreateTemp(blobs, "sha256-")
            tmp.write_bytes(data)
            tmp.rename(path)
            path.chmod(0o644)
        return {"digest": digest, "size": len(data)}

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest.replace(":", "-")

    def layer(self, kind: str, data: bytes | Path, **extra: Any) -> dict[str, Any]:
        raw = data.read_bytes() if isinstance(data, Path) else data
        return {"mediaType": IMAGE + kind, **self.blob(raw), **extra}

    def text(self, kind: str, value: Any) -> dict[str, Any]:
        raw = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        return self.layer(kind, raw.encode())

    def config(self, *, file_type: str = "F32", **extra: Any) -> dict[str, Any]:
        cfg = {
            "model_format": "gguf",
            "model_family": "llama",
            "model_families": ["llama"],
            "model_type": "1.2M",
            "file_type": file_type,
            **extra,
            "architecture": "amd64",
            "os": "linux",
        }
        return {
            "mediaType": CONFIG_TYPE,
            **self.blob(json.dumps(cfg, separators=(",", ":")).encode()),
        }

    def manifest(
        self,
        path: str,
        config: dict[str, Any],
        layers: list[dict[str, Any]],
        *,
        raw: bytes | None = None,
    ) -> Path:
        """Write the manifest at ``manifests/<path>`` (``host/namespace/model/tag``)."""
        target = self.root / "manifests" / path
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        doc = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "config": config, "layers": layers}
        target.write_bytes(
            raw if raw is not None else json.dumps(doc, separators=(",", ":")).encode() + b"\n"
        )
        self.written.append(path)
        return target

    def digests(self) -> set[str]:
        """Every blob the manifests' layers name but the obsolete ``embed`` layers: what an
        import brings over (the config is Ollama's with an origin added, a blob of ours)."""
        out = set()
        for path in (self.root / "manifests").rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    doc = json.loads(path.read_bytes())
                except ValueError:
                    continue
                out |= {ly["digest"] for ly in doc["layers"] if ly["mediaType"] != IMAGE + "embed"}
        return out


def three_models(root: Path, work: Path) -> OllamaStore:
    """The store of the module docstring, its GGUFs generated into ``work``."""
    from tests.support.tinylora import make_remap_lora
    from tests.support.tinymodel import make_tiny_model
    from tests.support.visionmodel import make_projector

    gguf = make_tiny_model(work)
    store = OllamaStore(root)
    store.manifest(
        "registry.ollama.ai/library/llama3.2/latest",
        store.config(),
        [
            store.layer("model", gguf),
            store.text("template", TEMPLATE_A),
            store.text("system", SYSTEM_A),
            store.text("params", PARAMS_A),
            store.text("messages", MESSAGES_A),
            store.text("license", LICENSE_A),
        ],
    )
    store.manifest(
        "registry.ollama.ai/someuser/tiny-vision/v1",
        store.config(),
        [
            store.layer("model", gguf),
            store.layer("projector", make_projector(work / "mmproj")),
            store.text("template", TEMPLATE_VISION),
            store.text("params", {"temperature": 0}),
        ],
    )
    store.manifest(
        "hf.co/someone/Tiny-GGUF/Q8_0",
        store.config(file_type="Q8_0", rootfs={"type": "layers", "diff_ids": []}),
        [
            store.layer("model", gguf, **{"from": "/root/.ollama/models/blobs/sha256-x"}),
            store.layer("adapter", make_remap_lora(work, REMAP_HF)),
            store.text("prompt", TEMPLATE_HF),
            store.layer("embed", b"\x00" * 16),
            store.text("params", {"temperature": 0}),
        ],
    )
    return store


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry below ``root`` (itself included): kind, mode, size, mtime and content
    (a file's sha256, a symlink's target); FIFOs and the like are never opened."""
    import stat

    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = Path(dirpath) / name if name != "." else Path(dirpath)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                content: str = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                content = ""
            out[str(path.relative_to(root))] = (
                stat.S_IFMT(st.st_mode),
                stat.S_IMODE(st.st_mode),
                st.st_size,
                st.st_mtime_ns,
                content,
            )
    return out

"""What is in the backends folder, set against what the probe could load (``backends list``).

Pure bookkeeping over files and the probe's report: which plugins are built
for the core's ggml version, which of them loaded (or why not), which files
sit in folders of other ggml versions (ignored, with the reason), and which
files are not plugins of ours at all.  A plugin installed from a pack says so
(its record, while the file is still the one the pack brought); its libraries
folder is not a stray.  ``remove`` deletes a plugin's files, pack ones too.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from localllm import paths
from localllm.backends import catalog
from localllm.backends.advice import wanted_backends
from localllm.backends.layout import build_dir_for, libs_folder, record_path
from localllm.backends.manifest import installed_record
from localllm.hardware.detect import Hardware


@dataclass(frozen=True)
class BackendRow:
    name: str
    title: str
    built: bool  # a plugin file for the core's ggml version exists
    loaded: bool  # the probe loaded it
    devices: list[str]  # devices it brought
    ggml_version: str
    path: str
    size: int
    error: str  # why it did not load, or "" when fine / not built
    wanted: bool  # hardware here that this backend would serve
    needs: str
    build_dir: str  # the cmake tree (llama-bench etc. live there when built with --also)
    pack: str = ""  # where the pack it was installed from came from; "" when built here

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rows(hw: Hardware) -> list[BackendRow]:
    """One row per backend in the catalog."""
    folder = paths.backends() / hw.ggml_version if hw.ggml_version else None
    reports = {Path(str(p.get("path", ""))).name: p for p in hw.plugins}
    wanted = {w.backend.name for w in wanted_backends(hw.gpus_present, set()) if w.backend}
    out = []
    for b in catalog.BACKENDS.values():
        path = folder / b.filename if folder else None
        built = bool(path and path.is_file())
        rep = reports.get(b.filename, {})
        devs = [d.name for d in hw.devices if d.library in b.libraries]
        bdir = build_dir_for(b.name, hw.ggml_version) if hw.ggml_version else None
        tools = build_dir_for(b.name + "-tools", hw.ggml_version) if hw.ggml_version else None
        tree = next((d for d in (tools, bdir) if d and d.is_dir()), None)
        out.append(
            BackendRow(
                name=b.name,
                title=b.title,
                built=built,
                loaded=bool(rep.get("loaded")),
                devices=devs,
                ggml_version=hw.ggml_version if built else "",
                path=str(path) if path and built else "",
                size=path.stat().st_size if path and built else 0,
                error=str(rep.get("error") or "") if built else "",
                wanted=b.name in wanted,
                needs=b.needs,
                build_dir=str(tree or ""),
                pack=pack_origin(path) if path and built else "",
            )
        )
    return out


def pack_origin(plugin: Path) -> str:
    """Where the pack that installed ``plugin`` came from, while the file is still its own."""
    rec = installed_record(plugin)  # None too when built or replaced since
    if rec is None:
        return ""
    return f"{rec.get('origin', '?')}, sha256 {str(rec.get('pack_sha256', '?'))[:12]}"


def strays(hw: Hardware) -> list[dict[str, str]]:
    """Files in the backends folder that are not loadable plugins of ours, with the reason."""
    root = paths.backends()
    known = {b.filename for b in catalog.BACKENDS.values()}
    libs = {libs_folder(b) for b in catalog.BACKENDS}
    out: list[dict[str, str]] = []
    if not root.is_dir():
        return out
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name == "logs":
            continue
        if not entry.is_dir():
            out.append({"path": str(entry), "reason": "not a ggml version folder; ignored"})
        elif hw.ggml_version and entry.name != hw.ggml_version:
            out.append(
                {
                    "path": str(entry),
                    "reason": (
                        f"built for ggml {entry.name}, but the core is ggml {hw.ggml_version}; "
                        "ignored "
                        "(rebuild with 'localllm backends build NAME', then remove this folder)"
                    ),
                }
            )
        else:
            reports = {Path(str(p.get("path", ""))).name: p for p in hw.plugins}
            for f in sorted(entry.iterdir()):
                if f.name.startswith(".") or (f.name in libs and f.is_dir()):
                    continue
                rep = reports.get(f.name)
                if rep is not None and not rep.get("loaded") and f.name not in known:
                    out.append({"path": str(f), "reason": f"failed to load: {rep.get('error')}"})
                elif rep is None and f.name not in known:
                    out.append({"path": str(f), "reason": "not a plugin file; ignored"})
    return out


def remove(name: str) -> list[Path]:
    """Delete backend ``name``'s plugin from every ggml version folder, with the libraries
    and the record its pack brought; what was removed."""
    b = catalog.get(name)
    root = paths.backends()
    gone = []
    if root.is_dir():
        for folder in root.iterdir():
            if not folder.is_dir():
                continue
            f = folder / b.filename
            if f.exists():
                f.unlink()
                gone.append(f)
            record_path(f).unlink(missing_ok=True)
            libs = folder / libs_folder(b.name)
            if libs.is_dir():
                shutil.rmtree(libs, ignore_errors=True)
                gone.append(libs)
            if not any(folder.iterdir()):
                shutil.rmtree(folder, ignore_errors=True)
    return gone

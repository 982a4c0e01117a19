"""The wheel holds every file of the package: what pipx and Homebrew install is complete.

An editable install reads the source tree, so a file missing from the wheel
(the TUI's stylesheet once was) only shows up for users.  This builds the
wheel the way pipx does and compares it with ``git ls-files localllm``.
``.ci/run`` has just built that wheel from its clean clone, for the pipx
install it checks, and names it in ``LOCALLLM_TEST_WHEEL``: then this test
reads that one instead of building the same wheel again (12 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # 12 s when it builds the wheel: started first (tests/conftest.py)

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_has_every_tracked_file_of_the_package(tmp_path: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "localllm"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "localllm/tui/localllm.tcss" in tracked
    built = os.environ.get("LOCALLLM_TEST_WHEEL")
    wheel = Path(built) if built else build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    missing = [f for f in tracked if f not in names]
    assert missing == [], f"not in the wheel: {missing}"
    # The library-name catalogue is read at run time from the installed package: the
    # wheel's copy must be the whole, valid file (store/catalog.py reads it so).
    from localllm.store import catalog

    assert "localllm/store/catalog.toml" in tracked
    with zipfile.ZipFile(wheel) as z:
        shipped = z.read("localllm/store/catalog.toml")
    assert shipped == (REPO / "localllm/store/catalog.toml").read_bytes()
    families, _ = catalog.parse(shipped, "the wheel's catalogue")
    assert "library/llama3.2" in families and len(families) >= 40
    # So is the table of plugin packs this release trusts (backends/install.py): without it
    # every 'backends get' would need --trust.
    import tomllib

    assert "localllm/backends/trusted.toml" in tracked
    with zipfile.ZipFile(wheel) as z:
        table = z.read("localllm/backends/trusted.toml")
    assert table == (REPO / "localllm/backends/trusted.toml").read_bytes()
    packs = tomllib.loads(table.decode())["pack"]
    assert isinstance(packs, list) and all(len(p["sha256"]) == 64 for p in packs)
    # The native module is built into it, next to the package.
    assert any(n.startswith("localllm/_native") and n.endswith((".so", ".pyd")) for n in names)
    check_the_core_travels_with_it(wheel, names, tmp_path)


def check_the_core_travels_with_it(wheel: Path, names: set[str], tmp_path: Path) -> None:
    """The core the install built is in the wheel (``localllm/_core/``), each library once,
    under the name the loader asks for, and the module and the libraries look for each
    other only beside themselves: the wheel works wherever pipx unpacks it."""
    import json
    import sys

    from localllm.backends import core, elf

    if os.environ.get("LOCALLLM_LLAMA_PREFIX"):
        pytest.skip("built against LOCALLLM_LLAMA_PREFIX: the core stays in that prefix")
    with zipfile.ZipFile(wheel) as z:
        manifest = json.loads(z.read("localllm/_core/core.json"))
        libs = [f"localllm/_core/{n}" for n in manifest["libs"]]
        modules = [f"localllm/_core/{n}" for n in manifest.get("modules", [])]
        # (auditwheel's repaired wheel also lists the folder itself.)
        files = [n for n in names if n.startswith("localllm/_core/") and not n.endswith("/")]
        assert sorted(files) == sorted([*libs, *modules, "localllm/_core/core.json"])
        stems = [n.split("/")[-1].split(".")[0] for n in libs]
        # (macOS adds the Metal and BLAS backends, which its libggml links.)  A variant
        # build ships the CPU backend as modules instead of a linked library.
        order = [s for s in core.LOAD_ORDER if not (modules and s == "libggml-cpu")]
        assert [s for s in stems if s in core.LOAD_ORDER] == order, stems
        native = next(n for n in names if n.startswith("localllm/_native"))
        z.extract(native, tmp_path)
        for lib in [*libs, *modules]:
            z.extract(lib, tmp_path)
    if not sys.platform.startswith("linux"):
        return
    module = elf.read(tmp_path / native)
    # (A Python built with an rpath of its own, as pyenv's, adds that one; auditwheel adds
    # the folder it grafts system libraries into, localllm.libs/, inside the wheel too.)
    assert "$ORIGIN/_core" in module.search and not any(
        "localllm" in s and not _grafted(s) for s in module.search if s != "$ORIGIN/_core"
    ), module.search
    shipped = {n.split("/")[-1] for n in libs}
    assert {"libllama.so.0", "libmtmd.so.0"} <= set(module.needed) and not any(
        n.startswith(("libllama", "libggml", "libmtmd")) and n not in shipped for n in module.needed
    )
    for lib in libs:
        info = elf.read(tmp_path / lib)
        own = [s for s in info.search if not _grafted(s)]
        assert own == ["$ORIGIN"] and info.soname == lib.split("/")[-1], (lib, info)
        assert all(
            n in shipped for n in info.needed if n.startswith(("libllama", "libggml", "libmtmd"))
        )
    for module_path in modules:  # loaded by ggml from _core/: they find libggml-base beside them
        info = elf.read(tmp_path / module_path)
        assert [s for s in info.search if not _grafted(s)] == ["$ORIGIN"], (module_path, info)
        assert all(n in shipped for n in info.needed if n.startswith("libggml")), info.needed


def _grafted(search: str) -> bool:
    """auditwheel's search path into the wheel's own ``localllm.libs/`` (libgomp, grafted)."""
    return search.startswith("$ORIGIN/") and search.endswith("/localllm.libs")


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built from a clean copy of the tracked files (in-tree would reuse build/)."""
    src = tmp_path / "src"
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("localllm-*.whl")
    return wheel

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
    tracked = subprocess.run(["git", "ls-files", "localllm"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
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


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built from a clean copy of the tracked files (in-tree would reuse build/)."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src),
                          "-w", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("localllm-*.whl")
    return wheel

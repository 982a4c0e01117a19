"""The libraries a pack puts beside a plugin (``<backend>-libs/``) are checked at load as
the plugin is: one that another account could have written keeps the plugin unopened."""

from __future__ import annotations

import json
from pathlib import Path

from tests.backends.test_cli import cli


def rpc_row(backends: Path) -> dict[str, object]:
    rc, out, err = cli(backends, "backends", "list", "--json")
    assert rc == 0, err
    return {r["name"]: r for r in json.loads(out)}["rpc"]  # type: ignore[no-any-return]


def test_a_library_or_libs_folder_others_can_write_keeps_the_plugin_unloaded(
    backends: Path,
) -> None:
    version = next(backends.iterdir())
    libs = version / "rpc-libs"
    libs.mkdir()
    libs.chmod(0o755)
    lib = libs / "libcublas.so.12"
    lib.write_bytes(b"\x7fELF a runtime library")
    lib.chmod(0o755)
    assert rpc_row(backends)["loaded"]  # as install leaves them: fine

    lib.chmod(0o775)  # anyone in the group could have replaced cuBLAS
    row = rpc_row(backends)
    assert not row["loaded"]
    assert row["error"] == (
        f"refusing to load {lib}: {lib} is writable by its group (mode 775): "
        f"run 'chmod go-w {lib}' (a library libggml-rpc.so loads from rpc-libs/)"
    )

    lib.unlink()  # empty, but others may put a library there before the next load
    libs.chmod(0o777)
    row = rpc_row(backends)
    assert not row["loaded"]
    assert row["error"] == (
        f"refusing to load {version / 'libggml-rpc.so'}: {libs} is writable by others "
        f"than you (mode 777): run 'chmod go-w {libs}'"
    )

    libs.chmod(0o755)
    libs.rmdir()
    libs.symlink_to(backends.parent)  # the folder must be the folder, not a way elsewhere
    row = rpc_row(backends)
    assert not row["loaded"] and "is not a folder" in str(row["error"])

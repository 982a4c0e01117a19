"""backends.trust: a plugin loads only when no other account could have written it.

Real files, folders and modes under the test's own folder (pytest makes it 0700
under /tmp, which is world-writable with the sticky bit: the exception above the
backends folder is exercised by every test here).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from localllm.backends import build, trust


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    """``<tmp>/home/backends/0.9.1/libggml-rpc.so``, installed as a build installs it."""
    built = tmp_path / "built.so"
    built.write_bytes(b"\x7fELF plugin")
    built.chmod(0o775)  # as a linker leaves it under umask 002
    dest = tmp_path / "home" / "backends" / "0.9.1" / "libggml-rpc.so"
    old = os.umask(0o002)
    try:
        build.install_atomically(built, dest)
    finally:
        os.umask(old)
    return dest


def root_of(plugin: Path) -> Path:
    return plugin.parent.parent


def test_a_plugin_the_build_installed_is_trusted(plugin: Path) -> None:
    # Under umask 002 too: the folders and the file are made 0755.
    for p in (plugin, plugin.parent, root_of(plugin), root_of(plugin).parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o755, p
    assert trust.why_unsafe(plugin, root_of(plugin)) == ""


@pytest.mark.parametrize(
    ("which", "mode"),
    [
        ("version folder", 0o775),
        ("version folder", 0o757),
        ("backends folder", 0o775),
        # The sticky bit helps nowhere from the backends folder down: anyone could add files.
        ("backends folder", 0o1777),
        ("version folder", 0o1777),
        ("above", 0o775),
        ("above", 0o777),
        ("plugin", 0o775),
        ("plugin", 0o757),
    ],
)
def test_anything_others_can_write_is_refused_with_the_fix(
    plugin: Path, which: str, mode: int
) -> None:
    target = {
        "plugin": plugin,
        "version folder": plugin.parent,
        "backends folder": root_of(plugin),
        "above": root_of(plugin).parent,
    }[which]
    target.chmod(mode)
    why = trust.why_unsafe(plugin, root_of(plugin))
    assert why.startswith(f"refusing to load {plugin}: {target} is writable by ")
    assert f"(mode {mode & 0o7777:o}): run 'chmod go-w {target}'" in why
    target.chmod(mode & ~0o022)
    assert trust.why_unsafe(plugin, root_of(plugin)) == ""


def test_a_sticky_shared_folder_above_the_backends_folder_is_fine(plugin: Path) -> None:
    """Like /tmp: others may create entries there but cannot rename or replace ours."""
    above = root_of(plugin).parent
    above.chmod(0o1777)
    assert trust.why_unsafe(plugin, root_of(plugin)) == ""


def test_a_plugin_owned_by_another_user_is_refused(plugin: Path) -> None:
    if os.geteuid() == 0:
        os.chown(plugin, 54321, -1)
        uid = None
    else:  # files owned by us count as another user's when "we" are someone else
        uid = os.geteuid() + 1
    why = trust.why_unsafe(plugin, root_of(plugin), uid=uid)
    assert why.startswith(f"refusing to load {plugin}: {plugin} belongs to ")
    assert "not to you or root" in why and "LOCALLLM_BACKENDS" in why


def test_a_folder_owned_by_another_user_is_refused(plugin: Path) -> None:
    if os.geteuid() == 0:
        os.chown(plugin.parent, 54321, -1)
        why = trust.why_unsafe(plugin, root_of(plugin))
        assert why.startswith(f"refusing to load {plugin}: {plugin.parent} belongs to uid 54321")
    else:
        why = trust.why_unsafe(plugin, root_of(plugin), uid=os.geteuid() + 1)
        assert "belongs to" in why


def test_a_symlink_is_judged_by_where_it_leads(plugin: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    real = shared / "libggml-cuda.so"
    real.write_bytes(b"plugin")
    real.chmod(0o755)
    link = plugin.parent / "libggml-cuda.so"
    link.symlink_to(real)
    assert trust.why_unsafe(link, root_of(plugin)) == ""
    shared.chmod(0o777)
    why = trust.why_unsafe(link, root_of(plugin))
    assert f"{shared} is writable by group and others" in why
    # A version folder that is itself a symlink: its target's folders are the ones checked.
    shared.chmod(0o755)
    moved = tmp_path / "elsewhere"
    moved.mkdir(mode=0o777)
    moved.chmod(0o777)
    os.replace(plugin.parent, moved / "0.9.1")
    (root_of(plugin) / "0.9.1").symlink_to(moved / "0.9.1")
    assert f"{moved} is writable by group and others" in trust.why_unsafe(plugin, root_of(plugin))


def test_only_regular_files_load(plugin: Path) -> None:
    plugin.unlink()
    plugin.mkdir()
    refused = f"refusing to load {plugin}: not a regular file"
    assert trust.why_unsafe(plugin, root_of(plugin)) == refused
    plugin.rmdir()
    os.mkfifo(plugin)
    assert trust.why_unsafe(plugin, root_of(plugin)) == refused
    plugin.unlink()
    assert trust.why_unsafe(plugin, root_of(plugin)).startswith(
        f"refusing to load {plugin}: cannot check it: "
    )

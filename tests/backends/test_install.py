"""Installing a pack: trusted or refused, fitted to this core, unpacked only when every member
is what the manifest says, and all or nothing.

Good packs are made by ``backends.pack`` from a copy of the RPC plugin CI builds;
bad ones by hand (tests/support/packs.py).  After every refusal the backends
folder is exactly as it was: the plugin there still loads and nothing else
appeared, not even a temporary folder.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from localllm.backends import elf, install, installed, manifest, pack
from localllm.backends.pack import PackError
from tests.support.packs import (
    Member,
    core,
    manifest_for,
    real_pack,
    sha,
    trust_only,
    use_backends,
    write_pack,
)


@pytest.fixture
def setup(rpc_backends: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    return use_backends(monkeypatch, tmp_path, rpc_backends)


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


def test_a_pack_round_trips_and_says_where_it_came_from(
    setup: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version = setup
    packed = real_pack(version, tmp_path / "out")
    assert packed.path.name == f"rpc-ggml{version}-{pack.platform_tag()}.tar.gz"
    m = packed.manifest
    assert m["backend"] == "rpc" and m["ggml_version"] == version and m["ggml_commit"] == "0c1e570"
    assert set(m["files"]) == {"libggml-rpc.so"} and "libc.so.6" in m["system_libs"]
    # The same plugin packs to the same bytes: a hash in the release's table stays true.
    again = pack.make(
        "rpc", ggml_version=version, ggml_commit="0c1e570", out=tmp_path / "again.tar.gz"
    )
    assert again.sha256 == packed.sha256
    # The packed plugin no longer searches the builder's folders.
    with tarfile.open(packed.path) as tar:
        assert tar.getnames()[0] == "manifest.json"
        tar.extract("libggml-rpc.so", tmp_path / "x", filter="data")
    assert elf.read(tmp_path / "x" / "libggml-rpc.so").search == ["$ORIGIN/rpc-libs"]

    installed.remove("rpc")
    trust_only(monkeypatch, packed.sha256)
    done = install.install(packed.path, core(version))
    assert done.trusted_by == "the table" and done.plugin == root / version / "libggml-rpc.so"
    assert sha(done.plugin.read_bytes()) == m["files"]["libggml-rpc.so"]["sha256"]
    assert done.plugin.stat().st_mode & 0o777 == 0o755
    record = json.loads((root / version / ".libggml-rpc.so.pack.json").read_text())
    assert record["pack_sha256"] == packed.sha256 and record["origin"] == str(packed.path)
    assert installed.pack_origin(done.plugin).startswith(str(packed.path))
    assert sorted(p.name for p in (root / version).iterdir()) == [
        ".libggml-rpc.so.pack.json",
        "libggml-rpc.so",
    ]
    # Re-packing what a pack installed gives the same pack (its record says the toolkit).
    assert (
        pack.make(
            "rpc", ggml_version=version, ggml_commit="0c1e570", out=tmp_path / "re.tar.gz"
        ).sha256
        == packed.sha256
    )
    gone = installed.remove("rpc")
    assert root / version / "libggml-rpc.so" in gone and not (root / version).exists()


def test_only_a_known_hash_or_the_one_given_with_trust_is_installed(
    setup: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version = setup
    packed = real_pack(version, tmp_path / "out")
    trust_only(monkeypatch)
    before = snapshot(root)
    with pytest.raises(PackError, match=f"not in this localllm's table.*--trust {packed.sha256}"):
        install.install(packed.path, core(version))
    with pytest.raises(PackError, match=r"not the 0+ given with --trust"):
        install.install(packed.path, core(version), trust_arg="0" * 64)
    assert snapshot(root) == before
    done = install.install(packed.path, core(version), trust_arg=f"sha256:{packed.sha256}")
    assert done.trusted_by == "--trust"


def test_the_shipped_table_parses_and_holds_only_hashes() -> None:
    table = install.trusted_table()
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in table)


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"ggml_version": "0.0.1"}, "it is for ggml 0.0.1, but this localllm's core is ggml"),
        ({"ggml_commit": "deadbee"}, "built from ggml commit deadbee, the core from 0c1e570"),
        ({"platform": "linux-riscv64"}, "it is for linux-riscv64, this machine is"),
        ({"format": 3}, "manifest is format 3"),
        ({"backend": "metal"}, "unknown backend 'metal'"),
        ({"plugin": "libggml-cuda.so"}, "misnamed"),
        ({"architectures": ["90"]}, "rpc plugin has no GPU architectures"),
        ({"files": {"libggml-rpc.so": {"sha256": "x", "size": 1}}}, "has no sha256 and size"),
        (
            {"files": {"../libggml-rpc.so": {"sha256": "0" * 64, "size": 1}}},
            "does not hold the plugin",
        ),
        (
            {
                "files": {
                    "libggml-rpc.so": {"sha256": "0" * 64, "size": 1},
                    "rpc-libs/../../evil.so": {"sha256": "0" * 64, "size": 1},
                }
            },
            "a file outside its folders",
        ),
    ],
)
def test_a_manifest_for_another_core_or_malformed_is_refused_with_the_reason(
    setup: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    over: dict[str, object],
    why: str,
) -> None:
    root, version = setup
    plugin = (root / version / "libggml-rpc.so").read_bytes()
    m = {**manifest_for({"libggml-rpc.so": plugin}, ggml_version=version), **over}
    path = write_pack(tmp_path / "p.tar.gz", m, [Member("libggml-rpc.so", plugin)])
    trust_only(monkeypatch, sha(path.read_bytes()))
    before = snapshot(root)
    with pytest.raises(PackError, match=why.replace("(", r"\(")) as err:
        install.install(path, core(version))
    assert snapshot(root) == before
    if "ggml_version" in over:
        assert "localllm backends build rpc" in str(err.value)


PLUGIN = b"\x7fELF not really, but the hashes are all that count here"


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([Member("../libggml-rpc.so", PLUGIN)], "'..' part"),
        ([Member("/libggml-rpc.so", PLUGIN)], "absolute"),
        ([Member("rpc-libs//etc/x.so", PLUGIN)], "empty, '.' or '..' part"),
        ([Member("rpc-libs/../../escape.so", PLUGIN)], "'..' part"),
        ([Member("libggml-rpc.so", kind=tarfile.SYMTYPE, link="/etc/passwd")], "outside the tree"),
        ([Member("libggml-rpc.so", kind=tarfile.SYMTYPE, link="other.so")], "is a link"),
        ([Member("libggml-rpc.so", kind=tarfile.LNKTYPE, link="manifest.json")], "is a link"),
        ([Member("libggml-rpc.so", kind=tarfile.CHRTYPE)], "a device"),
        ([Member("libggml-rpc.so", kind=tarfile.FIFOTYPE)], "a device, fifo"),
        (
            [Member("libggml-rpc.so", PLUGIN), Member("libggml-cuda.so", PLUGIN)],
            "not in its manifest",
        ),
        ([Member("libggml-rpc.so", PLUGIN), Member("libggml-rpc.so", PLUGIN)], "twice"),
        ([Member("libggml-rpc.so", PLUGIN + b"!")], "is 56 bytes, the manifest says 55"),
        ([Member("libggml-rpc.so", PLUGIN.upper())], "has sha256"),
        ([], "which it does not hold"),
    ],
)
def test_a_member_that_is_not_what_the_manifest_says_is_refused(
    setup: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    members: list[Member],
    why: str,
) -> None:
    root, version = setup
    m = manifest_for({"libggml-rpc.so": PLUGIN}, ggml_version=version)
    path = write_pack(tmp_path / "p.tar.gz", m, members)
    trust_only(monkeypatch, sha(path.read_bytes()))
    before = snapshot(root)
    with pytest.raises(PackError, match=why.replace("(", r"\(")):
        install.install(path, core(version))
    assert snapshot(root) == before
    assert not (tmp_path / "escape.so").exists() and not (root / "escape.so").exists()


def test_a_manifest_that_does_not_come_first_is_not_a_pack(
    setup: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, version = setup
    m = manifest_for({"libggml-rpc.so": PLUGIN}, ggml_version=version)
    path = write_pack(
        tmp_path / "p.tar.gz", m, [Member("libggml-rpc.so", PLUGIN)], manifest_last=True
    )
    trust_only(monkeypatch, sha(path.read_bytes()))
    with pytest.raises(PackError, match=r"does not start with a manifest\.json"):
        install.install(path, core(version))


def test_a_truncated_pack_installs_nothing(
    setup: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version = setup
    packed = real_pack(version, tmp_path / "out")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(packed.path.read_bytes()[: packed.size // 2])
    trust_only(monkeypatch, sha(cut.read_bytes()))  # trusted, even: it must still fail cleanly
    before = snapshot(root)
    with pytest.raises(PackError, match="is not a readable plugin pack"):
        install.install(cut, core(version))
    assert snapshot(root) == before


def test_a_backends_folder_others_can_write_is_refused_before_anything_is_renamed(
    setup: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version = setup
    packed = real_pack(version, tmp_path / "out")
    installed.remove("rpc")
    trust_only(monkeypatch, packed.sha256)
    root.chmod(0o777)
    try:
        with pytest.raises(PackError, match=r"writable by group and others.*chmod go-w"):
            install.install(packed.path, core(version))
        assert not list(root.rglob("libggml-rpc.so"))
    finally:
        root.chmod(0o755)


def test_architectures_a_cuda_pack_covers() -> None:
    assert manifest.uncovered("cuda", ["90-real"], ["90"]) == []
    assert manifest.uncovered("cuda", ["90-real"], ["89", "90"]) == ["89"]
    assert manifest.uncovered("cuda", ["80"], ["90"]) == []  # PTX of 80, compiled at load
    assert manifest.uncovered("cuda", ["80-real"], ["90"]) == ["90"]
    assert manifest.uncovered("cuda", ["90a"], ["100"]) == ["100"]
    assert manifest.uncovered("cuda", ["90a-real"], ["90"]) == []
    assert manifest.uncovered("cuda", ["100f"], ["103", "120"]) == ["120"]
    assert manifest.uncovered("cuda", ["100-virtual"], ["90"]) == ["90"]
    assert manifest.uncovered("rocm", ["gfx1100"], ["gfx1100", "gfx90a"]) == ["gfx90a"]
    assert manifest.uncovered("rpc", [], ["90"]) == []


@pytest.mark.parametrize("how", ["renamed over", "rewritten in place"])
def test_a_pack_swapped_after_its_hash_is_checked_is_not_what_gets_installed(
    setup: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    root, version = setup
    packed = real_pack(version, tmp_path / "out")
    evil = b"\x7fELF someone else's code"
    hostile = write_pack(
        tmp_path / "hostile.tar.gz",
        manifest_for({"libggml-rpc.so": evil}, ggml_version=version),
        [Member("libggml-rpc.so", evil)],
    )
    installed.remove("rpc")
    trust_only(monkeypatch, packed.sha256)
    real_check = install.check_trust

    def swap_after_the_check(sha256: str, trust_arg: str | None, where: str) -> str:
        how_trusted = real_check(sha256, trust_arg, where)
        # Between the hash and the unpacking, whoever can write the path changes it.
        if how == "renamed over":
            hostile.replace(packed.path)
        else:
            packed.path.write_bytes(hostile.read_bytes())
        return how_trusted

    monkeypatch.setattr(install, "check_trust", swap_after_the_check)
    done = install.install(packed.path, core(version))
    assert done.sha256 == packed.sha256
    plugin = (root / version / "libggml-rpc.so").read_bytes()
    assert plugin != evil
    assert sha(plugin) == packed.manifest["files"]["libggml-rpc.so"]["sha256"]


def test_a_download_whose_bytes_are_not_its_hash_is_refused(
    setup: tuple[Path, str], tmp_path: Path
) -> None:
    _, version = setup
    packed = real_pack(version, tmp_path / "out")
    with pytest.raises(PackError, match=r"not the 0+ it was downloaded as"):
        install.install(packed.path, core(version), sha256="0" * 64)

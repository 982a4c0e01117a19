"""``backends get``: the pack that fits, from the stand-in Hub, checked before and after download.

The packs are made by ``backends.pack`` from a copy of the RPC plugin CI builds
(tests/support/rpcworker.py) and served by tests/support/hubstub.py as LFS files, so the
listing carries their sha256 like the Hub's does.  Covered: the right pack
among others, a hash not in the table (nothing downloaded), a download whose
bytes are not the listed ones, a download cut short (resumed), a published pack
that is itself truncated, one for another ggml version (by its name, and by a
manifest that contradicts its name), and one with a path that escapes its
folder.  The last test runs the command itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from localllm.backends import get, install, installed, pack
from localllm.backends.pack import PackError
from localllm.errors import DigestMismatch, PullError
from localllm.store import download
from tests.support.daemon import REPO, run_cli
from tests.support.hubstub import HubStub
from tests.support.packs import (
    Member,
    core,
    manifest_for,
    real_pack,
    trust_only,
    use_backends,
    write_pack,
)

REPO_ID = "localllm/backends"


@pytest.fixture
def hub(hubstub: HubStub) -> HubStub:
    """The empty Hub stand-in (tests/support/hub.py), under the name these tests use."""
    return hubstub


@pytest.fixture
def packed(
    rpc_backends: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str, pack.Packed]:
    """The test's backends folder and the pack of its RPC plugin, which is then removed."""
    root, version = use_backends(monkeypatch, tmp_path, rpc_backends)
    p = real_pack(version, tmp_path / "out")
    installed.remove("rpc")
    return root, version, p


def publish(hub: HubStub, name: str, data: bytes | Path) -> str:
    return hub.add_file(REPO_ID, f"packs/{name}", data, lfs=True).sha256


def downloads(hub: HubStub) -> list[str]:
    return [r.path for r in hub.requests if r.method == "GET" and "/api/" not in r.path]


def test_get_installs_the_pack_for_this_core_among_others(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version, p = packed
    plat = pack.platform_tag()
    other = write_pack(p.path.with_name("old.tar.gz"), None, [Member("x", b"old")])
    publish(hub, f"rpc-ggml0.0.1-{plat}.tar.gz", other)
    publish(hub, f"rpc-ggml{version}-linux-sparc64.tar.gz", other)
    publish(hub, f"cuda-ggml{version}-{plat}-sm90.tar.gz", other)
    publish(hub, p.path.name, p.path)
    hub.add_file(REPO_ID, "README.md", b"packs of localllm plugins")
    trust_only(monkeypatch, p.sha256)
    done = get.get("rpc", core(version))
    assert done.plugin == root / version / "libggml-rpc.so" and done.sha256 == p.sha256
    assert done.trusted_by == "the table"
    assert [d for d in downloads(hub) if "resolve" in d] == [
        f"/{REPO_ID}/resolve/main/packs/{p.path.name}"
    ]
    origin = installed.pack_origin(done.plugin)
    assert origin.startswith(f"hf.co/{REPO_ID}/packs/{p.path.name}")
    assert not list((Path(os.environ["LOCALLLM_CACHE"]) / "packs").iterdir())


def test_a_hash_not_in_the_table_is_refused_before_anything_is_downloaded(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version, p = packed
    publish(hub, p.path.name, p.path)
    trust_only(monkeypatch, "0" * 64)
    with pytest.raises(PackError, match=f"has sha256 {p.sha256}, which is not in .*--trust"):
        get.get("rpc", core(version))
    assert downloads(hub) == [] and not list(root.rglob("*.so"))
    trust_only(monkeypatch)
    assert get.get("rpc", core(version), trust_arg=p.sha256).trusted_by == "--trust"


def test_bytes_other_than_the_listed_ones_are_refused(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version, p = packed
    publish(hub, p.path.name, p.path)
    hub.corrupt.add(f"packs/{p.path.name}")
    trust_only(monkeypatch, p.sha256)
    with pytest.raises(DigestMismatch, match="digest mismatch"):
        get.get("rpc", core(version))
    assert not list(root.rglob("*.so"))
    assert not list((Path(os.environ["LOCALLLM_CACHE"]) / "packs").iterdir())


def test_a_download_cut_short_resumes_where_it_stopped(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, version, p = packed
    name = f"packs/{p.path.name}"
    publish(hub, p.path.name, p.path)
    hub.cut_once[name] = p.size // 3
    trust_only(monkeypatch, p.sha256)
    done = get.get("rpc", core(version))
    assert done.plugin.is_file()
    ranges = [r.range for r in hub.requests if r.path.endswith(p.sha256) and r.range]
    assert ranges == [f"bytes={p.size // 3}-"]


def test_a_get_that_gave_up_resumes_next_time(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version, p = packed
    publish(hub, p.path.name, p.path)
    hub.cut_once[f"packs/{p.path.name}"] = 1000
    trust_only(monkeypatch, p.sha256)
    monkeypatch.setattr(download, "RETRIES", 0)
    with pytest.raises(PullError, match="giving up"):
        get.get("rpc", core(version))
    assert not list(root.rglob("*.so"))
    partial = Path(os.environ["LOCALLLM_CACHE"]) / "packs" / f"sha256-{p.sha256}-partial"
    assert partial.stat().st_size == 1000
    assert get.get("rpc", core(version)).plugin.is_file()
    assert [r.range for r in hub.requests if r.path.endswith(p.sha256)][-1] == "bytes=1000-"


def test_a_published_pack_that_is_truncated_installs_nothing(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version, p = packed
    data = p.path.read_bytes()[: p.size - 100]
    trust_only(monkeypatch, publish(hub, p.path.name, data))
    with pytest.raises(PackError, match="not a readable plugin pack"):
        get.get("rpc", core(version))
    assert not list(root.rglob("*.so"))


def test_another_ggml_version_is_refused_with_the_reason(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version, p = packed
    plat = pack.platform_tag()
    publish(hub, f"rpc-ggml0.0.1-{plat}.tar.gz", p.path)
    publish(hub, f"rpc-ggml0.0.2-{plat}.tar.gz", p.path)
    trust_only(monkeypatch, p.sha256)
    with pytest.raises(
        PackError,
        match=rf"has rpc packs for ggml 0.0.1, 0.0.2, not for this "
        rf"core's ggml {version}; build",
    ):
        get.get("rpc", core(version))
    assert downloads(hub) == []
    # A name that lies: the manifest inside is what counts.
    plugin = p.path  # any bytes: the manifest is checked before the members
    m = manifest_for({"libggml-rpc.so": b"x"}, ggml_version="0.0.1")
    liar = write_pack(plugin.with_name("liar.tar.gz"), m, [Member("libggml-rpc.so", b"x")])
    trust_only(monkeypatch, publish(hub, f"rpc-ggml{version}-{plat}.tar.gz", liar))
    with pytest.raises(
        PackError, match=f"it is for ggml 0.0.1, but this localllm's core is ggml {version}"
    ):
        get.get("rpc", core(version))
    assert not list(root.rglob("*.so"))


def test_a_pack_with_a_path_that_escapes_its_folder_is_refused(
    hub: HubStub,
    packed: tuple[Path, str, pack.Packed],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, version, p = packed
    body = b"\x7fELF planted"
    m = manifest_for({"libggml-rpc.so": body}, ggml_version=version)
    evil = write_pack(
        tmp_path / "evil.tar.gz",
        m,
        [Member("libggml-rpc.so", body), Member("rpc-libs/../../../escaped.so", body)],
    )
    trust_only(monkeypatch, publish(hub, p.path.name, evil))
    with pytest.raises(PackError, match=r"unsafe path in the pack.*'\.\.' part"):
        get.get("rpc", core(version))
    assert not list(tmp_path.rglob("escaped.so")) and not list(root.rglob("*.so"))


def test_a_cuda_get_without_a_gpu_asks_for_the_architecture_before_the_hub(
    hub: HubStub, packed: tuple[Path, str, pack.Packed]
) -> None:
    _, version, _ = packed
    with pytest.raises(PackError, match=r"no GPU answered.*--arch"):
        get.get("cuda", core(version))
    assert hub.requests == []


def test_the_command_gets_and_loads_it(
    hub: HubStub, rpc_backends: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version = use_backends(monkeypatch, tmp_path, rpc_backends)
    # No commit in the manifest: the command checks it against the real core's.
    p = pack.make("rpc", ggml_version=version, ggml_commit="", out=tmp_path / "out")
    shutil.rmtree(root / version)
    publish(hub, p.path.name, p.path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOCALLLM_BACKENDS_REPO": REPO_ID}
    out = run_cli("backends", "get", "rpc", env=env)
    assert out.returncode == 1 and f"--trust {p.sha256}" in out.stderr
    out = run_cli("backends", "get", "rpc", "--trust", p.sha256, env=env)
    assert out.returncode == 0, out.stderr
    assert "Installed rpc" in out.stdout and "Loaded:" in out.stdout
    out = run_cli("backends", "list", "--json", env=env)
    row = {r["name"]: r for r in json.loads(out.stdout)}["rpc"]
    assert row["loaded"] and row["pack"].startswith(f"hf.co/{REPO_ID}/packs/{p.path.name}")
    assert install.trusted_table() == {}  # what the release ships: nothing yet


def test_install_takes_a_url_too(
    hub: HubStub, packed: tuple[Path, str, pack.Packed], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, version, p = packed
    publish(hub, p.path.name, p.path)
    url = f"{hub.url}/{REPO_ID}/resolve/main/packs/{p.path.name}"
    path = get.fetch_url(url)
    trust_only(monkeypatch)
    with pytest.raises(PackError, match=f"{re.escape(url)} has sha256 {p.sha256}, which is not"):
        install.install(path, core(version), origin=url)
    done = install.install(path, core(version), origin=url, trust_arg=p.sha256)
    assert done.plugin == root / version / "libggml-rpc.so"
    with pytest.raises(PullError, match="answered 404"):
        get.fetch_url(url + ".missing")
    assert [f.name for f in path.parent.iterdir()] == [path.name]  # the failed one is gone

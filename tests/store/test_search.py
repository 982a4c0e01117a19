"""The Hub search (store/search.py) and its fit per quant (models/search.py) on the stand-in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from localllm.errors import InvalidRequest
from localllm.models.remote import Machine
from localllm.models.search import search as search_with_fit
from localllm.scheduler.planner import PlanOptions
from localllm.store import remote, search as hub_search
from tests.support.ggufmeta import Shape, write_gguf
from tests.support.hubstub import HubStub
from tests.support.shapes import cpu, cuda

GiB = 1 << 30
TOOLS_TEMPLATE = (
    "{% if tools %}{{ tools | tojson }}{% endif %}"
    "{% for m in messages %}{{ m.content }}{% endfor %}"
)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    remote.clear_cache()


def _repo(
    stub: HubStub,
    folder: Path,
    repo: str,
    quants: tuple[str, ...],
    *,
    downloads: int,
    shape: Shape | None = None,
    projector: bool = False,
) -> None:
    shape = shape or Shape(n_layers=4, n_embd=256, n_ff=512, n_vocab=512)
    for quant in quants:
        name = f"{repo.split('/')[1]}-{quant}.gguf"
        stub.add_file(
            repo, name, write_gguf(folder / f"{repo.replace('/', '_')}-{name}", shape, quant)
        )
    if projector:
        from tests.support.hubstub import write_clip_header

        stub.add_file(
            repo,
            "mmproj-F16.gguf",
            write_clip_header(folder / f"{repo}-mm.gguf".replace("/", "_")).read_bytes(),
        )
    stub.add_file(repo, "README.md", b"# model\n")
    stub.set_meta(
        repo, downloads=downloads, likes=downloads // 10, updated="2025-03-01T12:00:00.000Z"
    )


@pytest.fixture
def hub3(hubstub: HubStub, tmp_path: Path) -> HubStub:
    _repo(
        hubstub,
        tmp_path,
        "alice/Tiny-Chat-GGUF",
        ("Q4_K_M", "Q8_0", "F16"),
        downloads=300,
        shape=Shape(n_layers=4, n_embd=256, n_ff=512, n_vocab=512, chat_template=TOOLS_TEMPLATE),
    )
    _repo(hubstub, tmp_path, "bob/tiny-vision-GGUF", ("Q8_0",), downloads=50, projector=True)
    _repo(
        hubstub,
        tmp_path,
        "carol/TINY-base-GGUF",
        ("F16",),
        downloads=10,
        shape=Shape(n_layers=2, n_embd=128, n_ff=256, n_vocab=256, chat_template=None),
    )
    _repo(hubstub, tmp_path, "dave/Unrelated-GGUF", ("Q8_0",), downloads=999)
    hubstub.add_file("erin/tiny-safetensors", "model.safetensors", b"\0" * 64)  # no GGUF
    hubstub.set_meta("erin/tiny-safetensors", downloads=5000)
    return hubstub


def test_repos_come_most_downloaded_first_with_their_quants(hub3: HubStub) -> None:
    repos = hub_search.search("tiny", 10)
    assert [r.repo for r in repos] == [
        "alice/Tiny-Chat-GGUF",
        "bob/tiny-vision-GGUF",
        "carol/TINY-base-GGUF",
    ]
    chat = repos[0]
    assert (chat.downloads, chat.likes, chat.updated) == (300, 30, "2025-03-01T12:00:00.000Z")
    assert chat.gguf["architecture"] == "llama" and chat.gguf["context_length"] == 2048
    assert chat.quants is not None
    assert [q.tag for q in chat.quants] == ["Q4_K_M", "Q8_0", "F16"]  # smallest first
    sizes = {f.path: f.size for f in hub3.repos["alice/Tiny-Chat-GGUF"].values()}
    assert [q.size for q in chat.quants] == [
        sizes[f"Tiny-Chat-GGUF-{t}.gguf"] for t in ("Q4_K_M", "Q8_0", "F16")
    ]
    # One header per repo: the smallest quant's, read in ranges; the others untouched.
    assert chat.read_from is chat.quants[0] and chat.info is not None
    assert hub3.served.get("Tiny-Chat-GGUF-Q4_K_M.gguf", 0) > 0
    assert "Tiny-Chat-GGUF-F16.gguf" not in hub3.served
    assert repos[1].projectors and repos[1].projectors[0].path == "mmproj-F16.gguf"
    assert len(hub_search.search("tiny", 2)) == 2


def test_the_search_request_has_the_hubs_parameters(
    hub3: HubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    seen: list[httpx.URL] = []
    real = httpx.Client.send

    def spy(self: httpx.Client, request: httpx.Request, **kw: object) -> httpx.Response:
        seen.append(request.url)
        return real(self, request, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx.Client, "send", spy)
    hub_search.search("tiny", 3)
    url = next(u for u in seen if u.path == "/api/models")
    params = url.params
    assert params["search"] == "tiny" and params["filter"] == "gguf"
    assert params["sort"] == "downloads" and params["limit"] == "3"
    assert set(params.get_list("expand[]")) == {
        "downloads",
        "likes",
        "lastModified",
        "pipeline_tag",
        "tags",
        "gguf",
    }
    tree = next(u for u in seen if "/tree/" in u.path)
    assert tree.params["recursive"] == "true"


def test_catalogue_names_bring_their_repo_first(hub3: HubStub) -> None:
    entries = [
        ("tinyllama", "bob/tiny-vision-GGUF"),
        ("tinyllama:1b", "bob/tiny-vision-GGUF"),
        ("unrelated:7b", "dave/Unrelated-GGUF"),
    ]
    repos = hub_search.search("unrelated", 5, catalog=lambda: entries)
    assert [r.repo for r in repos] == ["dave/Unrelated-GGUF"]
    assert repos[0].catalog == ["unrelated:7b"]
    # A catalogue name the Hub's text search would not find by repo name.
    repos = hub_search.search("tinyllama", 5, catalog=lambda: entries)
    assert [r.repo for r in repos] == ["bob/tiny-vision-GGUF"]
    assert repos[0].catalog == ["tinyllama", "tinyllama:1b"] and repos[0].downloads == 50
    # Tagged in the Hub's own results too.
    assert next(
        r
        for r in hub_search.search("tiny", 5, catalog=lambda: entries)
        if r.repo == "bob/tiny-vision-GGUF"
    ).catalog == ["tinyllama", "tinyllama:1b"]


def test_a_slow_repo_comes_back_unknown_within_the_deadline(hub3: HubStub) -> None:
    hub3.api_delay_s["alice/Tiny-Chat-GGUF"] = 3.0
    start = time.monotonic()
    repos = hub_search.search("tiny", 10, deadline_s=1.0)
    assert time.monotonic() - start < 2.5
    slow = next(r for r in repos if r.repo == "alice/Tiny-Chat-GGUF")
    assert slow.quants is None and slow.info is None
    assert all(r.info is not None for r in repos if r is not slow)


def test_bad_queries_and_limits_are_400(hub3: HubStub) -> None:
    for query, limit in (("", 5), ("x" * 201, 5), ("tiny", 0), ("tiny", 51)):
        with pytest.raises(InvalidRequest):
            hub_search.search(query, limit)


def test_hub_answers_are_checked_before_use(hubstub: HubStub, tmp_path: Path) -> None:
    _repo(hubstub, tmp_path, "ok/tiny-GGUF", ("Q8_0",), downloads=1)
    hubstub.add_file("no good/tiny GGUF", "x.gguf", b"GGUF")  # not a valid repo id
    hubstub.add_file("ok/tiny-junk-GGUF", "junk.gguf", b"GGUF" + bytes(60))
    hubstub.set_meta("ok/tiny-junk-GGUF", downloads=2)
    repos = hub_search.search("tiny", 10)
    assert [r.repo for r in repos] == ["ok/tiny-junk-GGUF", "ok/tiny-GGUF"]
    junk = repos[0]
    assert junk.info is None and "not a valid GGUF" in junk.error
    machine = Machine((cpu(64),), PlanOptions())
    out = search_with_fit("tiny", 10, lambda: machine, catalog=list)
    assert out["models"][0]["quants"][0]["fit"]["status"] == "unknown"
    assert out["models"][0]["error"]


def test_each_quant_gets_its_fit_and_the_repo_its_capabilities(hub3: HubStub) -> None:
    big_ram = Machine((cpu(64),), PlanOptions())
    out = search_with_fit("tiny", 10, lambda: big_ram, catalog=list)
    chat, vision, base = out["models"]
    assert chat["name"] == "hf.co/alice/Tiny-Chat-GGUF" and chat["repo"] == "alice/Tiny-Chat-GGUF"
    assert chat["capabilities"] == ["completion", "tools"]
    assert vision["capabilities"] == ["completion", "vision"]
    assert base["capabilities"] == ["completion"]
    assert chat["context_length"] == 2048 and chat["updated"] == "2025-03-01T12:00:00.000Z"
    fits = [q["fit"] for q in chat["quants"]]
    assert [f["status"] for f in fits] == ["cpu"] * 3 and fits[0]["summary"] == "CPU only"
    assert fits[0]["layers"] == 5 and fits[0]["layers_on_gpu"] == 0
    assert fits[0]["context"] == 2048 and list(fits[0]["memory"]) == ["CPU"]
    # Larger files, more memory: F16 is scaled from the Q4_K_M header.
    totals = [sum(f["memory"].values()) for f in fits]
    assert totals[0] < totals[1] < totals[2]
    # On a GPU every layer goes there; with almost no RAM nothing fits.
    gpu = Machine((cuda(0, 8), cpu(64)), PlanOptions())
    fit = search_with_fit("tiny", 1, lambda: gpu, catalog=list)["models"][0]["quants"][0]["fit"]
    assert (fit["status"], fit["summary"]) == ("gpu", "all 5 layers on GPU")
    tiny = Machine((cpu(0.001),), PlanOptions())
    fit = search_with_fit("tiny", 1, lambda: tiny, catalog=list)["models"][0]["quants"][0]["fit"]
    assert (fit["status"], fit["summary"]) == ("too_big", "too big")


def test_the_search_and_the_dry_run_know_the_library_catalogue(hub3: HubStub) -> None:
    from localllm import paths
    from localllm.models.service import ModelService
    from localllm.store.local import Store

    user = paths.user_catalog()
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(
        'format = 1\n\n[models.tinychat]\nlatest = "1b"\n'
        'tags."1b" = "hf.co/alice/Tiny-Chat-GGUF:Q8_0"\n'
    )
    machine = Machine((cpu(64),), PlanOptions())
    (m,) = search_with_fit("tinychat", 5, lambda: machine)["models"]
    assert m["repo"] == "alice/Tiny-Chat-GGUF" and m["catalog"] == ["tinychat", "tinychat:1b"]
    # The dry run of the library name takes the catalogue's quant, as the pull would.
    events: list[dict[str, object]] = []
    ModelService(Store()).pull("tinychat", events.append, machine=lambda: machine, dry_run=True)
    assert events[1] == {"status": "tinychat:latest is hf.co/alice/Tiny-Chat-GGUF:Q8_0"}
    last = events[-1]
    assert last["model"] == "tinychat:latest"
    assert last["source"] == "hf.co/alice/Tiny-Chat-GGUF:Q8_0"
    assert not Store().list()

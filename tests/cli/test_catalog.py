"""Library names end to end: the real CLI and daemon, the Hub stand-in, the real libllama.

The new user's transcript (docs/quickstart.md) is the first test: a home with nothing
in it, ``localllm run gemma4 "..."`` → the built-in catalogue entry is pulled under
``gemma4:latest`` and answers.  ``HF_ENDPOINT`` points the entry at the stand-in Hub,
which serves a tiny model under the entry's real repo and file name.  The other tests
point entries at the stand-in's repos with the user's own catalogue file, the way a
user overrides an entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localllm import paths
from tests.support.catalogkeys import new_key, publish, trust
from tests.support.daemon import Daemon, cli_env, free_port, run_cli, start_daemon
from tests.support.echo import ECHO_TEMPLATE
from tests.support.hubstub import HubStub
from tests.support.tinymodel import expected_greedy, make_tiny_model

USER_CATALOG = """
[models."llama3.2"]
tags."3b" = "hf.co/someone/Echo-GGUF:Q4_K_M"
tags."1b" = "hf.co/someone/Echo-GGUF:Q4_K_M"

[models.echo]
latest = "tiny"
tags.tiny = "hf.co/someone/Echo-GGUF:Q4_K_M"
"""


@pytest.fixture(autouse=True)
def _default_catalog_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own LOCALLLM_CATALOG_REPO must not leak into these tests."""
    monkeypatch.delenv("LOCALLLM_CATALOG_REPO", raising=False)


def answer(prompt: str) -> str:
    """The tiny model's greedy answer to one user message under ECHO_TEMPLATE."""
    return expected_greedy(f"user:{prompt}")


@pytest.fixture
def echo_hub(hub: HubStub, tmp_path: Path) -> HubStub:
    gguf = make_tiny_model(tmp_path / "echo-gguf", chat_template=ECHO_TEMPLATE)
    hub.add_file("someone/Echo-GGUF", "echo-Q4_K_M.gguf", gguf)
    return hub


@pytest.fixture
def catalog_daemon(
    echo_hub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Daemon]:
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    user = paths.user_catalog()
    user.parent.mkdir(parents=True)
    user.write_text(USER_CATALOG)
    with start_daemon(tmp_path) as d:
        yield d


REAL_REPO, REAL_FILE = "ggml-org/gemma-4-E4B-it-GGUF", "gemma-4-E4B-it-Q4_K_M.gguf"


@pytest.fixture
def fresh_daemon(hub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """A home with nothing in it (no models, no catalogue file), and the Hub stand-in
    serving the tiny model where the built-in ``gemma4`` entry points."""
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    gguf = make_tiny_model(tmp_path / "echo-gguf", chat_template=ECHO_TEMPLATE)
    hub.add_file(REAL_REPO, REAL_FILE, gguf)
    assert not paths.home().exists()
    with start_daemon(tmp_path) as d:
        yield d


def test_a_new_user_runs_gemma4_by_name(fresh_daemon: Daemon, hub: HubStub) -> None:
    """The session of docs/quickstart.md, line by line where it does not depend on the
    file's bytes (its digest, size and the tiny model's answer)."""
    d = fresh_daemon
    out = d.cli("run", "gemma4", "Why is the sky blue")
    assert out.returncode == 0, out.stderr
    assert out.stdout == answer("Why is the sky blue") + "\n" == "fghijklmnopqrstuvwxyz\n"
    sha = hub.repos[REAL_REPO][REAL_FILE].sha256
    lines = out.stderr.splitlines()
    assert lines[:3] == [
        "pulling manifest",
        f"gemma4:latest is hf.co/{REAL_REPO}:Q4_K_M (catalogue entry gemma4:e4b)",
        f"using Q4_K_M (requested): {REAL_FILE}",
    ]
    assert lines[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    assert [ln for ln in lines if re.fullmatch(rf"pulling {sha[:12]}: 100% ▕█+▏ .+", ln)]
    transcript = (Path(__file__).parents[2] / "docs" / "quickstart.md").read_text()
    for line in (lines[1], lines[2], "verifying sha256 digest", "writing manifest", "success"):
        assert f"\n{line}\n" in transcript, line
    listed = d.cli("list").stdout
    assert re.search(r"^gemma4:latest\s+[0-9a-f]{12}\s", listed, re.M), listed
    # Stored now: the second run neither pulls nor asks the Hub.
    asked = len(hub.requests)
    again = d.cli("run", "gemma4", "hello")
    assert (again.returncode, again.stdout, again.stderr) == (0, answer("hello") + "\n", "")
    assert len(hub.requests) == asked
    # show says where it came from: the hf.co name that pulls it again, and the digest.
    shown = d.cli("show", "gemma4").stdout
    assert re.search(
        rf"^  Source\n\s+from\s+hf\.co/{REAL_REPO}:Q4_K_M\n"
        r"\s+catalogue\s+gemma4:e4b\n"
        rf"\s+file\s+{re.escape(REAL_FILE)}\n\s+digest\s+sha256:{sha}\n",
        shown,
        re.M,
    ), shown
    body = httpx.post(f"{d.url}/api/show", json={"model": "gemma4"}, trust_env=False).json()
    assert body["origin"]["source"] == f"hf.co/{REAL_REPO}:Q4_K_M"
    assert body["origin"]["digest"] == f"sha256:{sha}"


def test_unknown_names_are_one_line_searched_for_and_never_pulled_unasked(
    catalog_daemon: Daemon, echo_hub: HubStub
) -> None:
    d = catalog_daemon
    # The daemon answers one line, before anything is asked of the Hub.
    asked = len(echo_hub.requests)
    r = httpx.post(f"{d.url}/api/pull", json={"model": "lama3.2"}, trust_env=False)
    assert r.status_code == 404 and "closest: llama3.2" in r.json()["error"]
    assert len(echo_hub.requests) == asked
    # The CLI then searches the Hub (tests/cli/test_pull_search.py): here only an unknown
    # publisher's repo matches, so nothing is offered, and the error says so.
    for args in (("run", "lama3.2", "hi"), ("pull", "lama3.2")):
        out = d.cli(*args)
        assert out.returncode == 1 and out.stdout == ""
        assert out.stderr.splitlines() == [
            "lama3.2 is not in the catalogue; searching Hugging Face for it",
            "Error: model 'lama3.2' is not in the catalogue; closest: llama3.2, llama3.3, "
            "llama3.1. Search Hugging Face with `localllm search lama3.2`, or pull "
            "hf.co/{user}/{repo}[:{quant}]. Hugging Face has no GGUF of it from a known "
            "publisher (ggml-org, unsloth, bartowski, lmstudio-community or the model's own "
            "organisation)",
        ]
    assert any(r.path == "/api/models" for r in echo_hub.requests[asked:])  # the search
    assert "Echo" not in d.cli("list").stdout  # nothing pulled
    tag = d.cli("pull", "llama3.2:8b")
    assert tag.returncode == 1 and "llama3.2 has no tag '8b'" in tag.stderr
    assert "Traceback" not in tag.stderr and "searching" not in tag.stderr


def test_sdk_pull_and_create_from_accept_library_names(
    catalog_daemon: Daemon, tmp_path: Path
) -> None:
    import ollama

    d = catalog_daemon
    client = d.keep(ollama.Client(host=d.url, trust_env=False, timeout=60))
    assert client.pull("llama3.2:1b").status == "success"  # ollama-python, unchanged
    assert [m.model for m in client.list().models] == ["llama3.2:1b"]
    # Modelfile FROM a library name not pulled yet: pulled under that name, then built on.
    (tmp_path / "Modelfile").write_text("FROM echo\nPARAMETER num_predict 3\n")
    made = d.cli("create", "mine", "-f", str(tmp_path / "Modelfile"))
    assert made.returncode == 0, made.stderr
    assert "echo:latest is hf.co/someone/Echo-GGUF:Q4_K_M" in made.stderr
    names = sorted(m.model or "" for m in client.list().models)
    assert names == ["echo:latest", "llama3.2:1b", "mine:latest"]
    out = d.cli("run", "mine", "hello")
    assert out.stdout == answer("hello")[:3] + "\n"


def test_a_model_made_here_is_not_shadowed_by_the_catalogue(
    catalog_daemon: Daemon, tmp_path: Path, echo_hub: HubStub
) -> None:
    d = catalog_daemon
    own = make_tiny_model(tmp_path / "own", chat_template=ECHO_TEMPLATE)
    (tmp_path / "Modelfile").write_text(f"FROM {own}\nSYSTEM mine\n")
    made = d.cli("create", "llama3.2", "-f", str(tmp_path / "Modelfile"))
    assert made.returncode == 0, made.stderr
    asked = len(echo_hub.requests)
    out = d.cli("run", "llama3.2", "hello")
    assert out.returncode == 0 and out.stderr == ""  # the local model, no pull
    refused = d.cli("pull", "llama3.2")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "Error: 'llama3.2:latest' is a model made here, not pulled: pulling would replace it. "
        "Remove it first (localllm rm llama3.2:latest) or copy it to another name"
    ]
    assert len(echo_hub.requests) == asked
    assert "mine" in d.cli("show", "llama3.2", "--system").stdout


# -- localllm catalog: no daemon needed ------------------------------------------------------
def test_catalog_list_shows_the_names_and_the_users_entries(tmp_path: Path) -> None:
    env = cli_env(free_port())
    out = run_cli("catalog", env=env)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()
    assert rows[0].split() == ["NAME", "SOURCE", "NOTES"]
    assert re.search(
        r"^llama3\.2:3b\s+hf\.co/bartowski/Llama-3\.2-3B-Instruct-GGUF:Q4_K_M\s+"
        r"latest$",
        out.stdout,
        re.M,
    )
    assert len(rows) - 1 >= 80
    assert re.match(r"\d+ names; catalogue of \d{4}-\d\d-\d\d, built-in$", out.stderr)
    user = paths.user_catalog()
    user.parent.mkdir(parents=True)
    user.write_text(USER_CATALOG)
    mine = run_cli("catalog", "list", "llama3.2", env=env)
    assert re.search(
        r"^llama3\.2:3b\s+hf\.co/someone/Echo-GGUF:Q4_K_M\s+latest, your file$", mine.stdout, re.M
    )
    assert f"your entries: {user}" in mine.stderr
    as_json = json.loads(run_cli("catalog", "list", "--json", "gemma3:4b", env=env).stdout)
    assert as_json == [
        {
            "name": "gemma3:4b",
            "source": "hf.co/ggml-org/gemma-3-4b-it-GGUF:Q4_K_M",
            "latest": True,
            "from": "built-in",
            "projector": "mmproj-model-f16.gguf",
            "description": "Google Gemma 3; 4B and up see images",
        }
    ]


def test_catalog_list_marks_the_unverified_entries() -> None:
    env = cli_env(free_port())
    out = run_cli("catalog", "list", "gemma4", env=env)
    assert out.returncode == 0, out.stderr
    assert re.search(
        r"^gemma4:12b\s+hf\.co/unsloth/gemma-4-12b-it-GGUF:Q4_K_M\s+unverified$", out.stdout, re.M
    ), out.stdout
    assert re.search(r"^gemma4:e4b\s+\S+\s+latest$", out.stdout, re.M), out.stdout
    rows = json.loads(run_cli("catalog", "list", "--json", "gemma4", env=env).stdout)
    assert {r["name"]: r.get("verified", True) for r in rows} == {
        "gemma4:e2b": True,
        "gemma4:e4b": True,
        "gemma4:12b": False,
        "gemma4:26b": True,
        "gemma4:31b": True,
    }


def test_catalog_update_and_reset(
    hub: HubStub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``catalog update`` runs in this process, so that it trusts the test's key (the
    real key is not in the repository); ``catalog`` and ``catalog reset`` are the CLI."""
    from localllm.cli.main import main
    from localllm.store import catalog_trust

    env = cli_env(free_port())
    key = new_key()
    trust(monkeypatch, key)
    data = (
        f'format = 1\nupdated = {catalog_trust.today()}\n[models.fresh]\nlatest = "1b"\n'
        'tags."1b" = "hf.co/bartowski/Fresh-GGUF:Q4_K_M"\n'
        'tags."2b" = "hf.co/someone/Fresh-GGUF:Q4_K_M"\n'
    ).encode()
    publish(hub, data, key)
    sha = hashlib.sha256(data).hexdigest()
    assert main(["catalog", "update"]) == 0
    saved = paths.catalog_data() / "catalog.toml"
    assert capsys.readouterr().out.splitlines() == [
        f"downloaded hf.co/localllm/catalog/catalog.toml (sha256 {sha[:12]}…): 1 models, "
        f"1 tags, dated {catalog_trust.today()}",
        "left out 1 entries whose repos are not from a known publisher",
        f"now in use; saved as {saved}",
    ]
    # The CLI in its own process checks the signature against the shipped keys, which
    # did not sign this copy: it is ignored there, and the built-in catalogue is used.
    listed = run_cli("catalog", env=env)
    assert listed.stderr.splitlines()[-1].endswith(", built-in")
    assert "fresh:1b" not in listed.stdout
    assert main(["catalog"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[1].split() == [
        "fresh:1b",
        "hf.co/bartowski/Fresh-GGUF:Q4_K_M",
        "latest",
    ]
    assert "downloaded from hf.co/localllm/catalog" in out.err
    assert main(["catalog", "update", "--sha256", "0" * 64]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "does not match the expected" in err
    assert saved.read_bytes() == data

    reset = run_cli("catalog", "reset", env=env)
    assert reset.returncode == 0, reset.stderr
    folder = paths.catalog_data()
    assert reset.stdout.splitlines() == [
        f"removed {folder / 'catalog.toml'}",
        f"removed {folder / 'catalog.toml.sig'}",
        f"removed {folder / 'source.json'}",
        "the built-in catalogue is in use",
    ]
    assert list(folder.iterdir()) == []
    assert main(["catalog"]) == 0 and capsys.readouterr().err.endswith(", built-in\n")
    again = run_cli("catalog", "reset", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"no downloaded catalogue in {folder}: nothing to remove",
        "the built-in catalogue is in use",
    ]

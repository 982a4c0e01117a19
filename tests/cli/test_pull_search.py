"""Names no source has: the Hugging Face search ``pull`` and ``run`` fall back to, the
publisher filter, confirmation, ``--as``; and ``pull gemma4`` from the catalogue.

End to end: the real CLI and daemon, the Hub stand-in (tests/support/hubstub.py), the
real libllama.  ``choose`` (which repo is offered) is also tested on its own, on search
answers written out.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localllm.cli.pullsearch import choose, confirm, queries
from localllm.errors import InvalidRequest, ModelNotFound
from localllm.store.names import parse_name
from tests.support.daemon import Daemon, start_daemon
from tests.support.echo import ECHO_TEMPLATE
from tests.support.hubstub import HubStub
from tests.support.tinymodel import expected_greedy, make_tiny_model

GOOD = "unsloth/Foo-9B-GGUF"  # a known publisher
POPULAR = "randomuser/Foo-9B-GGUF"  # more downloads, an unknown publisher
OWN = "fooorg/Foo-4B-GGUF"  # the model's own organisation: unsloth names fooorg/Foo-9B
LONE = "randomuser/Bar-GGUF"  # the only repo for "bar": never offered
GEMMA4 = ("ggml-org/gemma-4-E4B-it-GGUF", "gemma-4-E4B-it-Q4_K_M.gguf")  # the catalogue's


@pytest.fixture
def search_daemon(
    hub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Daemon]:
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    gguf = make_tiny_model(tmp_path / "echo-gguf", chat_template=ECHO_TEMPLATE)
    hub.add_file(*GEMMA4, gguf)
    for repo, downloads, tags in (
        (GOOD, 5_000, ["gguf", "base_model:quantized:fooorg/Foo-9B"]),
        (POPULAR, 9_000_000, ["gguf", "base_model:quantized:fooorg/Foo-9B"]),
        (OWN, 3_000, ["gguf", "base_model:fooorg/Foo-4B"]),
        (LONE, 9_000_000, ["gguf", "base_model:quantized:randomuser/Bar"]),
    ):
        hub.add_file(repo, f"{repo.split('/')[1].removesuffix('-GGUF')}-Q4_K_M.gguf", gguf)
        hub.set_meta(repo, downloads=downloads, tags=tags)
    with start_daemon(tmp_path) as d:
        yield d


def test_pull_gemma4_resolves_from_the_catalogue(search_daemon: Daemon) -> None:
    out = search_daemon.cli("pull", "gemma4")
    assert out.returncode == 0, out.stderr
    assert (
        f"gemma4:latest is hf.co/{GEMMA4[0]}:Q4_K_M (catalogue entry gemma4:e4b)"
        in out.stderr.splitlines()
    )
    assert "searching Hugging Face" not in out.stderr
    assert re.search(r"^gemma4:latest\s", search_daemon.cli("list").stdout, re.M)


def test_an_unknown_name_is_offered_from_a_search_and_pulled_only_when_confirmed(
    search_daemon: Daemon,
) -> None:
    d = search_daemon
    # No terminal, no --yes: the offer and the command that pulls it, nothing pulled.
    out = d.cli("pull", "foo", "--as", "short")
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0] == "foo is not in the catalogue; searching Hugging Face for it"
    assert lines[1].startswith(f"found hf.co/{GOOD} (unsloth; 5.0K downloads; Q4_K_M ")
    assert lines[2:] == [
        f"Error: not pulled without confirmation: run `localllm pull hf.co/{GOOD} --as short`,"
        " or add --yes to take what the search offers"
    ]
    assert POPULAR not in out.stderr  # more downloads, but not a known publisher
    assert "hf.co/" not in d.cli("list").stdout  # nothing pulled
    ran = d.cli("run", "foo", "hello")
    assert ran.returncode == 1
    assert f"run `localllm run hf.co/{GOOD}`" in ran.stderr
    # --yes takes the offer; --as names it.
    got = d.cli("pull", "foo", "--yes", "--as", "short")
    assert got.returncode == 0, got.stderr
    assert f"found hf.co/{GOOD} (unsloth;" in got.stderr
    assert got.stderr.splitlines()[-2:] == ["success", f"hf.co/{GOOD}:latest is also short:latest"]
    listed = d.cli("list").stdout
    assert re.search(rf"^hf\.co/{GOOD}:latest\s", listed, re.M), listed
    assert re.search(r"^short:latest\s", listed, re.M), listed
    answered = d.cli("run", "short", "hello")
    assert (answered.returncode, answered.stdout) == (0, expected_greedy("user:hello") + "\n")
    assert answered.stderr == ""
    # run with --yes: the offer is pulled (already here) and answers.
    again = d.cli("run", "foo", "--yes", "hello")
    assert again.returncode == 0, again.stderr
    assert again.stdout == expected_greedy("user:hello") + "\n"


def test_a_size_tag_or_the_models_own_organisation_and_never_an_unknown_publisher(
    search_daemon: Daemon,
) -> None:
    d = search_daemon
    own = d.cli("pull", "foo:4b")
    assert own.returncode == 1
    assert f"found hf.co/{OWN} (fooorg, the model's own organisation; 3.0K downloads" in (
        own.stderr
    )
    lone = d.cli("pull", "bar", "--yes")
    assert lone.returncode == 1 and "found" not in lone.stderr
    assert lone.stderr.splitlines()[-1].endswith(
        "Hugging Face has no GGUF of it from a known publisher (ggml-org, unsloth, bartowski, "
        "lmstudio-community or the model's own organisation)"
    )
    # A family the catalogue has, with a tag it lacks, is not searched for.
    tag = d.cli("pull", "gemma4:99b")
    assert tag.returncode == 1 and "searching" not in tag.stderr
    assert "hf.co/" not in d.cli("list").stdout


# -- choose: which repo is offered -------------------------------------------------------------
def result(repo: str, downloads: int, *, base: tuple[str, ...] = (), quants: Any = None) -> Any:
    return {
        "repo": repo,
        "downloads": downloads,
        "base_models": list(base),
        "quants": [{"tag": "Q4_K_M", "size": 1 << 30, "fit": {"summary": "CPU only"}}]
        if quants is None
        else quants,
    }


def test_choose_takes_the_most_downloaded_of_known_publishers() -> None:
    models = [
        result("someone/Foo-GGUF", 10**7),
        result("bartowski/Foo-GGUF", 200),
        result("lmstudio-community/Foo-GGUF", 300),
        result("ggml-org/Foo-GGUF", 10**6, quants=[]),  # no files listed: nothing to pull
    ]
    offer = choose(models, parse_name("foo"))
    assert offer is not None and offer.pull == "hf.co/lmstudio-community/Foo-GGUF"
    assert offer.quant is not None and offer.quant["tag"] == "Q4_K_M"
    assert choose(models[:1], parse_name("foo")) is None


def test_only_a_known_publisher_vouches_for_an_organisation() -> None:
    own = result("maker/Foo-GGUF", 10**6)
    claims = result("other/Foo-GGUF", 10**7, base=("other/Foo",))  # its own word only
    vouch = result("unsloth/Foo-GGUF", 10, base=("maker/Foo",))
    offer = choose([own, claims, vouch], parse_name("foo"))
    assert offer is not None and offer.repo == "maker/Foo-GGUF"
    assert offer.publisher == "maker, the model's own organisation"
    alone = choose([own, claims], parse_name("foo"))
    assert alone is None
    # The namespace typed is the model's organisation.
    typed = choose([own, claims], parse_name("maker/foo"))
    assert typed is not None and typed.repo == "maker/Foo-GGUF"


def test_a_tag_is_a_size_in_the_repo_name_or_a_quant() -> None:
    models = [
        result("unsloth/Foo-9B-GGUF", 500),
        result("unsloth/Foo-19B-GGUF", 900),
        result("bartowski/Foo-GGUF", 100, quants=[{"tag": "Q8_0", "size": 1}]),
    ]
    nine = choose(models, parse_name("foo:9b"))
    assert nine is not None and nine.pull == "hf.co/unsloth/Foo-9B-GGUF"
    q8 = choose(models, parse_name("foo:q8_0"))
    assert q8 is not None and q8.pull == "hf.co/bartowski/Foo-GGUF:Q8_0"
    assert choose(models, parse_name("foo:70b")) is None
    assert queries(parse_name("gemma4:e4b")) == ["gemma4", "gemma-4"]
    assert queries(parse_name("qwen3.5")) == ["qwen3.5", "qwen-3.5"]
    assert queries(parse_name("bge-m3")) == ["bge-m3"]


# -- confirm: asked on a terminal ----------------------------------------------------------
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Searches:
    """A client whose search finds ``models`` for ``query`` only."""

    def __init__(self, query: str, models: list[Any]) -> None:
        self.query, self.models = query, models
        self.asked: list[str] = []

    def search(self, query: str, limit: int) -> list[Any]:
        self.asked.append(query)
        return self.models if query == self.query else []


UNKNOWN = ModelNotFound("model 'gemma5' is not in the catalogue; closest: gemma4")


@pytest.mark.parametrize("answer, pulled", [("y\n", True), ("\n", False), ("", False)])
def test_on_a_terminal_the_offer_is_asked(
    monkeypatch: pytest.MonkeyPatch, answer: str, pulled: bool
) -> None:
    err = _Terminal()
    monkeypatch.setattr(sys, "stdin", _Terminal(answer))
    monkeypatch.setattr(sys, "stderr", err)
    client: Any = _Searches("gemma-5", [result("ggml-org/gemma-5-E4B-it-GGUF", 10)])
    if pulled:
        got = confirm(client, "gemma5", UNKNOWN, yes=False, command="pull")
        assert got == "hf.co/ggml-org/gemma-5-E4B-it-GGUF"
    else:
        with pytest.raises(InvalidRequest, match=r"^not pulled; later: localllm pull hf\.co/"):
            confirm(client, "gemma5", UNKNOWN, yes=False, command="pull", as_name="g5")
    assert client.asked == ["gemma5", "gemma-5"]  # as typed, then as repos spell it
    assert (
        err.getvalue()
        .splitlines()[-1]
        .startswith("Pull hf.co/ggml-org/gemma-5-E4B-it-GGUF? [y/N] ")
    )


def test_other_errors_are_not_searched_for() -> None:
    client: Any = _Searches("x", [])
    tag = ModelNotFound("gemma4 has no tag '99b' in the catalogue; tags: latest, e2b")
    for model, exc in (("gemma4:99b", tag), ("hf.co/u/r", UNKNOWN)):
        with pytest.raises(ModelNotFound) as raised:
            confirm(client, model, exc, yes=True, command="pull")
        assert raised.value is exc
    assert client.asked == []

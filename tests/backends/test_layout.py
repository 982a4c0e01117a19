"""backends/ and cli/backends/ import one way, and the leaves stay leaves.

Read from the source: imports inside functions and under ``TYPE_CHECKING``
count, since a circle closed there is still two modules that each need the
other (issue 39 found three here).
"""

from __future__ import annotations

from tests.test_architecture import circles, graph as package_graph

PACKAGES = ("localllm.backends", "localllm.cli.backends")
# What everything may ask without pulling anything of backends/ in.
LEAVES = {"localllm.backends.layout", "localllm.backends.isolated", "localllm.backends.trust"}


def graph() -> dict[str, set[str]]:
    """The two packages' modules and what each imports of them (tests/test_architecture.py
    reads every import, those inside functions and under TYPE_CHECKING included)."""
    ours = {m: d for m, d in package_graph().items() if m.startswith(PACKAGES)}
    # A package's __init__ importing its own modules is how a package is put together.
    return {m: {x for x in d if x in ours and not x.startswith(m + ".")} for m, d in ours.items()}


def test_no_import_circle() -> None:
    assert circles(graph()) == []


def test_the_leaves_import_nothing_of_backends() -> None:
    g = graph()
    assert all(g[leaf] == set() for leaf in LEAVES), {leaf: g[leaf] for leaf in LEAVES}


def test_the_graph_sees_the_imports_it_checks() -> None:
    g = graph()  # a reader that found nothing would pass the tests above
    assert "localllm.backends.cuda.unpack" in g["localllm.backends.cuda.wheels"]
    assert "localllm.backends.layout" in g["localllm.backends.pack"]
    assert "localllm.cli.backends.common" in g["localllm.cli.backends.packs"]

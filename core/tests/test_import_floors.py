"""The apps stand on floors (docs/layout.md; docs/architecture.md): nothing imports from a
floor above its own, and no two modules import each other, directly or through a chain,
function-local imports included. The rule and the walk are config/checks.py's (`make lint`
runs it too); these tests keep it in the suite and check that the walk sees what it should."""

from __future__ import annotations

from config import checks


def test_no_import_from_a_higher_floor():
    upward = checks.upward_imports(checks.import_graph())
    assert not upward, "imports from a higher floor:\n" + "\n".join(upward)


def test_no_import_loops():
    loops = checks.import_loops(checks.import_graph())
    assert not loops, "import loops:\n" + "\n".join(loops)


def test_the_walk_sees_the_apps():
    graph = checks.import_graph()
    assert "chat.driver" in graph and "chat.agent" in graph["chat.driver"]
    assert "core.tenancy" in graph["documents.models"]


def test_the_walk_follows_package_inits():
    """`from retrieval.search.maintenance import …` outside the package runs
    retrieval/search/__init__.py, which imports query and passages: an edge the walk keeps."""
    graph = checks.import_graph()
    assert "retrieval.search" in graph["retrieval.embedding_models"]
    assert "retrieval.search.query" in graph["retrieval.search"]
    # Inside the package, a sibling's import does not run the package's own __init__ again.
    assert "retrieval.search" not in graph["retrieval.search.passages"]


def test_an_upward_import_and_a_loop_are_found():
    """The checks fail on what they are for: a graph with core importing chat, and two
    modules of billing importing each other."""
    graph = {
        "core.tenancy": {"chat.models"},
        "chat.models": set(),
        "billing.a": {"billing.b"},
        "billing.b": {"billing.a"},
    }
    assert checks.upward_imports(graph) == ["core.tenancy -> chat.models"]
    assert checks.import_loops(graph) == ["billing.a -> billing.b -> billing.a"]

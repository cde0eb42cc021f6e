"""The apps stand on floors (docs/layout.md; docs/architecture.md): nothing imports from a
floor above its own, and no two modules import each other, directly or through a chain,
function-local imports included. Walks the source with ast, so it sees every import whether
or not it runs; importing `a.b.c` also runs the package `a.b`'s __init__, so that is an edge
too (unless `a.b` is the importing module's own package, already being imported)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Lowest first. Apps on one floor may import each other's modules (no loops still).
FLOORS = [("core", "llm", "audit"), ("accounts",), ("billing",), ("documents",), ("retrieval", "sources"), ("chat",),
          ("exports", "integrations"),
          ("config",)]
FLOOR_OF = {app: level for level, apps in enumerate(FLOORS) for app in apps}
# core is the ground floor and imports no app, llm included.
GROUND = {"core"}


def _modules() -> dict[str, Path]:
    found = {}
    for app in FLOOR_OF:
        for path in (ROOT / app).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "tests" in parts or "migrations" in parts:
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The project modules that `name` imports (resolving `from pkg import module`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            # The longest project module the name refers to (a module, or a name in one).
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
                targets.update(_packages_run(candidate, name, modules))
                break
    return targets


def _packages_run(target: str, importer: str, modules: dict[str, Path]) -> set[str]:
    """The packages whose __init__ importing `target` runs, less the importer's own."""
    own = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 2)}
    parts = target.split(".")
    parents = {".".join(parts[:i]) for i in range(1, len(parts))}
    return {p for p in parents - own if p in modules and modules[p].name == "__init__.py"}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def test_no_import_from_a_higher_floor():
    upward = []
    for module, targets in _graph().items():
        app = module.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if FLOOR_OF[other] > FLOOR_OF[app] or (app in GROUND and other != app):
                upward.append(f"{module} -> {target}")
    assert not upward, "imports from a higher floor:\n" + "\n".join(sorted(upward))


def test_no_import_loops():
    graph = _graph()
    loops, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                loops.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not loops, "import loops:\n" + "\n".join(loops)


def test_the_walk_sees_the_apps():
    graph = _graph()
    assert "chat.driver" in graph and "chat.agent" in graph["chat.driver"]
    assert "core.tenancy" in graph["documents.models"]


def test_the_walk_follows_package_inits():
    """`from retrieval.search.maintenance import …` outside the package runs
    retrieval/search/__init__.py, which imports query and passages: an edge the walk keeps."""
    graph = _graph()
    assert "retrieval.search" in graph["retrieval.embedding_models"]
    assert "retrieval.search.query" in graph["retrieval.search"]
    # Inside the package, a sibling's import does not run the package's own __init__ again.
    assert "retrieval.search" not in graph["retrieval.search.passages"]

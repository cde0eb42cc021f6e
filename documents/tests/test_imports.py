"""No module of documents/ imports another that imports it back, directly or through a
chain, counting imports inside functions too (they only hide a loop, they do not remove it)."""

import ast
from pathlib import Path

import documents

ROOT = Path(documents.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for path in ROOT.rglob("*.py")
        if not {"tests", "migrations"} & set(path.relative_to(ROOT).parts)
    }


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The documents modules `name` imports anywhere in its body (top level or in a function)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {target for target in targets if target in modules and target != name}
    return found


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    loops, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                loops.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, trail + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return loops


def test_documents_has_no_import_loop():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "documents.ingestion" in graph["documents.jobs"]  # the graph sees real imports
    assert _loops(graph) == []


def test_the_pipeline_does_not_import_its_jobs_back():
    modules = _modules()
    reaches, todo = set(), ["documents.ingestion"]
    while todo:
        name = todo.pop()
        for target in _imports(name, modules[name], modules) - reaches:
            reaches.add(target)
            todo.append(target)
    assert "documents.jobs" not in reaches
    assert "documents.services" not in reaches

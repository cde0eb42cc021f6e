"""Rules about the source itself, checked by reading it (no database, no Redis, no Django set-up):
`python -m config.checks` (run by `make lint`), and by core/tests/test_import_floors.py and
core/tests/test_error_codes.py in the suite. Each rule is written once, here.

- The apps stand on floors (README, "Layout"; docs/architecture.md): nothing imports from a
  floor above its own, and no two modules import each other, directly or through a chain,
  function-local imports included. Walks the source with ast, so it sees every import whether
  or not it runs; importing `a.b.c` also runs the package `a.b`'s __init__, so that is an edge
  too (unless `a.b` is the importing module's own package, already being imported).
- Error codes are named once (docs/architecture.md, "Where to add … an error"): every code a
  GroundworkError is raised with comes from an app's `error_codes.py` enum (core's when several
  apps raise it), never a string typed at the raise site, and no code is in two enums.

It stands on the top floor because it reads every app."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from enum import StrEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --- floors ---------------------------------------------------------------------------------------

# Lowest first. Apps on one floor may import each other's modules (no loops still).
FLOORS = [
    ("core", "llm", "audit"),
    ("accounts",),
    ("billing",),
    ("documents",),
    ("retrieval", "sources"),
    ("chat",),
    ("exports", "integrations"),
    ("config",),
]
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


def import_graph() -> dict[str, set[str]]:
    """Each project module (tests and migrations aside) and the project modules it imports."""
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """ "module -> target" for each import from a higher floor (or of any app from the ground)."""
    upward = []
    for module, targets in graph.items():
        app = module.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if FLOOR_OF[other] > FLOOR_OF[app] or (app in GROUND and other != app):
                upward.append(f"{module} -> {target}")
    return sorted(upward)


def import_loops(graph: dict[str, set[str]]) -> list[str]:
    """Each loop found, as "a -> b -> a"."""
    loops: list[str] = []
    state: dict[str, str] = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                loops.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    return loops


# --- error codes ----------------------------------------------------------------------------------

APPS = [
    "core",
    "llm",
    "audit",
    "accounts",
    "billing",
    "documents",
    "retrieval",
    "sources",
    "chat",
    "exports",
    "integrations",
    "config",
]
# Names of exception classes whose first argument is a code.
ERROR_SUFFIXES = ("Error", "Rejected", "Exceeded", "Conflict", "Forbidden", "NotFound")
NOT_OURS = {
    "ValidationError",
    "ApiError",
    "ImproperlyConfigured",
    "CommandError",
    "ValueError",
    "TypeError",
    "RuntimeError",
    "KeyError",
    "LookupError",
    "OSError",
    "PermissionError",
    "LocalModelError",
}
# A code's shape: a snake_case word ("parse_failed"); a first argument with spaces or capitals is
# a message (Forbidden("Only owners …"), DRF's exceptions).
CODE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# The fake and local OpenAI-compatible servers speak OpenAI's own wire codes.
SKIP = {"llm/fake_server.py", "llm/openai_http.py"}


def _sources():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "tests" in rel.parts or "migrations" in rel.parts or str(rel) in SKIP:
                continue
            yield rel, ast.parse(path.read_text())


def _called_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def typed_string_codes(sources=None) -> list[str]:
    """ "path:line Name('code', …)" for each error raised with a code typed as a string, in
    `sources` ((path, ast tree) pairs; the apps' modules when not given)."""
    typed = []
    for rel, tree in _sources() if sources is None else sources:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = _called_name(node)
            ours = name == "__init__" or (name.endswith(ERROR_SUFFIXES) and name not in NOT_OURS)
            first = node.args[0]
            if ours and isinstance(first, ast.Constant) and isinstance(first.value, str) and CODE.match(first.value):
                typed.append(f"{rel}:{node.lineno} {name}({first.value!r}, …)")
    return typed


def code_owners() -> dict[str, list[str]]:
    """Each code in an app's error_codes.py and the enums ("app.Enum") that name it. Those
    modules hold enums only, so importing them needs no Django set-up."""
    owners: dict[str, list[str]] = {}
    for app in APPS:
        if not (ROOT / app / "error_codes.py").exists():
            continue
        module = importlib.import_module(f"{app}.error_codes")
        for enum in vars(module).values():
            if isinstance(enum, type) and issubclass(enum, StrEnum) and enum is not StrEnum:
                for member in enum:
                    owners.setdefault(member.value, []).append(f"{app}.{enum.__name__}")
    return owners


def codes_in_two_enums(owners: dict[str, list[str]]) -> dict[str, list[str]]:
    return {code: where for code, where in owners.items() if len(where) > 1}


# --- the command ----------------------------------------------------------------------------------


def failures() -> list[str]:
    """Every broken rule, one line each; empty when the source keeps them all."""
    graph = import_graph()
    owners = code_owners()
    found = [f"import from a higher floor: {edge}" for edge in upward_imports(graph)]
    found += [f"import loop: {loop}" for loop in import_loops(graph)]
    found += [f"error code typed as a string: {site}" for site in typed_string_codes()]
    found += [
        f"error code in two enums: {code} in {', '.join(where)}" for code, where in codes_in_two_enums(owners).items()
    ]
    if not owners:
        found.append("no error code found in any app's error_codes.py")
    return found


def main() -> int:
    found = failures()
    for line in found:
        print(line, file=sys.stderr)
    print(f"config.checks: {len(found)} problem(s)" if found else "config.checks: import floors and error codes kept")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())

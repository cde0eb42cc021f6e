"""Error codes are named once (docs/architecture.md, "Where to add … an error"): every code a
GroundworkError is raised with comes from an app's `error_codes.py` enum (core's when several
apps raise it), never a string typed at the raise site, and no code is in two enums."""
from __future__ import annotations

import ast
import importlib
import re
from enum import StrEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ["core", "llm", "audit", "accounts", "billing", "documents", "retrieval", "chat", "exports", "config"]
# Names of exception classes whose first argument is a code.
ERROR_SUFFIXES = ("Error", "Rejected", "Exceeded", "Conflict", "Forbidden", "NotFound")
NOT_OURS = {"ValidationError", "ApiError", "ImproperlyConfigured", "CommandError", "ValueError", "TypeError",
            "RuntimeError", "KeyError", "LookupError", "OSError", "PermissionError", "LocalModelError"}
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


def test_no_error_is_raised_with_a_typed_string_code():
    typed = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = _called_name(node)
            ours = name == "__init__" or (name.endswith(ERROR_SUFFIXES) and name not in NOT_OURS)
            first = node.args[0]
            if ours and isinstance(first, ast.Constant) and isinstance(first.value, str) and CODE.match(first.value):
                typed.append(f"{rel}:{node.lineno} {name}({first.value!r}, …)")
    assert typed == []


def test_each_code_is_in_one_enum():
    owners: dict[str, list[str]] = {}
    for app in APPS:
        if not (ROOT / app / "error_codes.py").exists():
            continue
        module = importlib.import_module(f"{app}.error_codes")
        for enum in vars(module).values():
            if isinstance(enum, type) and issubclass(enum, StrEnum) and enum is not StrEnum:
                for member in enum:
                    owners.setdefault(member.value, []).append(f"{app}.{enum.__name__}")
    assert owners and {code: where for code, where in owners.items() if len(where) > 1} == {}

"""Error codes are named once (docs/architecture.md, "Where to add … an error"): every code a
GroundworkError is raised with comes from an app's `error_codes.py` enum (core's when several
apps raise it), never a string typed at the raise site, and no code is in two enums. The rule
is config/checks.py's (`make lint` runs it too); these tests keep it in the suite."""

from __future__ import annotations

import ast
import subprocess
import sys

from config import checks


def test_no_error_is_raised_with_a_typed_string_code():
    assert checks.typed_string_codes() == []


def test_each_code_is_in_one_enum():
    owners = checks.code_owners()
    assert owners and checks.codes_in_two_enums(owners) == {}


def test_a_typed_code_is_found_and_a_message_is_not():
    tree = ast.parse(
        'raise IngestionError("parse_failed", "The file could not be read.")\n'
        'raise Forbidden("Only owners can do that.")\n'
        'raise IngestionError(DocumentErrorCode.PARSE_FAILED, "The file could not be read.")\n'
    )
    assert checks.typed_string_codes([("documents/x.py", tree)]) == [
        "documents/x.py:1 IngestionError('parse_failed', …)"
    ]


def test_a_code_in_two_enums_is_found():
    owners = {"not_found": ["core.CoreErrorCode", "chat.ChatErrorCode"], "parse_failed": ["documents.X"]}
    assert checks.codes_in_two_enums(owners) == {"not_found": ["core.CoreErrorCode", "chat.ChatErrorCode"]}


def test_the_command_passes_on_this_tree_without_django():
    """`python -m config.checks` as `make lint` runs it: no settings module, no database."""
    result = subprocess.run(
        [sys.executable, "-m", "config.checks"],
        cwd=checks.ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "import floors and error codes kept" in result.stdout

"""Everything the project has runs and ships: every folder with tests is in pytest's
testpaths (exports' 22 tests once ran nowhere), and every app of ours is a package that
`pip install` installs (core, audit and exports were once missing from packages.find)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _folders_with_tests() -> set[str]:
    found = set()
    for path in ROOT.glob("*/**/test_*.py"):
        top = path.relative_to(ROOT).parts[0]
        if not top.startswith(".") and top != "bench":
            found.add(top)
    return found


def _our_apps() -> set[str]:
    return {app.split(".")[0] for app in settings.INSTALLED_APPS if (ROOT / app.split(".")[0]).is_dir()}


def test_every_folder_with_tests_is_collected():
    testpaths = set(PYPROJECT["tool"]["pytest"]["ini_options"]["testpaths"])
    assert _folders_with_tests() - testpaths == set()
    assert {"exports", "retrieval", "core", "audit"} <= testpaths


def test_every_app_is_installed_as_a_package():
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    missing = {app for app in _our_apps() if not any(fnmatch.fnmatch(app, pattern) for pattern in include)}
    assert missing == set()
    # A regular package: an app without __init__.py installs as a namespace package, which
    # Django refuses once the editable install gives it a second location.
    assert {app for app in _our_apps() if not (ROOT / app / "__init__.py").is_file()} == set()


def test_this_run_collected_every_apps_tests(request):
    """Run as `make test` runs it (no paths given: pytest's testpaths), the session holds tests
    from every folder that has some. Run with paths, there is nothing to check."""
    if any(not str(arg).startswith("-") for arg in request.config.invocation_params.args):
        return
    collected = {Path(str(item.path)).relative_to(ROOT).parts[0] for item in request.session.items}
    assert _folders_with_tests() - collected == set()

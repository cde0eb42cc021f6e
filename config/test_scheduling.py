"""How `make test` shares the suite among its xdist workers (docs/testing.md, "Parallel").

A unit of work is a test module, so a module's own fixtures (a daphne, a model server, a
data folder) start once; the browser tests are one unit, so one worker starts their shared
stack once (e2e/conftest.py `shared_stack`). A free worker takes the costliest unit left:
the long system and browser modules start first and the run does not end waiting on one of
them. A module's cost is its time in the last measured run (config/test_durations.json,
written by `python -m config.test_scheduling JUNIT_XML`); a module not in it counts
UNKNOWN_SECONDS a test.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

DURATIONS = Path(__file__).with_name("test_durations.json")
UNKNOWN_SECONDS = 0.5
BROWSER_TESTS = "e2e/"  # one unit: they share one stack


def unit_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return BROWSER_TESTS if path.startswith(BROWSER_TESTS) else path


def unit_cost(nodeids: Iterable[str], durations: dict[str, float]) -> float:
    """Seconds a unit of these tests is expected to take: its modules' measured times."""
    modules: dict[str, int] = defaultdict(int)
    for nodeid in nodeids:
        modules[nodeid.split("::", 1)[0]] += 1
    return sum(durations.get(module, UNKNOWN_SECONDS * count) for module, count in modules.items())


def module_durations() -> dict[str, float]:
    try:
        durations: dict[str, float] = json.loads(DURATIONS.read_text())
        return durations
    except (OSError, ValueError):
        return {}


class CostScheduling(LoadScopeScheduling):
    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.durations = module_durations()

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        """As xdist's, but the costliest unit left rather than the first."""
        unit = max(self.workqueue, key=lambda name: unit_cost(self.workqueue[name], self.durations))
        self.workqueue.move_to_end(unit, last=False)
        super()._assign_work_unit(node)


def durations_from_junit(path: Path) -> dict[str, float]:
    """Seconds per test module (setup, call and teardown) from pytest's --junitxml report."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname is the dotted module (plus a class); the module is the part that is a file.
        for end in range(len(module), 0, -1):
            candidate = "/".join(module[:end]) + ".py"
            if Path(candidate).exists():
                seconds[candidate] += float(case.get("time") or 0)
                break
    return {module: round(total, 1) for module, total in sorted(seconds.items())}


if __name__ == "__main__":
    DURATIONS.write_text(json.dumps(durations_from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {DURATIONS}")

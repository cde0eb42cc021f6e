"""The suite on several xdist workers (docs/testing.md, "Parallel"): each worker keeps to its
own Redis database, prefixes, media folder and test database, and the scheduler hands out
the costliest modules first, the browser tests as one unit."""

from __future__ import annotations

import os

from django.conf import settings
from django.db import connection

from config.pytest_embedded import redis_database, worker_number
from config.test_scheduling import BROWSER_TESTS, durations_from_junit, unit_cost, unit_of


def test_redis_database_for_both_spellings_of_the_url():
    assert redis_database("redis://127.0.0.1:6379/0", 15) == "redis://127.0.0.1:6379/15"
    assert redis_database("redis://127.0.0.1:6379", 15) == "redis://127.0.0.1:6379/15"
    assert redis_database("redis://127.0.0.1:6379/15", -2, relative=True) == "redis://127.0.0.1:6379/13"
    assert redis_database("redis://127.0.0.1:6379/1", -2, relative=True) == "redis://127.0.0.1:6379/15"
    assert redis_database("unix:///tmp/r.sock?db=0", 15) == "unix:///tmp/r.sock?db=15"
    assert redis_database("unix:///tmp/r.sock?db=15&x=1", -3, relative=True) == "unix:///tmp/r.sock?db=12&x=1"
    assert redis_database("unix:///tmp/r.sock", 15) == "unix:///tmp/r.sock?db=15"


def test_worker_numbers():
    assert [worker_number(name) for name in ("gw0", "gw1", "gw12", None, "master")] == [0, 1, 12, 0, 0]


def test_this_worker_keeps_to_its_own_redis_database_prefixes_media_and_test_database(db):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    database = 15 - worker_number(worker)
    url = settings.REDIS_URL
    assert url.endswith(f"/{database}") or f"db={database}" in url, url
    for location in (
        settings.RQ_QUEUES["default"]["URL"],
        settings.CACHES["default"]["LOCATION"],
        settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"],
    ):
        assert location == url
    suffix = f"-{worker}" if worker else ""
    assert settings.CACHES["default"]["KEY_PREFIX"] == "groundwork-test" + suffix
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] == "groundwork-test" + suffix
    assert str(settings.MEDIA_ROOT).endswith(os.path.join("test-media", worker) if worker else "test-media")
    if worker:
        assert connection.settings_dict["NAME"].endswith(f"_{worker}")


def test_browser_tests_are_one_unit_and_other_tests_go_by_module():
    assert unit_of("e2e/test_browser.py::test_login") == unit_of("e2e/test_sso.py::test_x[1]") == BROWSER_TESTS
    assert unit_of("core/tests/test_rows.py::test_insert") == "core/tests/test_rows.py"
    assert unit_of("core/tests/test_rows.py::TestA::test_b[x::y]") == "core/tests/test_rows.py"


def test_a_units_cost_is_its_modules_measured_time():
    durations = {"config/tests/test_faults.py": 300.0, "e2e/test_browser.py": 100.0, "e2e/test_sso.py": 60.0}
    assert unit_cost(["e2e/test_browser.py::a", "e2e/test_browser.py::b", "e2e/test_sso.py::c"], durations) == 160.0
    assert unit_cost(["config/tests/test_faults.py::a"], durations) == 300.0
    # A module not measured yet counts half a second a test.
    assert unit_cost([f"core/tests/test_rows.py::t{i}" for i in range(10)], durations) == 5.0


def test_durations_are_read_per_module_from_a_junit_report(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="core.tests.test_rows" name="test_a" time="1.25"/>'
        '<testcase classname="core.tests.test_rows" name="test_b" time="0.75"/>'
        '<testcase classname="e2e.test_sso" name="test_c" time="12.0"/>'
        '<testcase classname="accounts.tests.test_role_matrix.TestMatrix" name="test_d" time="3"/>'
        "</testsuite></testsuites>"
    )
    assert durations_from_junit(report) == {
        "accounts/tests/test_role_matrix.py": 3.0,
        "core/tests/test_rows.py": 2.0,
        "e2e/test_sso.py": 12.0,
    }

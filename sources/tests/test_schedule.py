"""Scheduled re-syncs through the existing cron (config/cron.py): due sources start once,
even when two cron processes run the job at the same minute; a sync whose worker died is
failed so its source can sync again."""

import datetime as dt

from django.utils import timezone

from config.cron import PERIODIC_JOBS
from core.tenancy import account_context
from sources.models import Source, SourceSync
from sources.schedule import sync_due_sources


def _create(api, commit_and_run, url, schedule):
    response = commit_and_run(lambda: api.post("/api/v1/sources/", {"kind": "web", "url": url, "schedule": schedule}))
    return response.json()["id"]


def _make_due(account, source_id, ago=dt.timedelta(minutes=1)):
    with account_context(account):
        Source.objects.for_account(account).filter(pk=source_id).update(next_sync_at=timezone.now() - ago)


def test_the_cron_job_is_registered_every_minute():
    assert (sync_due_sources, 60, "sync-due-sources") in PERIODIC_JOBS


def test_an_hourly_source_is_due_an_hour_after_its_sync(api_a, handbook, commit_and_run, account_a):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"), "hourly")
    with account_context(account_a):
        source = Source.objects.for_account(account_a).get(pk=source_id)
    delta = source.next_sync_at - source.last_synced_at
    assert dt.timedelta(minutes=59) < delta <= dt.timedelta(hours=1, seconds=1)
    assert sync_due_sources() == 0  # not due yet


def test_a_due_source_syncs_once_even_if_cron_runs_twice(
    api_a, handbook, commit_and_run, account_a, django_capture_on_commit_callbacks, run_jobs
):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"), "daily")
    _make_due(account_a, source_id)
    with django_capture_on_commit_callbacks(execute=True):
        assert sync_due_sources() == 1
        assert sync_due_sources() == 0  # a second cron process a moment later: nothing more
    run_jobs()
    with account_context(account_a):
        syncs = list(SourceSync.objects.for_account(account_a).filter(source_id=source_id).order_by("pk"))
        source = Source.objects.for_account(account_a).get(pk=source_id)
    assert [s.trigger for s in syncs] == ["create", "schedule"]
    assert syncs[-1].status == "succeeded" and syncs[-1].unchanged == 4
    assert source.next_sync_at > timezone.now() + dt.timedelta(hours=23)


def test_sources_without_a_schedule_or_deleted_are_not_synced(api_a, handbook, commit_and_run, account_a):
    manual = _create(api_a, commit_and_run, handbook.url("/docs/"), None)
    deleted = _create(api_a, commit_and_run, handbook.url("/docs/leave"), "hourly")
    _make_due(account_a, manual)
    _make_due(account_a, deleted)
    commit_and_run(lambda: api_a.delete(f"/api/v1/sources/{deleted}/"))
    assert sync_due_sources() == 0


def test_a_sync_whose_worker_died_is_failed_and_the_source_can_sync_again(
    api_a, handbook, account_a, commit_and_run, settings, django_capture_on_commit_callbacks
):
    source_id = _create(api_a, commit_and_run, handbook.url("/docs/"), None)
    with django_capture_on_commit_callbacks(execute=False):  # queued, never run: the worker "died"
        api_a.post(f"/api/v1/sources/{source_id}/sync/")
    old = timezone.now() - dt.timedelta(seconds=settings.SOURCES_SYNC_STALE_SECONDS + 60)
    with account_context(account_a):
        SourceSync.objects.for_account(account_a).filter(status="running").update(started_at=old, heartbeat_at=old)
    assert sync_due_sources() == 1
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["status"] == "failed" and "stopped unexpectedly" in source["error"]
    commit_and_run(lambda: api_a.post(f"/api/v1/sources/{source_id}/sync/"))
    assert api_a.get(f"/api/v1/sources/{source_id}/").json()["status"] == "idle"

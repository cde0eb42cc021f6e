"""Syncs are claimed fairly across accounts, by the rule ingestion claims documents by
(core/fair_queue.py): one account's backlog of syncs never holds another account's sync
behind all of it, an account with a sync in flight waits behind one without, and a sync job
runs with its own rq timeout (SOURCES_SYNC_JOB_TIMEOUT_SECONDS)."""

import datetime as dt

from django.utils import timezone

from core.tenancy import account_context
from sources.models import SourceSync
from sources.tests.site import page


def _queue_sources(api, site, paths, capture) -> list[int]:
    """Add a source per path; their first syncs queued, none run yet."""
    ids = []
    with capture(execute=True):
        for path in paths:
            site.set(path, page(f"Page {path}", f"The text of {path}."))
            response = api.post("/api/v1/sources/", {"kind": "web", "url": site.url(path)})
            assert response.status_code == 201, response.content
            ids.append(response.json()["id"])
    return ids


def test_a_second_accounts_sync_is_not_behind_all_of_the_firsts(
    api_a, api_b, site, run_jobs, django_capture_on_commit_callbacks
):
    _queue_sources(api_a, site, ["/a1/", "/a2/", "/a3/"], django_capture_on_commit_callbacks)
    _queue_sources(api_b, site, ["/b1/"], django_capture_on_commit_callbacks)
    run_jobs()
    order = [path for _, path, status in site.log if status == 200 and path != "/robots.txt"]
    assert sorted(order) == ["/a1/", "/a2/", "/a3/", "/b1/"]
    # B's one sync runs second (once A's first has been served), not after all of A's.
    assert order == ["/a1/", "/b1/", "/a2/", "/a3/"]
    for source in api_b.get("/api/v1/sources/").json()["results"]:
        assert source["status"] == "idle" and source["document_count"] == 1


def test_an_account_with_a_sync_in_flight_waits_behind_one_without(
    api_a, api_b, site, account_a, account_b, django_capture_on_commit_callbacks
):
    """Two workers free at once: the first takes A's oldest sync, the second takes B's (A has
    one in flight already), though A's second sync has waited longer."""
    from sources.sync_queue import claim_next

    a_ids = _queue_sources(api_a, site, ["/a1/", "/a2/"], django_capture_on_commit_callbacks)
    b_ids = _queue_sources(api_b, site, ["/b1/"], django_capture_on_commit_callbacks)
    first, second, third = claim_next(), claim_next(), claim_next()
    assert (first.account_id, first.source_id) == (account_a.pk, a_ids[0])
    assert (second.account_id, second.source_id) == (account_b.pk, b_ids[0])
    assert (third.account_id, third.source_id) == (account_a.pk, a_ids[1])
    assert claim_next() is None


def test_a_sync_job_runs_with_its_own_timeout(api_a, site, queue, settings, django_capture_on_commit_callbacks):
    settings.SOURCES_SYNC_JOB_TIMEOUT_SECONDS = 321
    _queue_sources(api_a, site, ["/docs/"], django_capture_on_commit_callbacks)
    jobs = [queue.fetch_job(job_id) for job_id in queue.get_job_ids()]
    assert [job.timeout for job in jobs if job.func_name.startswith("sources.")] == [321]


def test_a_queued_sync_behind_a_backlog_is_not_failed_and_a_lost_one_is_queued_again(
    api_a, site, account_a, queue, run_jobs, settings, django_capture_on_commit_callbacks
):
    from sources.schedule import sync_due_sources

    site.set("/docs/", page("Docs", "The docs."))
    with django_capture_on_commit_callbacks(execute=False):  # the job never reached the queue
        source_id = api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/docs/")}).json()["id"]
    old = timezone.now() - dt.timedelta(seconds=settings.SOURCES_SYNC_STALE_SECONDS + 60)
    with account_context(account_a):
        SourceSync.objects.for_account(account_a).filter(status="running").update(started_at=old)
    assert queue.count == 0
    with django_capture_on_commit_callbacks(execute=True):
        sync_due_sources()
    assert queue.count == 1  # queued again, not failed as if its worker had died
    assert api_a.get(f"/api/v1/sources/{source_id}/").json()["status"] == "syncing"
    with django_capture_on_commit_callbacks(execute=True):
        sync_due_sources()
    assert queue.count == 1  # it has its job now: nothing more
    run_jobs()
    source = api_a.get(f"/api/v1/sources/{source_id}/").json()
    assert source["status"] == "idle" and source["document_count"] == 1

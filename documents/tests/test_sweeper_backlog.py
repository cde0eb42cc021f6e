"""The sweeper and a fair backlog: documents that wait longer than DOCUMENT_STALE_SECONDS
because another account's flood is ahead of them are not "stale work". While the queue
holds a job for each, the sweeper queues nothing and logs nothing; when jobs are missing
(Redis lost its queue), it queues exactly the difference."""

import datetime as dt
import logging

from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from core.tenancy import account_context
from documents.jobs import INGESTION_JOBS, requeue_stale_work
from documents.models import Document
from documents.services import document_upload


def _waiting_documents(account, n, django_capture_on_commit_callbacks):
    with account_context(account), django_capture_on_commit_callbacks(execute=True):
        for i in range(n):
            document_upload(
                account=account,
                actor=None,
                upload=SimpleUploadedFile(f"note-{i}.txt", f"note number {i}".encode(), "text/plain"),
            )
        long_ago = timezone.now() - dt.timedelta(hours=1)
        Document.objects.for_account(account).update(created_at=long_ago)


def _queued_ingestion_jobs(queue) -> int:
    return sum(1 for job in queue.get_jobs() if job.func_name in INGESTION_JOBS)


def test_a_backlog_with_its_jobs_queued_is_left_alone(account_a, queue, django_capture_on_commit_callbacks, caplog):
    _waiting_documents(account_a, 5, django_capture_on_commit_callbacks)
    assert _queued_ingestion_jobs(queue) == 5
    with (
        caplog.at_level(logging.WARNING, logger="groundwork.documents"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert requeue_stale_work() == 0
        assert requeue_stale_work() == 0
    assert _queued_ingestion_jobs(queue) == 5
    assert not [r for r in caplog.records if r.name == "groundwork.documents"]


def test_lost_jobs_are_queued_again_once(account_a, queue, django_capture_on_commit_callbacks, caplog):
    _waiting_documents(account_a, 5, django_capture_on_commit_callbacks)
    queue.empty()  # Redis lost the queue
    with caplog.at_level(logging.WARNING, logger="groundwork.documents"):
        with django_capture_on_commit_callbacks(execute=True):  # the sweeper runs outside a transaction
            assert requeue_stale_work() == 5
    assert _queued_ingestion_jobs(queue) == 5
    with django_capture_on_commit_callbacks(execute=True):
        assert requeue_stale_work() == 0  # and not again while they wait
    assert _queued_ingestion_jobs(queue) == 5
    assert [r.getMessage() for r in caplog.records if r.name == "groundwork.documents"] == [
        "5 pending documents had no job to take them; queued 5"
    ]


def test_other_jobs_in_the_queue_are_not_counted_as_ingestion_jobs(
    account_a, queue, django_capture_on_commit_callbacks
):
    """The sweeper counts ingestion jobs by their id's prefix (without loading each job): the
    jobs of other kinds queued beside them do not hide lost ones."""
    from documents.jobs import INGESTION_JOB_PREFIX, purge_account

    _waiting_documents(account_a, 3, django_capture_on_commit_callbacks)
    assert all(job_id.startswith(INGESTION_JOB_PREFIX) for job_id in queue.get_job_ids())
    queue.empty()
    for _ in range(5):
        queue.enqueue(purge_account, kwargs={"account_id": account_a.pk})
    with django_capture_on_commit_callbacks(execute=True):
        assert requeue_stale_work() == 3
    assert _queued_ingestion_jobs(queue) == 3

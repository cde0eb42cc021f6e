"""The sweeper's top-up with a large backlog: while documents wait past DOCUMENT_STALE_SECONDS
(behind other accounts' backlogs, as fair ingestion makes them), the sweeper checks once a
minute that the queue holds a job for each (documents.jobs._top_up_ingestion_jobs).

SWEEPER_TOPUP_JOBS (10,000) "ingest the next document" jobs are queued in a queue of the
bench's own on the Redis of REDIS_URL (deleted afterwards; the install's queue is not
touched), then the check runs five times: as it is (ingestion jobs counted by their ids'
prefix) and as it was before (every job loaded to read its function's name).
"""

from __future__ import annotations

import os
import statistics
import time


def run() -> dict:
    import django_rq
    from rq import Queue
    from rq.job import Job

    from documents.jobs import INGESTION_JOB_PREFIX, INGESTION_JOBS, _top_up_ingestion_jobs

    count = int(os.environ.get("SWEEPER_TOPUP_JOBS", "10000"))
    queue = Queue(f"bench-sweeper-topup-{os.getpid()}", connection=django_rq.get_connection("default"))
    try:
        with queue.connection.pipeline() as pipe:
            for i in range(count):
                queue.enqueue(
                    "documents.jobs.ingest_next_document", pipeline=pipe, job_id=f"{INGESTION_JOB_PREFIX}bench-{i:08d}"
                )
            pipe.execute()

        def before() -> int:  # the check before the id prefix: every job loaded
            job_ids = queue.get_job_ids() + queue.scheduled_job_registry.get_job_ids()
            return sum(
                1
                for job in Job.fetch_many(job_ids, connection=queue.connection)
                if job is not None and job.func_name in INGESTION_JOBS
            )

        timings: dict[str, list[float]] = {"before_ms": [], "after_ms": []}
        for _ in range(5):
            started = time.perf_counter()
            assert before() == count
            timings["before_ms"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            assert _top_up_ingestion_jobs(count, queue=queue) == 0
            timings["after_ms"].append((time.perf_counter() - started) * 1000)
    finally:
        queue.empty()
        queue.delete(delete_jobs=True)
    return {
        "jobs_queued": count,
        **{name: round(statistics.median(values), 1) for name, values in timings.items()},
        "load_average": os.getloadavg()[0],
        "settings": f"{count} ingestion jobs in a queue of the bench's own; median of 5 checks each",
    }

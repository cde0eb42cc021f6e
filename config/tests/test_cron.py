"""config/cron.py: each periodic job runs at most once per its interval, however many cron
processes enqueue it (the lease in Redis); config/tests/test_two_nodes.py proves it with two
real cron processes."""

import django_rq
import pytest

from config import cron


@pytest.fixture
def lease_free():
    redis = django_rq.get_connection("default")
    redis.delete(cron.lease_key("release-stale-holds"))
    yield redis
    redis.delete(cron.lease_key("release-stale-holds"))


@pytest.mark.django_db
def test_a_second_run_within_the_interval_does_nothing_and_the_lease_expires_before_the_next(lease_free):
    first = cron.run_periodic("release-stale-holds")
    second = cron.run_periodic("release-stale-holds")
    assert first["ran"] is True and first["result"] == 0
    assert second["ran"] is False and second["result"] is None
    ttl_ms = lease_free.pttl(cron.lease_key("release-stale-holds"))
    assert 50_000 < ttl_ms <= 54_000  # 0.9 x the 60 s interval: free when the next enqueue comes
    lease_free.delete(cron.lease_key("release-stale-holds"))
    assert cron.run_periodic("release-stale-holds")["ran"] is True


def test_every_job_is_enqueued_through_the_lease_under_its_own_name():
    from rq.cron import CronScheduler

    scheduler = CronScheduler(connection=django_rq.get_connection("default"))
    scheduler.load_config_from_file("config.cron")
    jobs = {job.name: job for job in scheduler.get_jobs()}
    assert set(jobs) == {name for _, _, name in cron.PERIODIC_JOBS}
    for _, interval, name in cron.PERIODIC_JOBS:
        assert jobs[name].func is cron.run_periodic and jobs[name].args == (name,)
        assert jobs[name].interval == interval


def test_the_runs_routine_lines_stay_quiet_and_other_jobs_lines_pass():
    import logging

    from config.logs import QuietPeriodicJobs

    quiet = QuietPeriodicJobs()

    def passes(logger: str, message: str, level=logging.INFO) -> bool:
        return quiet.filter(logging.LogRecord(logger, level, __file__, 1, message, None, None))

    job_id = "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert not passes("rq.cron", "Enqueued job run_periodic to queue default")
    assert not passes("rq.worker", f"default: config.cron.run_periodic('release-stale-holds') ({job_id})")
    assert not passes("rq.worker", f"Successfully completed job {job_id}")
    assert passes("rq.worker", "default: documents.jobs.ingest_next_document() (ingest-next-1)")
    assert passes("rq.worker", f"config.cron.run_periodic('release-stale-holds') ({job_id}) failed", logging.ERROR)

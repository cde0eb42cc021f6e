"""The rq worker class of `manage.py rqworker` (settings.RQ["WORKER_CLASS"])."""

from __future__ import annotations

from rq import Worker as RqWorker


class Worker(RqWorker):
    """rq's worker, which registers itself again when Redis has lost its registration (a Redis
    that crashed and restarted from an older snapshot, or empty). rq reconnects and goes on
    taking jobs by itself, but without its record `/healthz` and `make run` would count no
    worker (docs/operations/reliability.md)."""

    def heartbeat(self, timeout: int | None = None, pipeline=None):
        # With a pipeline: the work horse's job monitoring, inside a job; the record is
        # checked in the worker's own loop, which heartbeats before every dequeue.
        if pipeline is None and not self.connection.sismember(self.redis_workers_keys, self.key):
            self.log.warning("Worker %s: Redis has lost this worker's record; registering again", self.name)
            self.connection.delete(self.key)  # what a heartbeat may have half-written
            self.register_birth()
        super().heartbeat(timeout, pipeline)

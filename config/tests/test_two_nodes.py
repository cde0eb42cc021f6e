"""Two nodes for real: two sets of the processes `make run` starts on a machine
(a daphne web process on a port of its own, an rq worker with the scheduler, the cron
process), sharing one PostgreSQL, one Redis and one S3 bucket (moto's S3 server on
loopback), each with a local media folder of its own, so that nothing is shared on disk.

- an upload on node 1 is ingested by node 2's worker (node 1's worker is stopped first), the
  file going through the bucket: both media folders stay empty;
- an API key revoked on node 1 (its team page) closes the key's websocket open on node 2;
- the periodic jobs, enqueued by both cron processes, run once (config/cron.py's lease).

Then the same as two `make run` supervisors (config/run.py) on two ports: one installation,
and Ctrl-C on each stops what it started. Every process a test starts is stopped at the
end, also on failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from django.conf import settings
from django.db import connection

from accounts.models import ApiKey
from accounts.tests.factories import make_api_key
from config.cron import PERIODIC_JOBS, lease_key
from config.embedded import BASE_DIR
from config.run import PYTHON, listening_socket, spawn_web, worker_argv
from config.testing import already_running, free_port, s3_keys, s3_server
from config.tests.test_many_processes import Cluster, _get_json, _stop, _upload, _wait_healthy, _wait_ready
from core.tenancy import account_context

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NOTE = "# Parking\n\nVisitors park on level minus two; the barrier opens with the code from reception."


@pytest.fixture
def model():
    from llm.fake_server import FakeOpenAIServer

    with FakeOpenAIServer(answer="Visitors park on level minus two [Document 1].") as server:
        yield server


@pytest.fixture
def bucket():
    with s3_server(bucket="groundwork-two-nodes") as env:
        yield env


def _clean_cron_state(redis) -> None:
    """Leases and job histories are Redis keys: a run of this test minutes ago left some."""
    from rq.cron import get_cron_job_history_key

    for _, _, name in PERIODIC_JOBS:
        redis.delete(lease_key(name), get_cron_job_history_key(name))


@pytest.fixture
def nodes(transactional_db, model, bucket, tmp_path, queue):
    """Node 1 and node 2: processes named "web 1", "worker 1", "cron 1", ... (a Cluster whose
    url(0, ...) is node 1's web process, url(1, ...) node 2's)."""
    import django_rq

    _clean_cron_state(django_rq.get_connection("default"))
    base = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    base.update(
        DATABASE_URL=os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"],
        REDIS_URL=settings.REDIS_URL,
        GROUNDWORK_TESTING="1",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LLM_BASE_URL=model.base_url,
        PYTHONUNBUFFERED="1",
        **bucket,
    )
    others = already_running()  # /healthz counts them too (the suite's shared daphne)
    ports = [free_port(), free_port()]
    processes, logs = {}, {}

    def start(name, argv, env):
        logs[name] = tmp_path / f"{name.replace(' ', '')}.log"
        processes[name] = subprocess.Popen(
            argv, cwd=BASE_DIR, env=env, start_new_session=True, stdout=logs[name].open("w"), stderr=subprocess.STDOUT
        )

    try:
        for index, port in enumerate(ports, start=1):
            media = tmp_path / f"node{index}-media"
            media.mkdir()
            env = dict(base, MEDIA_ROOT=str(media))
            sock = listening_socket("127.0.0.1", port)
            logs[f"web {index}"] = tmp_path / f"web{index}.log"
            processes[f"web {index}"] = spawn_web(
                sock, env, index, stdout=logs[f"web {index}"].open("w"), stderr=subprocess.STDOUT
            )
            sock.close()
            start(f"worker {index}", worker_argv(), env)
            start(f"cron {index}", [PYTHON, "manage.py", "rqcron", "config.cron"], env)
        cluster = Cluster(ports, processes, logs, others)
        _wait_healthy(cluster)
        yield cluster
    finally:
        for process in processes.values():
            _stop(process)
        _clean_cron_state(django_rq.get_connection("default"))


def _media_files(tmp_path) -> list:
    return [p for p in tmp_path.glob("node*-media/**/*") if p.is_file()]


def _cron_runs(redis) -> dict[str, list]:
    """Each periodic job's runs so far, by name: the rq jobs both cron processes enqueued."""
    from rq.cron import get_cron_job_ids
    from rq.job import Job

    return {
        name: [job for job in Job.fetch_many(get_cron_job_ids(name, redis), connection=redis) if job]
        for _, _, name in PERIODIC_JOBS
    }


def _revoke_on_node(cluster: Cluster, node: int, client, owner, key_id: int) -> int:
    """POST the team page's revoke form to one node, as the owner's browser would."""
    client.force_login(owner)
    csrf = secrets.token_hex(16)
    cookies = (
        f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}; "
        f"{settings.CSRF_COOKIE_NAME}={csrf}"
    )
    request = urllib.request.Request(
        cluster.url(node, f"/team/api-keys/{key_id}/revoke/"),
        method="POST",
        data=urllib.parse.urlencode({"csrfmiddlewaretoken": csrf}).encode(),
        headers={"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded"},
    )

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=15) as response:
            return response.status
    except urllib.error.HTTPError as answer:
        return answer.code


async def _socket_closed_by_revocation(url: str, key: str, revoke) -> int:
    """Open a chat socket with `key`, ask once (it works), call `revoke()`, and return the close
    code the server sends."""
    import websockets

    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        await ws.send(json.dumps({"type": "chat.message", "message": "Where do visitors park?"}))
        frames = []
        while not frames or frames[-1]["type"] not in ("chat.done", "chat.error"):
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        assert frames[-1]["type"] == "chat.done", frames
        await asyncio.get_running_loop().run_in_executor(None, revoke)
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        except websockets.ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None


def test_two_nodes_share_one_database_redis_and_bucket_and_nothing_on_disk(
    nodes, account_a, owner_a, client, bucket, tmp_path
):
    import django_rq
    from rq.cron import CronScheduler

    redis = django_rq.get_connection("default")
    key = make_api_key(account_a)

    # --- the periodic jobs: both cron processes enqueue each one, one run does the work ----
    assert len(CronScheduler.all(connection=redis)) == 2
    deadline = time.monotonic() + 60
    while True:
        runs = _cron_runs(redis)
        if all(len(jobs) >= 2 and all(job.is_finished for job in jobs) for jobs in runs.values()):
            break
        assert time.monotonic() < deadline, (
            {n: [(j.id, j.get_status()) for j in jobs] for n, jobs in runs.items()},
            nodes.output(),
        )
        time.sleep(0.5)
    for _job, interval, name in PERIODIC_JOBS:
        results = sorted(((run.started_at, run.return_value()) for run in runs[name]), key=lambda r: r[0])
        ran = [started for started, result in results if result["ran"]]
        assert ran and len(ran) < len(results), (name, results)  # one ran, the other found the lease taken
        gaps = [(later - earlier).total_seconds() for earlier, later in zip(ran, ran[1:])]
        assert all(gap >= interval * 0.9 - 1 for gap in gaps), (name, gaps)

    # --- a key revoked on node 1 closes its socket on node 2 ---------------------------------
    document = _upload(nodes.url(0, "/api/v1/documents/"), key, "parking.md", NOTE)
    _wait_ready(nodes, key, [document["id"]])
    with account_context(account_a):
        key_id = ApiKey.objects.for_account(account_a).get(prefix=key[:10]).pk
    revoked = []
    code = asyncio.run(
        _socket_closed_by_revocation(
            f"ws://127.0.0.1:{nodes.ports[1]}/ws/chat/",
            key,
            lambda: revoked.append(_revoke_on_node(nodes, 0, client, owner_a, key_id)),
        )
    )
    assert revoked == [302], (revoked, nodes.output())
    assert code == 4401, nodes.output()
    with account_context(account_a):
        assert ApiKey.objects.for_account(account_a).get(pk=key_id).revoked_at is not None

    # --- node 1's worker stopped: an upload on node 1 is ingested by node 2's worker ---------
    _stop(nodes.processes["worker 1"])
    deadline = time.monotonic() + 30
    while _get_json(nodes.url(0, "/healthz")).get("workers") != 1:
        assert time.monotonic() < deadline, nodes.output()
        time.sleep(0.3)
    from rq import Worker

    (node_2_worker,) = Worker.all(connection=redis)
    done_before = node_2_worker.successful_job_count
    key = make_api_key(account_a)
    document = _upload(nodes.url(0, "/api/v1/documents/"), key, "parking-2.md", NOTE + "\n\nBikes go in the yard.")
    _wait_ready(nodes, key, [document["id"]])
    seen = _get_json(nodes.url(1, f"/api/v1/documents/{document['id']}/"), key)
    assert seen["status"] == "ready" and seen["chunk_count"] >= 1, seen
    (after,) = Worker.all(connection=redis)
    assert after.name == node_2_worker.name and after.successful_job_count > done_before
    stored = s3_keys(bucket, f"accounts/{account_a.pk}/documents/")
    assert len(stored) == 2, stored
    assert _media_files(tmp_path) == [], "a node wrote an uploaded file to its own disk"


def test_two_make_run_supervisors_on_two_ports_are_one_installation(
    transactional_db, model, bucket, tmp_path, account_a, queue
):
    """`make run` on two nodes (config/run.py, one web + one worker + cron each, the same
    SECRET_KEY, database, Redis and bucket; media and data folders of their own): each sees
    the other's processes, an upload on one is ready on the other, and Ctrl-C on each stops
    every process it started.

    The same SECRET_KEY is not optional: `migrate` installs the database's copy of the key that
    signs tenant contexts (core/db_owner.py), so a node with another key would lock every other
    process out of every tenant table (RLS refuses their contexts)."""
    import psutil

    from core.db_owner import context_install, owner_connection

    name = connection.settings_dict["NAME"]
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_ALLOW_ASYNC_UNSAFE", "LOCAL_LLM_PORT")}
    env.update(
        DATABASE_URL=os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + name,
        DATABASE_OWNER_URL=os.environ["DATABASE_OWNER_URL"].rsplit("/", 1)[0] + "/" + name,
        REDIS_URL=settings.REDIS_URL,
        LLM_BASE_URL=model.base_url,
        SECRET_KEY=settings.SECRET_KEY,
        WEB_PROCESSES="1",
        WORKER_PROCESSES="1",
        DEMO_PASSWORD="Demo-pass-for-tests-1",
        **bucket,
    )
    other_workers, others = already_running()  # /healthz counts them too
    ports = [free_port(), free_port()]
    supervisors, logs = [], []
    try:
        for index, port in enumerate(ports, start=1):
            (tmp_path / f"node{index}-media").mkdir()
            logs.append(tmp_path / f"supervisor{index}.log")
            supervisors.append(
                subprocess.Popen(
                    [PYTHON, "-m", "config.run"],
                    cwd=BASE_DIR,
                    start_new_session=True,
                    env=dict(
                        env,
                        PORT=str(port),
                        MEDIA_ROOT=str(tmp_path / f"node{index}-media"),
                        GROUNDWORK_DATA_DIR=str(tmp_path / f"node{index}-data"),
                    ),
                    stdout=logs[-1].open("w"),
                    stderr=subprocess.STDOUT,
                )
            )

        def output() -> str:
            return "\n".join(
                f"--- supervisor {i + 1} ---\n{log.read_text(errors='replace')[-3000:]}" for i, log in enumerate(logs)
            )

        deadline = time.monotonic() + 120
        while not all("Groundwork is running" in log.read_text(errors="replace") for log in logs):
            assert all(s.poll() is None for s in supervisors), output()
            assert time.monotonic() < deadline, output()
            time.sleep(0.3)
        # Each supervisor is up once its own processes answer; the other's worker may register a
        # moment later. Web processes already serving on this Redis (the suite's shared daphne)
        # count on top of the two nodes'.
        for port in ports:
            deadline = time.monotonic() + 30
            while (health := _get_json(f"http://127.0.0.1:{port}/healthz")) and not (
                health["web_processes"] == 2 + others and health["workers"] == 2 + other_workers
            ):
                assert time.monotonic() < deadline, (health, other_workers, others, output())
                time.sleep(0.3)

        key = make_api_key(account_a)
        document = _upload(f"http://127.0.0.1:{ports[0]}/api/v1/documents/", key, "parking.md", NOTE)
        deadline = time.monotonic() + 60
        while (seen := _get_json(f"http://127.0.0.1:{ports[1]}/api/v1/documents/{document['id']}/", key))[
            "status"
        ] != "ready":
            assert seen["status"] in ("pending", "processing") and time.monotonic() < deadline, (seen, output())
            time.sleep(0.3)
        assert s3_keys(bucket, f"accounts/{account_a.pk}/documents/") != []
        assert _media_files(tmp_path) == []

        for supervisor in supervisors:
            children = psutil.Process(supervisor.pid).children(recursive=True)
            assert len(children) >= 3, output()  # web, worker, cron
            supervisor.send_signal(signal.SIGINT)
            assert supervisor.wait(timeout=60) == 0, output()
            gone, alive = psutil.wait_procs(children, timeout=10)
            assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    finally:
        with owner_connection() as conn:  # this process's key, whatever a failed start left
            context_install(conn)
        for supervisor in supervisors:
            if supervisor.poll() is None:
                os.killpg(supervisor.pid, signal.SIGTERM)
                try:
                    supervisor.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(supervisor.pid, signal.SIGKILL)
                    supervisor.wait()

"""The Procfile's entry points for several processes of one kind in one container or dyno:
`python -m config.serve web` binds HOST:PORT once and runs WEB_PROCESSES daphne
processes on that socket; `python -m config.serve worker` runs WORKER_PROCESSES rq workers.
Both default to the number of cores. SIGTERM stops them all; if one exits, the rest are
stopped and the exit code says so, so that the platform restarts the whole.

Unlike `make run` (config/run.py), nothing embedded is started: DATABASE_URL and REDIS_URL
name the deployment's own services, and `release` (migrate) has run before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from config.embedded import log
from config.run import (
    children_die_with_this_process,
    listening_socket,
    metrics_dir,
    process_count,
    spawn,
    spawn_web,
    stop_children,
    watch,
    worker_argv,
)

USAGE = "usage: python -m config.serve web|worker"


def _start(role: str, env: dict) -> list[tuple[str, subprocess.Popen]]:
    if role == "web":
        sock = listening_socket(env.get("HOST", "0.0.0.0"), int(env.get("PORT", "8000")))
        children = [(f"web {i + 1}", spawn_web(sock, env, i + 1)) for i in range(process_count("WEB_PROCESSES"))]
        sock.close()  # the daphne processes hold it
        return children
    return [spawn(f"worker {i + 1}", worker_argv(), env) for i in range(process_count("WORKER_PROCESSES"))]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("web", "worker"):
        print(USAGE, file=sys.stderr)
        return 2

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    children_die_with_this_process()
    children: list[tuple[str, subprocess.Popen]] = []
    try:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # One folder for the web and worker processes of this machine (docs/operations/metrics.md); the
        # web supervisor empties it at its start, a worker supervisor only adds to it.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir(env, "serve", clean=argv[0] == "web")
        children = _start(argv[0], env)
        log(f"{len(children)} {argv[0]} processes")
        watch(children)
    except KeyboardInterrupt:
        return 0
    except RuntimeError as exc:
        log(f"error: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        stop_children(children)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Clean stops in every way of starting: no process of the data folder outlives its start.

Found from outside: `make run 2>&1 | tee run.log` then Ctrl-C left the embedded PostgreSQL
running, the next `make run` reused it and never stopped it, and `manage.py` / `python -m
bench` left it running too. Each test here starts Groundwork the way a person does (a real
`make run` in a terminal: a pty whose Ctrl-C and hang-up the kernel delivers; a job-control
shell's `make run &` and `kill %1`; a `manage.py` command; a benchmark), waits until it
serves, delivers the signal(s) and then checks that no process of its data folder is left
(PostgreSQL, Redis, daphne, rq workers, cron, make, tee) and that the next start starts and
stops cleanly too. No model server is started (LLM_BASE_URL is set): config/tests/
test_make_run.py stops the bundled one.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from config.embedded import BASE_DIR
from config.testing import installation_env, migrated_data_folder
from config.tests.test_make_run import _free_port, _get

pytestmark = [pytest.mark.system, pytest.mark.slow]

# A session of its own with the pty as its controlling terminal, as a login shell has, and
# the signals' default dispositions, as a terminal gives its shell: an ignored disposition is
# inherited across exec, and a runner that starts the suite with SIGHUP ignored (as CI does,
# like nohup) would make the shell outlive the hang-up, leaving its job running (correctly:
# that is what nohup asks for), so the test would time out.
IN_TERMINAL = (
    "import fcntl, os, signal, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, "
    "signal.SIGTERM, signal.SIGPIPE)]; "
    "os.execvp('bash', ['bash', '-c', sys.argv[1]])"
)


def _env(data_dir: Path, port: int) -> dict:
    return installation_env(
        data_dir,
        PORT=port,
        DEMO_PASSWORD="Demo-pass-for-tests-1",
        WEB_PROCESSES=1,
        WORKER_PROCESSES=1,
        LLM_BASE_URL="http://127.0.0.1:9/v1",
    )


def _make_run(tmp_path: Path) -> str:
    """`make run` with this test's Python (the Makefile's install step already done)."""
    stamp = tmp_path / "installed-stamp"
    stamp.touch()
    return f"make --no-print-directory run PY={shlex.quote(sys.executable)} STAMP={shlex.quote(str(stamp))}"


def ours(data_dir: Path) -> list[psutil.Process]:
    """Every process of this data folder: started with it in the environment or on the command line."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if process.pid == os.getpid():
            continue
        try:
            if str(data_dir) in " ".join(process.info["cmdline"] or []) or process.environ().get(
                "GROUNDWORK_DATA_DIR"
            ) == str(data_dir):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def assert_nothing_left(data_dir: Path, timeout: float = 20, output: str = "") -> None:
    _, alive = psutil.wait_procs(ours(data_dir), timeout=timeout)
    left = []
    for process in alive:
        try:
            left.append(" ".join(process.cmdline()))
        except psutil.Error:
            pass
    assert not left, f"left running: {left}\n{output}"
    log = data_dir / "postgres" / "log"
    assert not (data_dir / "postgres" / "postmaster.pid").exists(), (
        f"embedded PostgreSQL not stopped:\n{output}\n{log.read_text()[-2000:] if log.exists() else ''}"
    )


@pytest.fixture(scope="module")
def shared_data_dir():
    """One data folder for the module (a copy of the run's migrated template; each test leaves
    it stopped). Not under tmp_path: the embedded PostgreSQL runs as its own user when the
    tests run as root, and other pytest sessions on the machine set /tmp/pytest-of-<user> back
    to 0700."""
    base = Path(tempfile.mkdtemp(prefix="gw-stops-"))
    base.chmod(0o755)
    yield migrated_data_folder(base / "data")
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def data_dir(shared_data_dir):
    folder = shared_data_dir
    yield folder
    # Whatever a failed test left: killed, so that no test leaves a process behind.
    for process in ours(folder):
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(ours(folder), timeout=30)


class Terminal:
    """A shell command run in a terminal of its own: Ctrl-C and hang-up come from the kernel."""

    def __init__(self, command: str, env: dict):
        self.master, slave = os.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-c", IN_TERMINAL, command],
            cwd=BASE_DIR,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.chunks: list[bytes] = []
        self.reading = True
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while self.reading:
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    data = os.read(self.master, 65536)
                except OSError:  # EIO: every process of the terminal has gone
                    return
                if not data:
                    return
                self.chunks.append(data)

    @property
    def output(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, f"never printed {text!r}:\n{self.output}"
            time.sleep(0.2)

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def hang_up(self) -> None:
        """The terminal window closed: the kernel hangs up the session (SIGHUP)."""
        self.reading = False
        self.reader.join(5)
        os.close(self.master)
        self.master = None

    def close(self) -> None:
        self.reading = False
        self.reader.join(5)
        if self.master is not None:
            os.close(self.master)
            self.master = None


def _serving(port: int) -> bool:
    return _get(f"http://127.0.0.1:{port}/healthz")[0] == 200


def test_piped_make_run_stops_everything_on_ctrl_c_then_starts_again(tmp_path, data_dir):
    """`make run 2>&1 | tee run.log`, Ctrl-C: tee dies with the rest of the pipeline, so the
    supervisor's output is a closed pipe while it cleans up. Twice: the second run starts its
    own PostgreSQL (none was left) and stops it again."""
    port = _free_port()
    log_file = tmp_path / "run.log"
    for attempt in (1, 2):
        terminal = Terminal(f"{_make_run(tmp_path)} 2>&1 | tee {shlex.quote(str(log_file))}", _env(data_dir, port))
        try:
            terminal.wait_for(f"running at http://127.0.0.1:{port}/")
            assert _serving(port)
            assert "starting embedded PostgreSQL" in terminal.output, f"attempt {attempt} found one running"
            terminal.ctrl_c()
            terminal.process.wait(90)
            assert_nothing_left(data_dir, output=terminal.output)
            assert not _serving(port)
        finally:
            terminal.close()
    assert "running at" in log_file.read_text()
    # The pipe was gone while it stopped: its messages are kept in the data folder.
    assert (data_dir / "stop.log").read_text().count("stopped embedded PostgreSQL") >= 2


def test_crashed_start_is_adopted_and_a_second_ctrl_c_hurries_but_stops_everything(tmp_path, data_dir):
    """A supervisor killed outright (SIGKILL: no cleanup can run) leaves PostgreSQL and Redis;
    its children die with it. The next start adopts what was left and stops it at the end,
    also when Ctrl-C is pressed twice."""
    port = _free_port()
    # Its output into a file: a pipe nobody reads would fill and block its children's writes.
    crashed_log = open(tmp_path / "crashed.log", "w")
    crashed = subprocess.Popen(
        [sys.executable, "-m", "config.run"],
        cwd=BASE_DIR,
        env=_env(data_dir, port),
        stdout=crashed_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not _serving(port):
            assert crashed.poll() is None and time.monotonic() < deadline
            time.sleep(0.3)
        children = psutil.Process(crashed.pid).children(recursive=True)
        crashed.kill()
        crashed.wait(10)
        psutil.wait_procs(children, timeout=20)
        left = {" ".join(p.cmdline()) for p in ours(data_dir) if p.is_running()}
        assert (data_dir / "postgres" / "postmaster.pid").exists()
        assert not any("daphne" in cmd or "rqworker" in cmd or "rqcron" in cmd for cmd in left), left
    finally:
        crashed_log.close()

    terminal = Terminal(
        f"{_make_run(tmp_path)} 2>&1 | tee {shlex.quote(str(tmp_path / 'run.log'))}", _env(data_dir, port)
    )
    try:
        terminal.wait_for(f"running at http://127.0.0.1:{port}/")
        assert "adopting" in terminal.output and "starting embedded PostgreSQL" not in terminal.output
        terminal.ctrl_c()
        time.sleep(0.3)
        terminal.ctrl_c()
        terminal.process.wait(90)
        assert_nothing_left(data_dir)
        # tee died with the first Ctrl-C: what the stop said is kept in the data folder.
        assert "hurrying" in (data_dir / "stop.log").read_text()
    finally:
        terminal.close()


def test_terminal_hang_up_stops_everything(tmp_path, data_dir):
    """The terminal closes (ssh drops, the window is closed): the kernel hangs up the session;
    its shell dies of SIGHUP, and the job in the foreground (make and the supervisor) gets
    SIGHUP. (`; status=$?`: the shell stays make's parent, as a login shell does.)"""
    port = _free_port()
    terminal = Terminal(f"{_make_run(tmp_path)}; status=$?", _env(data_dir, port))
    try:
        terminal.wait_for(f"running at http://127.0.0.1:{port}/")
        terminal.hang_up()
        terminal.process.wait(90)
        assert_nothing_left(data_dir, timeout=60)
    finally:
        terminal.close()


def test_backgrounded_make_run_kill_percent_one_and_manage_py_meanwhile(tmp_path, data_dir):
    """`make run &` in a job-control shell, a `manage.py` command while it runs (it must leave
    the services to the run), then `kill %1` (SIGTERM to the job: make and the supervisor).
    Then again, with SIGTERM to make alone (`kill $!`): make passes it on to the supervisor."""
    port = _free_port()
    python = shlex.quote(sys.executable)
    for attempt, kill in ((1, "kill %1"), (2, "kill $!")):
        log_file = tmp_path / f"run{attempt}.log"
        script = (
            f"set -m; {_make_run(tmp_path)} > {shlex.quote(str(log_file))} 2>&1 &\n"
            f"until grep -q 'running at' {shlex.quote(str(log_file))}; do kill -0 %1 || exit 3; sleep 0.3; done\n"
            f"{python} manage.py check > {shlex.quote(str(tmp_path / 'check.log'))} 2>&1 || exit 4\n"
            f"curl -fsS http://127.0.0.1:{port}/healthz > /dev/null || exit 5\n"
            f"{kill}; wait"
        )
        result = subprocess.run(
            ["bash", "-c", script], cwd=BASE_DIR, env=_env(data_dir, port), timeout=240, capture_output=True, text=True
        )
        output = log_file.read_text()
        assert result.returncode in (0, 143), f"{kill}: {result.returncode}: {result.stderr}\n{output}"
        assert "System check identified no issues" in (tmp_path / "check.log").read_text()
        assert_nothing_left(data_dir, output=output)
        assert "stopped embedded PostgreSQL" in output and output.rstrip().endswith("stopped"), output


def test_manage_py_and_bench_stop_what_they_started(data_dir):
    """With nothing running, a command starts the embedded PostgreSQL and Redis and stops
    them when it ends: normally, on SIGTERM, and when its output is a closed pipe."""
    env = _env(data_dir, _free_port())
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "starting embedded PostgreSQL" in result.stderr and "stopped embedded PostgreSQL" in result.stderr
    assert_nothing_left(data_dir)

    # A long command stopped with SIGTERM (kill, a service manager, a timeout).
    shell = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", "print('ready', flush=True); import time; time.sleep(120)"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    while shell.stdout.readline().strip() != "ready":
        assert shell.poll() is None
    shell.send_signal(signal.SIGTERM)
    shell.wait(60)
    shell.stdout.close()
    assert_nothing_left(data_dir)

    # Output into a pipe that closes early (`manage.py showmigrations | head -1`).
    piped = subprocess.run(
        f"{shlex.quote(sys.executable)} manage.py showmigrations | head -1",
        shell=True,
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.stdout.strip()
    assert_nothing_left(data_dir)

    # A benchmark, interrupted with Ctrl-C (SIGINT) while it runs.
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench", "rls_context"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert bench.stdout.readline().startswith("# machine")
    bench.send_signal(signal.SIGINT)
    bench.wait(60)
    bench.stdout.close()
    assert_nothing_left(data_dir)

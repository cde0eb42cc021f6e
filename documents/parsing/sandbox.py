"""Parse a stored upload in a resource-limited child process.

`parse_in_sandbox` is the entry point for the pipeline: it runs `python -m documents.parsing`
(whose __main__ calls `child_main` here) with an address-space limit, a CPU-time limit and
a wall-clock timeout, and turns every way the child can fail into an IngestionError with a
message for the uploader.

No Django here, on purpose: the child process imports this package without settings.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import traceback

import documents.parsing.ocr as ocr
from documents.error_codes import DocumentErrorCode
from documents.errors import IngestionError
from documents.kinds import KIND_NAMES
from documents.parsing.dispatch import PARSERS, parse_file
from documents.parsing.sections import ParsedDocument

logger = logging.getLogger("groundwork.documents.parsing")

MSG_RESOURCES = (
    "This file is too large or complex to read within Groundwork's memory limit. Split it "
    "into smaller files or save it in a simpler format (PDF or plain text), and upload again."
)
MSG_FAILED = (
    "This file could not be read. Check that it opens on your computer, save it again (or as PDF), and upload it again."
)


def timeout_message(timeout_s: float) -> str:
    return (
        f"Reading this file took longer than {timeout_s:g} s, so Groundwork stopped. Split it into "
        "smaller files or save it in a simpler format (PDF or plain text), and upload again."
    )


def parse_in_sandbox(
    path: str,
    kind: str,
    *,
    timeout_s: float = 60,
    memory_mb: int | None = None,
    filename: str | None = None,
    ocr_max_pages: int = 50,
) -> ParsedDocument:
    """Parse in a child process limited to `memory_mb` of address space and `timeout_s`
    of wall-clock and CPU time. Returns the ParsedDocument or raises IngestionError:
    the parser's own errors unchanged, "parse_timeout", "parse_failed_resources" (out
    of memory, killed by a signal) or "parse_failed" (anything else; details go to the
    log, never into the message). Never raises anything else for a bad file.
    At most `ocr_max_pages` pages (scanned PDF pages, TIFF frames) are read by OCR.
    `memory_mb` by default: 1024, or ocr.DEFAULT_MEMORY_MB for a kind that may need OCR.
    """
    if kind not in PARSERS:
        raise ValueError(f"unknown document kind {kind!r}")
    if memory_mb is None:
        memory_mb = ocr.DEFAULT_MEMORY_MB if kind in ocr.OCR_KINDS else 1024
    # "--opt=value" and "--" keep a file name or path that starts with "-" an argument.
    command = [
        sys.executable,
        "-m",
        "documents.parsing",
        "--child",
        f"--memory-mb={int(memory_mb)}",
        f"--cpu-s={max(1, math.ceil(timeout_s))}",
        f"--ocr-max-pages={int(ocr_max_pages)}",
    ]
    if filename:
        command.append(f"--filename={filename}")
    command += ["--", os.path.abspath(path), kind]  # the child runs in the project root
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_child_env(),
            cwd=_PROJECT_ROOT,
        )
    except OSError:
        logger.exception("could not start the parser process for %s", path)
        raise IngestionError(DocumentErrorCode.PARSE_FAILED, MSG_FAILED) from None
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        logger.warning("parsing %s (%s) timed out after %ss; stderr tail: %s", path, kind, timeout_s, _tail(err))
        raise IngestionError(DocumentErrorCode.PARSE_TIMEOUT, timeout_message(timeout_s)) from None
    finally:
        # Whatever interrupts the wait (a job being cancelled), the child does not outlive it.
        if child.poll() is None:
            child.kill()
            child.wait()
    return _interpret_child(path, kind, child.returncode, out, err, timeout_s)


def _interpret_child(path: str, kind: str, returncode: int, out: bytes, err: bytes, timeout_s: float) -> ParsedDocument:
    """Map the child's exit status and report to a ParsedDocument or an IngestionError."""
    payload = _load_payload(out)
    if payload is not None and payload.get("ok"):
        try:
            return ParsedDocument.from_dict(payload["document"])
        except (KeyError, TypeError):
            logger.exception("parser for %s (%s) sent a malformed report", path, kind)
            raise IngestionError(DocumentErrorCode.PARSE_FAILED, MSG_FAILED) from None
    if payload is not None:
        code = payload.get("code", "parse_failed")
        if code == DocumentErrorCode.PARSE_FAILED:
            logger.error("parsing %s (%s) failed: %s\n%s", path, kind, payload.get("detail", ""), _tail(err))
            raise IngestionError(DocumentErrorCode.PARSE_FAILED, MSG_FAILED)
        if code == DocumentErrorCode.PARSE_FAILED_RESOURCES:
            logger.warning("parsing %s (%s) ran out of resources: %s", path, kind, payload.get("detail", ""))
            raise IngestionError(code, MSG_RESOURCES)
        raise IngestionError(code, payload.get("message") or MSG_FAILED)
    if returncode < 0:
        signum = -returncode
        logger.warning(
            "parser for %s (%s) was killed by signal %s; stderr tail: %s", path, kind, _signal_name(signum), _tail(err)
        )
        if signum == signal.SIGXCPU:
            raise IngestionError(DocumentErrorCode.PARSE_TIMEOUT, timeout_message(timeout_s))
        raise IngestionError(DocumentErrorCode.PARSE_FAILED_RESOURCES, MSG_RESOURCES)
    if b"MemoryError" in err:
        logger.warning("parser for %s (%s) ran out of memory; stderr tail: %s", path, kind, _tail(err))
        raise IngestionError(DocumentErrorCode.PARSE_FAILED_RESOURCES, MSG_RESOURCES)
    logger.error("parser for %s (%s) exited with %s and no report; stderr tail: %s", path, kind, returncode, _tail(err))
    raise IngestionError(DocumentErrorCode.PARSE_FAILED, MSG_FAILED)


def _load_payload(out: bytes) -> dict | None:
    try:
        payload = json.loads(out)
    except (ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


# documents/parsing/sandbox.py -> the project root, where `python -m documents.parsing` resolves.
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _child_env() -> dict[str, str]:
    """The parent's environment with the project importable from the child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _tail(err: bytes, limit: int = 4000) -> str:
    return err[-limit:].decode("utf-8", "replace")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


# ---------------------------------------------------------------------------------------
# The child process


def child_main(argv: list[str]) -> int:
    """Run one parse under resource limits and print one JSON report on stdout:
    {"ok": true, "document": {...}} or {"ok": false, "code": ..., "message"/"detail": ...}."""
    parser = argparse.ArgumentParser(prog="python -m documents.parsing")
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("path")
    parser.add_argument("kind", choices=KIND_NAMES)
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--cpu-s", type=int, default=60)
    parser.add_argument("--filename", default=None)
    parser.add_argument("--ocr-max-pages", type=int, default=50)
    args = parser.parse_args(argv)
    ocr.configure(max_pages=args.ocr_max_pages)

    _apply_limits(memory_mb=args.memory_mb, cpu_s=args.cpu_s)
    # Libraries that print would corrupt the report: stdout goes to stderr, the report to
    # a private copy of the original stdout.
    report = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    # Freed on MemoryError so that the failure can still be reported.
    reserve = bytearray(2 * 1024 * 1024)
    try:
        parsed = parse_file(args.path, args.kind, filename=args.filename)
        text = json.dumps({"ok": True, "document": parsed.to_dict()}, ensure_ascii=False)
        del parsed
    except IngestionError as exc:
        text = json.dumps({"ok": False, "code": exc.code, "message": exc.message})
    except (MemoryError, RecursionError) as exc:
        del reserve
        text = json.dumps({"ok": False, "code": "parse_failed_resources", "detail": type(exc).__name__})
    except Exception as exc:
        traceback.print_exc()
        text = json.dumps({"ok": False, "code": "parse_failed", "detail": f"{type(exc).__name__}: {exc}"[:2000]})
    report.write(text)
    report.flush()
    return 0


def _apply_limits(*, memory_mb: int, cpu_s: int) -> None:
    """Address space, CPU seconds (SIGXCPU at the soft limit, SIGKILL one second later), no core files."""
    _lower_limit(resource.RLIMIT_AS, memory_mb * 1024 * 1024, memory_mb * 1024 * 1024)
    _lower_limit(resource.RLIMIT_CPU, cpu_s, cpu_s + 1)
    _lower_limit(resource.RLIMIT_CORE, 0, 0)


def _lower_limit(which: int, soft: int, hard: int) -> None:
    """Set a limit, never above an existing hard limit (raising it would fail)."""
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))

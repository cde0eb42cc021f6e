"""The `git` kind: the text, Markdown, reStructuredText, HTML and PDF files of a Git
repository (one branch, optionally under one path), one document per file, re-synced by blob
sha: a file whose blob did not change is not read again.

The repository is cloned shallow and bare into a temporary folder with the git CLI, over
git:// or http(s) only (file://, ssh and the rest are refused by git's own protocol.allow),
to the address sources/net.py checked (git:// to the IP itself; http(s) through curl's
resolve option, so the name is not looked up again; redirects not followed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from sources import net
from sources.error_codes import SourceErrorCode
from sources.errors import SourceError
from sources.kinds import Content, Known, Option, Skipped, Unchanged

SCHEMES = {"git": 9418, "http": 80, "https": 443}
# Extension -> (the name documents reads it by, content type).
FILE_KINDS = {
    ".md": (".md", "text/markdown"),
    ".markdown": (".md", "text/markdown"),
    ".txt": (".txt", "text/plain"),
    ".rst": (".txt", "text/plain"),
    ".html": (".html", "text/html"),
    ".htm": (".html", "text/html"),
    ".pdf": (".pdf", "application/pdf"),
}
OPTIONS = (Option("branch", "Branch", "main"), Option("path", "Folder", "docs/"))
SAFE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
CLONE_TIMEOUT_SECONDS = 300


def _option_error(message: str, field: str) -> SourceError:
    return SourceError(SourceErrorCode.INVALID_OPTION, message, field=field)


def clean_options(options: dict) -> dict:
    unknown = set(options) - {option.name for option in OPTIONS}
    if unknown:
        raise _option_error(f"Unknown option {min(unknown)!r}; a git source takes `branch` and `path`.", "options")
    branch = options.get("branch") or ""
    if branch and (not isinstance(branch, str) or not SAFE_REF.match(branch) or ".." in branch):
        raise _option_error("`options.branch` must be a branch name such as main or release/2.0.", "options")
    path = options.get("path") or ""
    if not isinstance(path, str) or path.startswith(("-", "/")) or ".." in path.split("/") or "\x00" in path:
        raise _option_error("`options.path` must be a folder inside the repository, such as docs/.", "options")
    return {key: value for key, value in (("branch", branch), ("path", path.strip("/"))) if value}


class GitKind:
    name = "git"
    label = "Git repository"
    description = "its text, Markdown, HTML and PDF files, of one branch and optionally one folder"
    options = OPTIONS

    def check(self, *, url: str, options: dict) -> tuple[str, dict]:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (raises ValueError for a port out of range)
        except ValueError:
            raise SourceError(SourceErrorCode.INVALID_URL, f"{url[:200]} is not a valid URL.", field="url") from None
        if parts.scheme.lower() not in SCHEMES or not parts.hostname:
            raise SourceError(
                SourceErrorCode.INVALID_URL,
                "A git source's URL must start with https://, http:// or "
                "git:// (such as https://git.example.com/team/docs.git).",
                field="url",
            )
        if parts.username or parts.password:
            raise SourceError(SourceErrorCode.INVALID_URL, "Give the URL without a user name or password.", field="url")
        options = clean_options(options)
        _checked_address(url)
        return url, options

    def open(self, source, *, known: dict[str, Known]) -> GitReader:
        return GitReader(url=source.url, options=source.options, max_files=source.max_pages, known=known)


def _checked_address(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    port = parts.port or SCHEMES[parts.scheme.lower()]
    return parts.hostname, port, net.resolve(parts.hostname, port)


class GitReader:
    def __init__(self, *, url: str, options: dict, max_files: int, known: dict[str, Known]):
        self.url, self.options, self.max_files, self.known = url, options, max_files, known
        self.folder = tempfile.mkdtemp(prefix="groundwork-git-")
        self.repository = os.path.join(self.folder, "repository.git")
        self.blobs: dict[str, str] = {}
        self.bytes_fetched = 0

    def _git(self, *args, cwd=None, timeout=CLONE_TIMEOUT_SECONDS) -> bytes:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.folder,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_ASKPASS": "/bin/false",
            "LC_ALL": "C",
        }
        try:
            done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise SourceError(
                SourceErrorCode.FETCH_FAILED, f"{self.url} took longer than {timeout} s to read."
            ) from None
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            detail = next(
                (line for line in reversed(detail) if line.startswith("fatal:")), detail[-1] if detail else ""
            )
            raise SourceError(
                SourceErrorCode.FETCH_FAILED,
                f"The repository {self.url} could not be read: {detail.removeprefix('fatal: ')[:300]}",
            )
        return done.stdout

    def _clone(self) -> None:
        host, port, address = _checked_address(self.url)
        parts = urlsplit(self.url)
        scheme = parts.scheme.lower()
        config = [
            "-c",
            "protocol.allow=never",
            "-c",
            f"protocol.{scheme}.allow=always",
            "-c",
            "http.followRedirects=false",
            "-c",
            "core.symlinks=false",
        ]
        url = self.url
        if scheme == "git":
            netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
            url = urlunsplit((scheme, netloc, parts.path, parts.query, ""))
        else:
            config += ["-c", f"http.curloptResolve={host}:{port}:{address}"]
        branch = ["--branch", self.options["branch"]] if self.options.get("branch") else []
        self._git(
            *config,
            "clone",
            "--quiet",
            "--bare",
            "--depth",
            "1",
            "--single-branch",
            *branch,
            "--",
            url,
            self.repository,
        )

    def list_items(self):
        self._clone()
        path = self.options.get("path", "")
        listing = self._git("ls-tree", "-r", "-l", "-z", "HEAD", "--", *([path] if path else []), cwd=self.repository)
        listed = 0
        for entry in listing.split(b"\0"):
            if not entry or listed >= self.max_files:
                continue
            meta, _, name = entry.decode("utf-8", "replace").partition("\t")
            mode, kind, blob, size = meta.split()
            extension = os.path.splitext(name)[1].lower()
            if kind != "blob" or mode == "120000" or extension not in FILE_KINDS:
                continue
            if int(size) > settings.SOURCES_MAX_PAGE_BYTES:
                continue
            self.blobs[name] = blob
            listed += 1
            yield name

    def fetch_item(self, key: str):
        blob = self.blobs[key]
        known = self.known.get(key)
        if known is not None and known.etag == blob:
            return Unchanged(key, etag=blob)
        try:
            data = self._git("cat-file", "blob", blob, cwd=self.repository, timeout=60)
        except SourceError as exc:
            return Skipped(key, exc.message)
        self.bytes_fetched += len(data)
        stem, extension = os.path.splitext(os.path.basename(key))
        read_as, content_type = FILE_KINDS[extension.lower()]
        filename = f"{stem}{extension}" if read_as == extension.lower() else f"{stem}{extension}{read_as}"
        return Content(
            key=key,
            url=f"{self.url}#{key}",
            title=key[:255],
            filename=filename,
            content_type=content_type,
            data=data,
            etag=blob,
        )

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


KIND = GitKind()

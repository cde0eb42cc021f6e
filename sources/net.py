"""Fetching a URL a person gave, safely (docs/guide/sources.md; docs/architecture.md, "A sync's path"): only http(s); the
host resolved and every address checked (private, loopback, link-local, reserved, multicast
and unspecified ones refused unless SOURCES_ALLOWED_HOSTS allows the host on that port); the
connection made to the address that was checked, with the URL's host for Host and TLS (no DNS
rebinding between check and connect); redirects followed by hand, each hop checked again
with the same rule; the body capped in bytes, and the whole fetch (every hop's connection,
headers and body) in time: SOURCES_FETCH_TIMEOUT_SECONDS holds however slowly the server
sends (see _read and _Watchdog)."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import urllib3
from django.conf import settings

from core.error_codes import CoreErrorCode
from sources.error_codes import SourceErrorCode
from sources.errors import AddressRefused, SourceError

USER_AGENT = "GroundworkBot/1.0 (+knowledge base sync)"
MAX_REDIRECTS = 5
ALLOWED_SCHEMES = {"http": 80, "https": 443}
# A body is read in small reads, each given only the time left, so the deadline is checked
# often however slowly bytes arrive.
READ_BYTES = 16 * 1024


@dataclass(frozen=True)
class Target:
    """A URL whose host was resolved and checked: connect to `address`."""

    scheme: str
    host: str
    port: int
    address: str
    path: str  # path + query, what the request line carries


@dataclass
class Response:
    url: str  # the final URL, after redirects
    status: int
    headers: dict
    body: bytes


def _allowed_entry(entry: str) -> tuple[str, int | None]:
    """(host, port or None) of a SOURCES_ALLOWED_HOSTS entry: `host`, `host:port`, `[v6]`,
    `[v6]:port`, or a bare IPv6 address. A port that is not a number matches nothing."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        host, port = entry, None
    if port is None:
        return host, None
    return host, int(port) if port.isdigit() else -1


def host_allowed(host: str, port: int, *, source_port: int) -> bool:
    """Whether SOURCES_ALLOWED_HOSTS lets `host` be read on `port` at a private address: an
    entry `host:port` allows that port; a bare `host` allows 80, 443 and the port of the
    source's own URL (`source_port`), never another port of the same machine."""
    host = host.lower().strip("[]")
    for allowed, allowed_port in map(_allowed_entry, settings.SOURCES_ALLOWED_HOSTS):
        if allowed != host:
            continue
        if port == allowed_port or (allowed_port is None and port in (80, 443, source_port)):
            return True
    return False


def _display(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _allow_hint(host: str, port: int) -> str:
    listed = any(_allowed_entry(entry)[0] == host.lower().strip("[]") for entry in settings.SOURCES_ALLOWED_HOSTS)
    if listed:
        return (
            f"SOURCES_ALLOWED_HOSTS allows {host} on other ports only (a bare host: 80, 443 and the "
            f"source's own port); to read this one, ask your operator to add {_display(host, port)} to it."
        )
    return (
        f"If it is your intranet, ask your operator to add {host} (or {_display(host, port)}) to SOURCES_ALLOWED_HOSTS."
    )


def _refusal(address) -> str | None:
    """Why this address may not be read (None: a public address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    for test, words in (
        ("is_loopback", "a loopback"),
        ("is_link_local", "a link-local"),
        ("is_private", "a private"),
        ("is_reserved", "a reserved"),
        ("is_multicast", "a multicast"),
        ("is_unspecified", "an unspecified"),
    ):
        if getattr(address, test):
            return words
    return None if address.is_global else "a non-public"


def resolve(host: str, port: int, *, source_port: int | None = None) -> str:
    """The address to connect to for `host`: every address it resolves to must be public,
    unless the host is allowed on `port` (host_allowed; `source_port` is the port of the
    source's own URL, this one's by default). AddressRefused (400) says which address and
    what to do."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:  # gaierror is an OSError; a NUL a ValueError
        raise SourceError(SourceErrorCode.FETCH_FAILED, f"The host {host} could not be found ({exc}).") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not host_allowed(host, port, source_port=port if source_port is None else source_port):
        for text in addresses:
            why = _refusal(ipaddress.ip_address(text.split("%")[0]))
            if why:
                raise AddressRefused(
                    SourceErrorCode.ADDRESS_REFUSED,
                    f"The host {host} (port {port}) resolves to {why} address {text}; Groundwork does not read "
                    f"such addresses. {_allow_hint(host, port)}",
                    field="url",
                )
    return addresses[0]


def url_port(url: str) -> int | None:
    """The port a URL names, or its scheme's (None: not an http(s) URL one can read)."""
    try:
        parts = urlsplit(url)
        return parts.port or ALLOWED_SCHEMES.get(parts.scheme.lower())
    except ValueError:
        return None


def check_url(url: str, *, source_port: int | None = None) -> Target:
    """Parse and check one URL (a source's, a link's, a redirect's); `source_port` is the
    port of the source's own URL (this URL's by default: see host_allowed)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise SourceError(SourceErrorCode.INVALID_URL, f"{url[:200]} is not a valid URL.", field="url") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES or not parts.hostname:
        raise SourceError(
            SourceErrorCode.INVALID_URL, f"{url[:200]} is not an http:// or https:// address.", field="url"
        )
    if parts.username or parts.password:
        raise SourceError(SourceErrorCode.INVALID_URL, "Give the URL without a user name or password.", field="url")
    port = port or ALLOWED_SCHEMES[scheme]
    host = parts.hostname
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme=scheme, host=host, port=port, address=resolve(host, port, source_port=source_port), path=path)


class _Watchdog:
    """Shuts a hop's connection down at the fetch's deadline. urllib3 gives each socket
    operation the whole timeout, so a server that sends its response headers a byte at a
    time would hold the fetch for as long as it likes; at the deadline the socket is shut
    (both ways), the blocked read returns and the fetch fails. (Connecting, the TLS handshake
    included, is bounded by the connect timeout, the time left; the body by _read.)

    NOTE: it holds the socket object, never its number: shutting a socket that was closed
    meanwhile fails harmlessly (EBADF) and cannot reach another socket given the same number."""

    def __init__(self, deadline: float):
        self._deadline = deadline
        self._lock = threading.Lock()
        self._conn = None
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        with self._lock:
            self._conn = None

    def watch(self, conn) -> None:
        with self._lock:
            self._conn = conn
        if time.monotonic() >= self._deadline:  # connected after the deadline: at once
            self._fire()

    def _fire(self) -> None:
        with self._lock:
            sock = getattr(self._conn, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    # socket.socket's own shutdown: an SSLSocket's would also drop its TLS
                    # state under the reading thread.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watched:
    """A urllib3 connection that puts itself under the fetch's watchdog once connected."""

    def __init__(self, *args, watchdog: _Watchdog, **kwargs):
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def connect(self) -> None:
        super().connect()
        self._watchdog.watch(self)


class _HTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


def _pool(target: Target, left: float, watchdog: _Watchdog):
    timeouts = urllib3.Timeout(connect=left, read=left)
    if target.scheme == "https":
        # Connect to the checked address; verify the certificate for the URL's host (SNI too).
        return _HTTPSPool(
            target.address,
            target.port,
            timeout=timeouts,
            retries=False,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
            maxsize=1,
            watchdog=watchdog,
        )
    return _HTTPPool(target.address, target.port, timeout=timeouts, retries=False, maxsize=1, watchdog=watchdog)


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == ALLOWED_SCHEMES[target.scheme] else f"{host}:{target.port}"


def _too_slow(url: str, timeout: float) -> SourceError:
    return SourceError(
        SourceErrorCode.FETCH_FAILED,
        f"{url} took longer than {timeout:g} s to download (SOURCES_FETCH_TIMEOUT_SECONDS); it was not read.",
    )


def _read(response, *, max_bytes: int, deadline: float, url: str, timeout: float) -> bytes:
    """The body, in small reads, each allowed only the time left before the deadline, which
    is checked after every read: a trickle of bytes cannot stretch it."""
    body = bytearray()
    sock = getattr(response.connection, "sock", None)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _too_slow(url, timeout)
        if sock is not None:
            sock.settimeout(left)
        block = response.read1(READ_BYTES)
        if not block:
            break
        body += block
        if len(body) > max_bytes:
            raise SourceError(
                CoreErrorCode.TOO_LARGE, f"{url} is larger than {max_bytes // 1024:,} KB; it was not read."
            )
    if time.monotonic() > deadline:
        raise _too_slow(url, timeout)
    return bytes(body)


def fetch(
    url: str,
    *,
    headers: dict | None = None,
    max_bytes: int | None = None,
    timeout: float | None = None,
    source_url: str | None = None,
) -> Response:
    """GET `url`, following up to MAX_REDIRECTS redirects, each one checked like the first
    (`source_url`: the source's own URL, whose port a bare allowed host may be read on; `url`
    itself by default). The whole fetch, redirects included, takes at most `timeout` seconds
    (SOURCES_FETCH_TIMEOUT_SECONDS). Any status comes back as a Response (the caller decides
    what a 404 means); a refused address, a network failure, a too-large body or a slow one
    raises SourceError."""
    max_bytes = max_bytes or settings.SOURCES_MAX_PAGE_BYTES
    timeout = timeout or settings.SOURCES_FETCH_TIMEOUT_SECONDS
    deadline = time.monotonic() + timeout
    source_port = url_port(source_url or url)
    for _ in range(MAX_REDIRECTS + 1):
        target = check_url(url, source_port=source_port)
        request_headers = {
            "Host": _host_header(target),
            "User-Agent": USER_AGENT,
            # identity: a compressed body could expand far past the size cap in one read
            "Accept-Encoding": "identity",
            **(headers or {}),
        }
        left = deadline - time.monotonic()
        if left <= 0:
            raise _too_slow(url, timeout)
        with _Watchdog(deadline) as watchdog:
            pool = _pool(target, left, watchdog)
            try:
                response = pool.urlopen(
                    "GET",
                    target.path,
                    headers=request_headers,
                    redirect=False,
                    preload_content=False,
                    assert_same_host=False,
                    retries=False,
                )
                try:
                    location = response.headers.get("Location")
                    if response.status in (301, 302, 303, 307, 308) and location:
                        url = urljoin(url, location)
                        continue
                    body = _read(response, max_bytes=max_bytes, deadline=deadline, url=url, timeout=timeout)
                    return Response(url=url, status=response.status, headers=dict(response.headers), body=body)
                finally:
                    response.release_conn()
            except urllib3.exceptions.HTTPError as exc:
                # (Every read is given only the time left: a read that timed out ran into the deadline.)
                if isinstance(exc, urllib3.exceptions.ReadTimeoutError) or time.monotonic() >= deadline:
                    raise _too_slow(url, timeout) from None
                raise SourceError(
                    SourceErrorCode.FETCH_FAILED, f"{url} could not be fetched: {_reason(exc)}."
                ) from None
            finally:
                pool.close()
    raise SourceError(SourceErrorCode.FETCH_FAILED, f"{url} redirects more than {MAX_REDIRECTS} times.")


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    if "timed out" in text.lower():
        return "the server did not answer in time"
    if "refused" in text.lower():
        return "the connection was refused"
    if isinstance(exc, urllib3.exceptions.SSLError) or "certificate" in text.lower() or "doesn't match" in text:
        return f"its TLS certificate is not valid for this address ({text.split(': ', 1)[-1][:150]})"
    return text.split(": ", 1)[-1][:200]

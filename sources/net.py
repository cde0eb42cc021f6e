"""Fetching a URL a person gave, safely (README, "Sources"; docs/architecture.md, "A sync's path"): only http(s); the
host resolved and every address checked (private, loopback, link-local, reserved, multicast
and unspecified ones refused unless the host is in SOURCES_ALLOWED_HOSTS); the connection
made to the address that was checked, with the URL's host for Host and TLS (no DNS
rebinding between check and connect); redirects followed by hand, each hop checked again;
the body capped in bytes and the read in time."""
from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import urllib3
from django.conf import settings

from sources.error_codes import SourceErrorCode
from sources.errors import AddressRefused, SourceError

USER_AGENT = "GroundworkBot/1.0 (+knowledge base sync)"
MAX_REDIRECTS = 5
ALLOWED_SCHEMES = {"http": 80, "https": 443}


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


def host_allowed(host: str) -> bool:
    return host.lower().strip("[]") in {h.strip("[]") for h in settings.SOURCES_ALLOWED_HOSTS}


def _refusal(address) -> str | None:
    """Why this address may not be read (None: a public address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    for test, words in (("is_loopback", "a loopback"), ("is_link_local", "a link-local"),
                        ("is_private", "a private"), ("is_reserved", "a reserved"),
                        ("is_multicast", "a multicast"), ("is_unspecified", "an unspecified")):
        if getattr(address, test):
            return words
    return None if address.is_global else "a non-public"


def resolve(host: str, port: int) -> str:
    """The address to connect to for `host`: every address it resolves to must be public,
    unless the host is allowed. AddressRefused (400) says which address and what to do."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:  # gaierror is an OSError; a NUL a ValueError
        raise SourceError(SourceErrorCode.FETCH_FAILED, f"The host {host} could not be found ({exc}).") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not host_allowed(host):
        for text in addresses:
            why = _refusal(ipaddress.ip_address(text.split("%")[0]))
            if why:
                raise AddressRefused(
                    SourceErrorCode.ADDRESS_REFUSED,
                    f"The host {host} resolves to {why} address {text}; Groundwork does not read such addresses. "
                    "If it is your intranet, ask your operator to add it to SOURCES_ALLOWED_HOSTS.", field="url")
    return addresses[0]


def check_url(url: str) -> Target:
    """Parse and check one URL (a source's, a link's, a redirect's)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise SourceError(SourceErrorCode.INVALID_URL, f"{url[:200]} is not a valid URL.", field="url") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES or not parts.hostname:
        raise SourceError(SourceErrorCode.INVALID_URL,
                          f"{url[:200]} is not an http:// or https:// address.", field="url")
    if parts.username or parts.password:
        raise SourceError(SourceErrorCode.INVALID_URL, "Give the URL without a user name or password.", field="url")
    port = port or ALLOWED_SCHEMES[scheme]
    host = parts.hostname
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme=scheme, host=host, port=port, address=resolve(host, port), path=path)


def _pool(target: Target, timeout: float):
    timeouts = urllib3.Timeout(connect=timeout, read=timeout)
    if target.scheme == "https":
        # Connect to the checked address; verify the certificate for the URL's host (SNI too).
        return urllib3.HTTPSConnectionPool(target.address, target.port, timeout=timeouts, retries=False,
                                           server_hostname=target.host, assert_hostname=target.host,
                                           cert_reqs="CERT_REQUIRED", maxsize=1)
    return urllib3.HTTPConnectionPool(target.address, target.port, timeout=timeouts, retries=False, maxsize=1)


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == ALLOWED_SCHEMES[target.scheme] else f"{host}:{target.port}"


def _read(response, *, max_bytes: int, deadline: float, url: str) -> bytes:
    body = bytearray()
    for block in response.stream(64 * 1024):
        body += block
        if len(body) > max_bytes:
            raise SourceError(SourceErrorCode.TOO_LARGE,
                              f"{url} is larger than {max_bytes // 1024:,} KB; it was not read.")
        if time.monotonic() > deadline:
            raise SourceError(SourceErrorCode.FETCH_FAILED, f"{url} took too long to download.")
    return bytes(body)


def fetch(url: str, *, headers: dict | None = None, max_bytes: int | None = None,
          timeout: float | None = None) -> Response:
    """GET `url`, following up to MAX_REDIRECTS redirects, each one checked like the first.
    Any status comes back as a Response (the caller decides what a 404 means); a refused
    address, a network failure, a too-large body or a slow one raises SourceError."""
    max_bytes = max_bytes or settings.SOURCES_MAX_PAGE_BYTES
    timeout = timeout or settings.SOURCES_FETCH_TIMEOUT_SECONDS
    for _ in range(MAX_REDIRECTS + 1):
        target = check_url(url)
        request_headers = {"Host": _host_header(target), "User-Agent": USER_AGENT,
                           # identity: a compressed body could expand far past the size cap in one read
                           "Accept-Encoding": "identity",
                           **(headers or {})}
        pool = _pool(target, timeout)
        try:
            response = pool.urlopen("GET", target.path, headers=request_headers, redirect=False,
                                    preload_content=False, assert_same_host=False, retries=False)
            try:
                location = response.headers.get("Location")
                if response.status in (301, 302, 303, 307, 308) and location:
                    url = urljoin(url, location)
                    continue
                body = _read(response, max_bytes=max_bytes, deadline=time.monotonic() + 3 * timeout, url=url)
                return Response(url=url, status=response.status, headers=dict(response.headers), body=body)
            finally:
                response.release_conn()
        except urllib3.exceptions.HTTPError as exc:
            raise SourceError(SourceErrorCode.FETCH_FAILED, f"{url} could not be fetched: {_reason(exc)}.") from None
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

"""A web site the tests control, served on loopback by http.server in a thread: pages to
change, remove and add, ETag and Last-Modified (answered 304 when they match), robots.txt,
redirects, and a log of every request with its answer."""

from __future__ import annotations

import hashlib
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def page(title: str, body: str, links=()) -> str:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body>"
        f"<nav><ul>{anchors}</ul></nav><main><article><h1>{title}</h1>"
        + "".join(f"<p>{para}</p>" for para in body.split("\n\n"))
        + "</article></main></body></html>"
    )


class LoopbackSite:
    """`pages` maps a path to (body text, content type); `redirects` a path to a Location;
    `validators` False turns ETag and Last-Modified off (the content hash must then tell
    an unchanged page). `log` is [(method, path, status)]."""

    def __init__(self, *, host: str = "127.0.0.1"):
        self.pages: dict[str, tuple[str, str]] = {}
        self.redirects: dict[str, str] = {}
        self.robots = ""
        self.validators = True
        self.log: list[tuple[str, str, int]] = []
        self.modified: dict[str, str] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                site._answer(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.host, self.port = host, self.server.server_address[1]
        self.base = f"http://{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str) -> str:
        return self.base + path

    def set(self, path: str, html: str, content_type: str = "text/html; charset=utf-8") -> None:
        self.pages[path] = (html, content_type)
        self.modified[path] = formatdate(usegmt=True)

    def fetched(self, path: str, status: int | None = None) -> int:
        return sum(1 for _, p, s in self.log if p == path and (status is None or s == status))

    def _answer(self, handler) -> None:
        path = handler.path
        if path == "/robots.txt":
            return self._send(handler, 200 if self.robots else 404, self.robots.encode(), "text/plain")
        if path in self.redirects:
            return self._send(handler, 302, b"", "text/plain", {"Location": self.redirects[path]})
        if path not in self.pages:
            return self._send(handler, 404, b"<html><body>Not found</body></html>", "text/html")
        html, content_type = self.pages[path]
        body = html.encode("utf-8")
        headers = {}
        if self.validators:
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            headers = {"ETag": etag, "Last-Modified": self.modified[path]}
            if handler.headers.get("If-None-Match") == etag:
                return self._send(handler, 304, b"", None, headers)
        return self._send(handler, 200, body, content_type, headers)

    def _send(self, handler, status: int, body: bytes, content_type: str | None, headers=None) -> None:
        self.log.append(("GET", handler.path, status))
        handler.send_response(status)
        if content_type:
            handler.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        if status != 304:
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if status != 304:
            handler.wfile.write(body)


class TricklingServer:
    """A server on loopback that answers every request slowly: it declares a Content-Length
    of `declared` bytes, then sends one byte every `interval` seconds (or, with
    `headers_too`, trickles its headers the same way), until the client goes away."""

    def __init__(self, *, interval: float = 0.5, declared: int = 100_000, headers_too: bool = False):
        import socket

        self.interval, self.declared, self.headers_too = interval, declared, headers_too
        self.stopping = threading.Event()
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.listener.close()

    def url(self, path: str) -> str:
        return self.base + path

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn) -> None:
        with conn:
            try:
                conn.recv(65536)  # the request (one recv holds a test's small GET)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                if self.headers_too:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    head = b"X-Slow: " + b"a" * self.declared
                else:
                    conn.sendall(head + f"Content-Length: {self.declared}\r\n\r\n".encode())
                    head = b"<" * self.declared
                for byte in head:
                    if self.stopping.wait(self.interval):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the client gave up: what the tests want

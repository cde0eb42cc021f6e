"""The `web` kind: a URL and the same-site pages it links to under its path, breadth first,
up to the source's `max_pages`; robots.txt honoured; each page fetched through sources/net.py
(SSRF-checked at every hop) with the last sync's ETag / Last-Modified, so an unchanged page
answers 304 and costs nothing; HTML turned into text by trafilatura."""

from __future__ import annotations

import re
from collections import deque
from urllib import robotparser
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit

from django.conf import settings

from sources import net
from sources.error_codes import SourceErrorCode
from sources.errors import AddressRefused, SourceError
from sources.kinds import Content, Gone, Known, Skipped, Unchanged

ROBOTS_AGENT = "GroundworkBot"
HTML_TYPES = ("text/html", "application/xhtml+xml")
# Other types a page may be, as the document kind documents reads them by.
FILE_TYPES = {"text/plain": ".txt", "text/markdown": ".md", "application/pdf": ".pdf"}


def normalise(url: str) -> str:
    """One spelling per page: no fragment, lower-case scheme and host, "/" for an empty path."""
    url = urldefrag(url.strip())[0]
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query, ""))


def scope_of(url: str) -> tuple[str, str, str]:
    """(scheme, host:port, path prefix): the start page's directory, e.g. /docs/ for
    /docs/index.html and for /docs/."""
    parts = urlsplit(url)
    path = parts.path or "/"
    return parts.scheme, parts.netloc, path[: path.rfind("/") + 1]


def in_scope(url: str, scope: tuple[str, str, str]) -> bool:
    parts = urlsplit(url)
    return (parts.scheme, parts.netloc) == scope[:2] and (parts.path or "/").startswith(scope[2])


class WebKind:
    name = "web"
    label = "Web site"
    description = "the page you give and the pages it links to under the same path"
    options = ()

    def check(self, *, url: str, options: dict) -> tuple[str, dict]:
        try:
            url = normalise(url or "")
        except ValueError:  # urlsplit: "http://[" and the like
            raise SourceError(SourceErrorCode.INVALID_URL, f"{url[:200]} is not a valid URL.", field="url") from None
        net.check_url(url)  # a bad scheme or a refused address: 400 now, not at the first sync
        return url, {}

    def open(self, source, *, known: dict[str, Known]) -> WebReader:
        return WebReader(url=source.url, max_pages=source.max_pages, known=known)


class WebReader:
    def __init__(self, *, url: str, max_pages: int, known: dict[str, Known]):
        self.start, self.max_pages, self.known = url, max_pages, known
        self.scope = scope_of(url)
        self.queue: deque[str] = deque([url])
        self.queued = {url}
        self.bytes_fetched = 0
        self.robots: robotparser.RobotFileParser | None = None

    # --- the interface -------------------------------------------------------------------

    def list_items(self):
        """The start page, then the pages it links to (and they link to), in scope, that
        robots.txt allows, at most max_pages of them."""
        self.robots = self._robots()
        if not self.robots.can_fetch(ROBOTS_AGENT, self.start):
            path = urlsplit(self.start).path or "/"
            raise SourceError(
                SourceErrorCode.ROBOTS_DISALLOWED,
                f"robots.txt of {urlsplit(self.start).netloc} disallows {path} for crawlers, "
                "so Groundwork does not read it. Ask the site's owner to allow it, or upload the "
                "pages yourself.",
            )
        listed = 0
        while self.queue and listed < self.max_pages:
            url = self.queue.popleft()
            if self.robots.can_fetch(ROBOTS_AGENT, url):
                listed += 1
                yield url

    def fetch_item(self, key: str):
        known = self.known.get(key)
        headers = {}
        if known and known.etag:
            headers["If-None-Match"] = known.etag
        if known and known.last_modified:
            headers["If-Modified-Since"] = known.last_modified
        try:
            response = net.fetch(key, headers=headers, max_bytes=settings.SOURCES_MAX_PAGE_BYTES, source_url=self.start)
        except SourceError as exc:
            if key == self.start:
                raise
            if isinstance(exc, AddressRefused):
                return Gone(key, exc.message)
            return Skipped(key, exc.message)
        self.bytes_fetched += len(response.body)
        if response.status == 304 and known is not None:
            self._follow(known.links)
            return Unchanged(
                key,
                etag=response.headers.get("ETag", known.etag),
                last_modified=response.headers.get("Last-Modified", known.last_modified),
            )
        if response.status != 200:
            problem = f"HTTP {response.status} at {key}"
            if key == self.start:
                raise SourceError(
                    SourceErrorCode.FETCH_FAILED,
                    f"{problem}: the source's start page could not be read. Check the URL.",
                )
            return Gone(key, problem) if response.status in (404, 410) else Skipped(key, problem)
        if key == self.start and response.url != key:
            self.scope = scope_of(response.url)  # /docs redirecting to /docs/: its directory
        elif not in_scope(response.url, self.scope):
            return Gone(key, f"{key} redirects outside the source, to {response.url}")
        return self._content(key, response)

    def close(self) -> None:
        pass

    # --- pages ----------------------------------------------------------------------------

    def _robots(self) -> robotparser.RobotFileParser:
        parser = robotparser.RobotFileParser()
        scheme, netloc, _ = self.scope
        url = f"{scheme}://{netloc}/robots.txt"
        try:
            response = net.fetch(url, max_bytes=512 * 1024, source_url=self.start)
        except SourceError as exc:
            if isinstance(exc, AddressRefused):
                raise
            response = None
        if response is None or response.status >= 500:
            parser.parse([])  # unreachable robots.txt: nothing disallowed (as crawlers do for 4xx)
        elif response.status in (401, 403):
            parser.disallow_all = True
        elif response.status >= 400:
            parser.allow_all = True
        else:
            self.bytes_fetched += len(response.body)
            parser.parse(response.body.decode("utf-8", "replace").splitlines())
        return parser

    def _follow(self, links) -> None:
        for link in links:
            if link not in self.queued and in_scope(link, self.scope):
                self.queued.add(link)
                self.queue.append(link)

    def _content(self, key: str, response):
        content_type = (response.headers.get("Content-Type") or "text/html").split(";")[0].strip().lower()
        validators = {
            "etag": response.headers.get("ETag", ""),
            "last_modified": response.headers.get("Last-Modified", ""),
        }
        if content_type in FILE_TYPES:
            name = _name_from_url(response.url)
            extension = FILE_TYPES[content_type]
            return Content(
                key=key,
                url=response.url,
                title=name,
                filename=_filename(name, extension),
                content_type=content_type,
                data=response.body,
                **validators,
            )
        if content_type not in HTML_TYPES:
            return Gone(key, f"{key} is {content_type}, not a page Groundwork reads")
        title, text, links = _page(response.body, response.url)
        links = [link for link in links if in_scope(link, self.scope)]
        self._follow(links)
        title = title or _name_from_url(response.url)
        document = f"# {title}\n\n{response.url}\n\n{text}\n"
        return Content(
            key=key,
            url=response.url,
            title=title[:255],
            filename=_filename(title),
            content_type="text/markdown",
            data=document.encode("utf-8"),
            links=links,
            **validators,
        )


def _page(body: bytes, url: str) -> tuple[str, str, list[str]]:
    """(title, text, same-document-free links) of an HTML page."""
    # Imported when a page is read (trafilatura takes seconds to import): the registry loads
    # this module for the kind's name and label wherever kinds are listed.
    import lxml.html
    import trafilatura

    try:
        tree = lxml.html.document_fromstring(body)
    except (lxml.etree.ParserError, ValueError):
        return "", "", []
    title = " ".join((tree.findtext(".//title") or "").split())
    tree.make_links_absolute(url, resolve_base_href=True)
    links = []
    for element, attribute, link, _ in tree.iterlinks():
        if element.tag == "a" and attribute == "href" and link.lower().startswith(("http://", "https://")):
            links.append(normalise(urljoin(url, link)))
    text = (
        trafilatura.extract(
            body,
            url=url,
            output_format="markdown",
            include_tables=True,
            include_comments=False,
            include_links=False,
            favor_recall=True,
        )
        or ""
    )
    if not text.strip():
        # Too little for the extractor to call it content (a short page): the body's text.
        for element in tree.xpath("//script|//style|//nav|//header|//footer"):
            element.drop_tree()
        body_element = tree.find("body")
        text = " ".join((body_element.text_content() if body_element is not None else "").split())
    return title, text.strip(), list(dict.fromkeys(links))


def _name_from_url(url: str) -> str:
    parts = urlsplit(url)
    path = parts.path.strip("/")
    return f"{parts.hostname}/{path}" if path else parts.hostname or "page"


def _filename(title: str, extension: str = ".md") -> str:
    return re.sub(r"[/\\]+", " - ", title).strip()[:180] + extension


KIND = WebKind()

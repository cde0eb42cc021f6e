"""Server-side request forgery: a source may not read private, loopback, link-local or
reserved addresses unless its host is in SOURCES_ALLOWED_HOSTS; redirects and linked pages
are checked at every hop; the connection goes to the address that was checked."""

import socket

import pytest

from sources import net
from sources.errors import AddressRefused
from sources.tests.site import page


@pytest.mark.parametrize(
    "url, address",
    [
        ("http://127.0.0.1/docs/", "127.0.0.1"),
        ("http://10.0.0.5/wiki/", "10.0.0.5"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://[::1]:8000/", "::1"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
        ("http://192.168.1.20/", "192.168.1.20"),
        ("http://0.0.0.0/", "0.0.0.0"),
        ("http://localhost:8000/", "127.0.0.1"),
    ],
)
def test_refused_addresses_answer_400_naming_the_address(api_a, url, address, settings):
    settings.SOURCES_ALLOWED_HOSTS = []
    response = api_a.post("/api/v1/sources/", {"kind": "web", "url": url})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "address_refused"
    assert "SOURCES_ALLOWED_HOSTS" in error["message"]
    if address != "127.0.0.1" or "localhost" not in url:
        assert address in error["message"]
    assert api_a.get("/api/v1/sources/").json()["results"] == []


@pytest.mark.parametrize(
    "url, code",
    [
        ("ftp://example.com/docs/", "invalid_url"),
        ("file:///etc/passwd", "invalid_url"),
        ("javascript:alert(1)", "invalid_url"),
        ("http://user:secret@example.com/", "invalid_url"),
        ("not a url", "invalid_url"),
        ("http://host.invalid/", "fetch_failed"),
    ],
)
def test_bad_urls_answer_400(api_a, url, code):
    response = api_a.post("/api/v1/sources/", {"kind": "web", "url": url})
    assert response.status_code == 400 and response.json()["error"]["code"] == code, response.content


def test_an_allowed_host_may_be_private(api_a, site, commit_and_run):
    site.set("/wiki/", page("Wiki", "Intranet pages."))
    response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/wiki/")}))
    assert response.status_code == 201
    assert api_a.get(f"/api/v1/sources/{response.json()['id']}/").json()["document_count"] == 1


@pytest.mark.parametrize(
    "location",
    ["http://10.0.0.5/wiki/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/", "http://localhost/x"],
)
def test_a_start_page_redirecting_to_a_private_address_fails_the_sync(api_a, site, commit_and_run, location):
    site.redirects["/go/"] = location
    response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/go/")}))
    assert response.status_code == 201
    source = api_a.get(f"/api/v1/sources/{response.json()['id']}/").json()
    assert source["status"] == "failed" and source["document_count"] == 0
    assert "SOURCES_ALLOWED_HOSTS" in source["error"]


def test_a_linked_page_redirecting_to_a_private_address_is_not_read(api_a, site, commit_and_run):
    site.set("/docs/", page("Docs", "The index.", ["/docs/meta"]))
    site.redirects["/docs/meta"] = "http://169.254.169.254/latest/meta-data/"
    response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/docs/")}))
    source = api_a.get(f"/api/v1/sources/{response.json()['id']}/").json()
    assert source["status"] == "idle" and source["document_count"] == 1
    assert source["last_sync"]["added"] == 1


def test_links_to_other_hosts_are_not_followed(api_a, site, commit_and_run, settings):
    other = f"http://localhost:{site.port}/docs/other"  # the same server under a name not allowed
    site.set("/docs/", page("Docs", "The index.", [other]))
    site.set("/docs/other", page("Other", "Another host's page."))
    commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/docs/")}))
    assert site.fetched("/docs/other") == 0


def test_the_connection_goes_to_the_checked_address(site, settings, monkeypatch):
    """DNS rebinding: the name is resolved once, checked, and that address is connected to;
    a second lookup that would answer a private address is never made."""
    site.set("/p", page("P", "Pinned."))
    settings.SOURCES_ALLOWED_HOSTS = ["public.example"]
    real, lookups = socket.getaddrinfo, []

    def getaddrinfo(host, *args, **kwargs):
        if host != "public.example":
            return real(host, *args, **kwargs)
        lookups.append(host)  # the first answer is the site; a later one would be elsewhere
        address = "127.0.0.1" if len(lookups) == 1 else "10.9.9.9"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, site.port))]

    monkeypatch.setattr(net.socket, "getaddrinfo", getaddrinfo)
    response = net.fetch(f"http://public.example:{site.port}/p")
    assert response.status == 200 and b"Pinned." in response.body
    assert lookups == ["public.example"]
    assert site.log[-1] == ("GET", "/p", 200)


def test_a_host_with_any_private_address_is_refused(settings, monkeypatch):
    settings.SOURCES_ALLOWED_HOSTS = []
    monkeypatch.setattr(
        net.socket,
        "getaddrinfo",
        lambda *a, **k: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 80)),
        ],
    )
    with pytest.raises(AddressRefused) as refused:
        net.check_url("http://mixed.example/")
    assert "10.1.2.3" in refused.value.message and "private" in refused.value.message


def test_a_page_larger_than_the_cap_is_not_read(site, settings):
    settings.SOURCES_MAX_PAGE_BYTES = 10_000
    site.set("/big", page("Big", "word " * 5000))
    from sources.errors import SourceError

    with pytest.raises(SourceError) as error:
        net.fetch(site.url("/big"))
    assert error.value.code == "too_large"


@pytest.mark.parametrize("kind", ["web", "git"])
@pytest.mark.parametrize(
    "url",
    [
        "http://[",
        "http://[::1",
        "http://example.com:99999/",
        "http://exa mple.com/",
        "http://\x01host/",
        "http://" + "a" * 70 + ".example/",
        "http://%00/",
        "https://[fe80::1%25eth0]/",
        "http://0x7f000001/",
        "http://2130706433/",
        "git://[::1]:9418/r.git",
        "http:///nohost",
        "//example.com/x",
    ],
)
def test_hostile_urls_are_a_400_never_a_500(api_a, kind, url, settings):
    settings.SOURCES_ALLOWED_HOSTS = []
    response = api_a.post("/api/v1/sources/", {"kind": kind, "url": url})
    assert response.status_code == 400, (url, response.content)
    assert response.json()["error"]["code"] in ("invalid_url", "address_refused", "fetch_failed")


# --- SOURCES_ALLOWED_HOSTS and ports ---------------------------------------------------------


@pytest.fixture
def second_site(site):
    """Another loopback server on another port (the same allowed host, 127.0.0.1)."""
    from sources.tests.site import LoopbackSite

    with LoopbackSite() as other:
        assert other.port != site.port
        yield other


def test_a_redirect_to_another_port_of_a_bare_allowed_host_is_refused(api_a, site, second_site, commit_and_run):
    second_site.set("/secret/", page("Secret", "The other service's admin token is hunter2."))
    site.redirects["/go/"] = second_site.url("/secret/")
    response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/go/")}))
    assert response.status_code == 201
    source = api_a.get(f"/api/v1/sources/{response.json()['id']}/").json()
    assert source["status"] == "failed" and source["document_count"] == 0
    assert f"127.0.0.1:{second_site.port}" in source["error"] and "SOURCES_ALLOWED_HOSTS" in source["error"]
    assert second_site.fetched("/secret/") == 0
    with pytest.raises(AddressRefused):
        net.fetch(site.url("/go/"))  # the fetcher alone: the URL's own port only


def test_a_bare_allowed_host_allows_the_source_urls_own_port_and_80_and_443(site, settings):
    assert net.host_allowed("127.0.0.1", site.port, source_port=site.port)
    assert net.host_allowed("127.0.0.1", 80, source_port=site.port)
    assert net.host_allowed("127.0.0.1", 443, source_port=site.port)
    assert not net.host_allowed("127.0.0.1", site.port + 1, source_port=site.port)
    assert not net.host_allowed("10.0.0.1", 80, source_port=80)


def test_host_port_entries_allow_that_port_only(api_a, site, second_site, commit_and_run, settings):
    second_site.set("/wiki/", page("Wiki", "Intranet pages on the second port."))
    settings.SOURCES_ALLOWED_HOSTS = [f"127.0.0.1:{second_site.port}"]
    response = commit_and_run(lambda: api_a.post("/api/v1/sources/", {"kind": "web", "url": second_site.url("/wiki/")}))
    assert response.status_code == 201
    assert api_a.get(f"/api/v1/sources/{response.json()['id']}/").json()["document_count"] == 1
    # The first server's port is not listed: refused when the source is added.
    refused = api_a.post("/api/v1/sources/", {"kind": "web", "url": site.url("/wiki/")})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "address_refused"
    assert f"127.0.0.1:{site.port}" in refused.json()["error"]["message"]
    # Both ports listed: the redirect from one to the other is followed.
    settings.SOURCES_ALLOWED_HOSTS = [f"127.0.0.1:{site.port}", f"127.0.0.1:{second_site.port}"]
    site.redirects["/go/"] = second_site.url("/wiki/")
    assert net.fetch(site.url("/go/")).url == second_site.url("/wiki/")


@pytest.mark.parametrize(
    "entry, host, port, allowed",
    [
        ("wiki.corp:8443", "wiki.corp", 8443, True),
        ("wiki.corp:8443", "wiki.corp", 443, False),
        ("[::1]:8000", "::1", 8000, True),
        ("[::1]:8000", "::1", 8001, False),
        ("::1", "::1", 443, True),
        ("[::1]", "::1", 80, True),
        ("WIKI.corp", "wiki.corp", 80, True),
    ],
)
def test_allowed_host_entries(settings, entry, host, port, allowed):
    settings.SOURCES_ALLOWED_HOSTS = [entry.lower()]
    assert net.host_allowed(host, port, source_port=9999) is allowed

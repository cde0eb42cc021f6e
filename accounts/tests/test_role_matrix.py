"""The role matrix: every role and key scope × every action on every
surface (REST, pages, websocket, /v1), against the one table in accounts/permissions.py,
through the real application, database, Redis and a model server on loopback.

Six principals: owner, admin, member and viewer sessions; read and write API keys. What each
may do is `RULES`; a refusal is 403 {"error": {"code": "forbidden"}} on the API, the 403 page
on a page, close 4403 / chat.error `forbidden` on the websocket.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLPattern, URLResolver, get_resolver

from accounts import services
from accounts.models import ApiKey, KeyScope, Membership, Role
from accounts.permissions import GRANTEE_LABELS, GRANTEES, RULES, Action, Grant, principal_may
from accounts.tests.factories import add_member, make_api_key, make_user
from core.tenancy import account_context
from documents.models import Document
from documents.services import document_upload

KEY_GRANTEES = ("key:read", "key:write")
ROLES = ("owner", "admin", "member", "viewer")
ALL = ROLES + KEY_GRANTEES


# --- principals ---------------------------------------------------------------------------------


def _key(account, scope: str) -> str:
    with account_context(account):
        _, raw = services.api_key_create(account=account, actor=account.test_owner, name=f"{scope} key", scope=scope)
    return raw


class Caller:
    """One principal of account A, calling the API as itself (a session with CSRF checks off,
    as the dashboard's JavaScript sends it, or a Bearer key)."""

    def __init__(self, grantee: str, account, client):
        self.grantee, self.account, self.client = grantee, account, client
        self.headers = {}
        self.user = None
        if grantee in KEY_GRANTEES:
            self.headers = {"HTTP_AUTHORIZATION": f"Bearer {_key(account, grantee.split(':')[1])}"}
        else:
            self.user = account.test_owner if grantee == "owner" else add_member(account, role=grantee)
            client.force_login(self.user)

    def may(self, action, obj=None) -> bool:
        with account_context(self.account):
            if self.user is not None:
                principal = Membership.objects.for_account(self.account).get(user=self.user)
            else:
                principal = ApiKey.objects.for_account(self.account).get(name=f"{self.grantee.split(':')[1]} key")
        return principal_may(principal, action, obj)

    def get(self, path, **kw):
        return self.client.get(path, **self.headers, **kw)

    def post(self, path, data=None, **kw):
        return self.client.post(path, data or {}, **self.headers, **kw)

    def post_json(self, path, data):
        return self.client.post(path, data, content_type="application/json", **self.headers)

    def delete(self, path):
        return self.client.delete(path, **self.headers)


@pytest.fixture
def document_of(account_a):
    """A document uploaded by `user` (None: by an integration) into account A; not ingested."""

    def make(user=None, name="notes.txt", text=None) -> Document:
        data = (text or f"{name}: the holiday policy is twenty-eight days.").encode()
        with account_context(account_a):
            document, _ = document_upload(
                account=account_a, actor=user, upload=SimpleUploadedFile(name, data, content_type="text/plain")
            )
        return document

    return make


def _assert_refused_json(response):
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "forbidden"
    assert response.json()["error"]["message"]


def _assert_allowed(response):
    assert response.status_code != 403 and response.status_code < 500, (response.status_code, response.content)


# --- the table itself ---------------------------------------------------------------------------


def test_the_table_covers_every_action_and_principal():
    assert set(RULES) == set(Action)
    for action, grants in RULES.items():
        assert set(grants) == set(GRANTEES), action
    # The roles in words: viewers read and chat; members also upload and delete what
    # they uploaded; admins manage documents, reindexing, keys and members; owners also
    # billing and deleting the account. Read keys: chat and search; write keys: also upload,
    # delete, reindex.
    for grantee in ALL:
        for action in (Action.DOCUMENT_READ, Action.SEARCH, Action.CHAT):
            assert RULES[action][grantee] is Grant.ALL
    assert RULES[Action.DOCUMENT_UPLOAD]["viewer"] is Grant.NONE
    assert RULES[Action.DOCUMENT_DELETE]["member"] is Grant.OWN
    assert RULES[Action.DOCUMENT_REINDEX]["member"] is Grant.NONE
    for action in (Action.KEYS_MANAGE, Action.MEMBERS_MANAGE, Action.AUDIT_VIEW):
        assert [RULES[action][g] is Grant.ALL for g in ALL] == [True, True, False, False, False, False]
    for action in (Action.BILLING_MANAGE, Action.ACCOUNT_DELETE):
        assert [RULES[action][g] is Grant.ALL for g in ALL] == [True, False, False, False, False, False]
    for action in (Action.DOCUMENT_UPLOAD, Action.DOCUMENT_DELETE, Action.DOCUMENT_REINDEX, Action.ACCOUNT_REINDEX):
        assert RULES[action]["key:read"] is Grant.NONE and RULES[action]["key:write"] is Grant.ALL


def test_the_manuals_table_is_the_code_table():
    page = (Path(__file__).resolve().parents[2] / "docs" / "security" / "permissions.md").read_text()
    section = page.split("# Who may do what", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    header = next(line for line in section.splitlines() if line.startswith("| action"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == [GRANTEE_LABELS[g] for g in GRANTEES]
    words = {Grant.ALL: "yes", Grant.OWN: "own", Grant.NONE: "—"}
    seen = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        action = Action(re.match(r"`([^`]+)`", cells[0]).group(1))
        seen.add(action)
        assert cells[1:] == [words[RULES[action][g]] for g in GRANTEES], action
    assert seen == set(Action)


def test_every_api_endpoint_checks_the_table():
    """Every view under /api/v1/ and /v1/ carries a RoleAllows permission (accounts.permissions
    .allows), or is one of the few that decide otherwise, named here with why."""
    from accounts.permissions import RoleAllows

    decided_elsewhere = {
        "CurrentAccountView",  # who am I: every principal may ask
        "AuditListView",  # audit/ stands below accounts: require_manager (owners and admins, no keys)
    }
    missing = []

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                path = prefix + str(p.pattern)
                view = getattr(p.callback, "view_class", None) or getattr(p.callback, "cls", None)
                if not path.startswith(("api/v1/", "v1/")) or view is None:
                    continue
                perms = getattr(view, "permission_classes", [])
                if view.__name__ not in decided_elsewhere and not any(issubclass(c, RoleAllows) for c in perms):
                    missing.append(f"{path} ({view.__name__})")

    walk(get_resolver().url_patterns)
    assert not missing, "add permission_classes = [allows(Action.…)] (accounts/permissions.py) to: " + ", ".join(
        missing
    )


# --- REST ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("grantee", ALL)
def test_rest_reads(grantee, account_a, client, document_of):
    caller = Caller(grantee, account_a, client)
    document = document_of(account_a.test_owner)
    for path in (
        "/api/v1/documents/",
        f"/api/v1/documents/{document.pk}/",
        "/api/v1/credits/",
        "/api/v1/conversations/",
        "/api/v1/reindex/",
    ):
        assert caller.get(path).status_code == 200, path
    audit = caller.get("/api/v1/audit/")
    if caller.may(Action.AUDIT_VIEW) and grantee not in KEY_GRANTEES:
        assert audit.status_code == 200
    else:
        _assert_refused_json(audit)


@pytest.mark.parametrize("grantee", ALL)
def test_rest_upload(grantee, account_a, client):
    caller = Caller(grantee, account_a, client)
    upload = SimpleUploadedFile("new.txt", f"uploaded by {grantee}".encode(), content_type="text/plain")
    response = caller.post("/api/v1/documents/", {"file": upload})
    if caller.may(Action.DOCUMENT_UPLOAD):
        assert response.status_code == 202, response.content
    else:
        _assert_refused_json(response)
        with account_context(account_a):
            assert not Document.objects.for_account(account_a).exists()


@pytest.mark.parametrize("grantee", ALL)
def test_rest_delete_someone_elses_document(grantee, account_a, client, document_of):
    caller = Caller(grantee, account_a, client)
    theirs = document_of(make_user() if grantee == "owner" else account_a.test_owner, name="theirs.txt")
    response = caller.delete(f"/api/v1/documents/{theirs.pk}/")
    if grantee in ("owner", "admin", "key:write"):
        assert response.status_code == 202
    else:  # member: only their own; viewer and read key: none
        _assert_refused_json(response)
        with account_context(account_a):
            assert Document.objects.for_account(account_a).get(pk=theirs.pk).status != "deleting"


@pytest.mark.parametrize("grantee", ROLES)
def test_rest_delete_own_document(grantee, account_a, client, document_of):
    caller = Caller(grantee, account_a, client)
    mine = document_of(caller.user, name="mine.txt")
    response = caller.delete(f"/api/v1/documents/{mine.pk}/")
    if grantee == "viewer":
        _assert_refused_json(response)
    else:
        assert response.status_code == 202  # member deletes own document: yes


def test_member_deletes_own_document_but_not_anothers(account_a, client, document_of):
    caller = Caller("member", account_a, client)
    mine, theirs = document_of(caller.user, name="mine.txt"), document_of(account_a.test_owner, name="theirs.txt")
    assert caller.delete(f"/api/v1/documents/{mine.pk}/").status_code == 202
    _assert_refused_json(caller.delete(f"/api/v1/documents/{theirs.pk}/"))


def test_viewer_uploads_403(account_a, client):
    caller = Caller("viewer", account_a, client)
    response = caller.post(
        "/api/v1/documents/", {"file": SimpleUploadedFile("v.txt", b"no", content_type="text/plain")}
    )
    _assert_refused_json(response)


@pytest.mark.parametrize("grantee", ALL)
def test_rest_reindex(grantee, account_a, client, document_of):
    caller = Caller(grantee, account_a, client)
    document = document_of(account_a.test_owner)
    one = caller.post(f"/api/v1/documents/{document.pk}/reindex/")
    every = caller.post("/api/v1/reindex/")
    if caller.may(Action.DOCUMENT_REINDEX):
        _assert_allowed(one)
        _assert_allowed(every)
    else:
        _assert_refused_json(one)
        _assert_refused_json(every)


@pytest.mark.parametrize("grantee", ALL)
def test_rest_search_and_chat(grantee, account_a, client, fake_llm):
    caller = Caller(grantee, account_a, client)
    assert caller.post_json("/api/v1/search/", {"query": "holiday"}).status_code == 200
    response = caller.post_json("/api/v1/chat/", {"message": "What is our holiday policy?"})
    assert response.status_code == 200, response.content
    assert "answer" in response.json()


@pytest.mark.parametrize("grantee", ALL)
def test_an_account_b_principal_gets_404_not_403_for_account_as_document(
    grantee, account_a, account_b, client, document_of
):
    document = document_of(account_a.test_owner)
    caller = Caller(grantee, account_b, client)
    assert caller.get(f"/api/v1/documents/{document.pk}/").status_code == 404
    # Who may delete (some) documents learns nothing from another account's id: 404. Who may
    # delete none is refused before any id is looked up, the same for every id.
    expected = 404 if RULES[Action.DOCUMENT_DELETE][grantee] is not Grant.NONE else 403
    assert caller.delete(f"/api/v1/documents/{document.pk}/").status_code == expected
    assert caller.post(f"/api/v1/documents/{document.pk}/reindex/").status_code == (
        404 if RULES[Action.DOCUMENT_REINDEX][grantee] is Grant.ALL else 403
    )
    with account_context(account_a):
        assert Document.objects.for_account(account_a).get(pk=document.pk).status != "deleting"


# --- /v1 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["read", "write"])
def test_v1_chat_with_either_scope(scope, account_a, client, fake_llm):
    caller = Caller(f"key:{scope}", account_a, client)
    assert caller.get("/v1/models").status_code == 200
    response = caller.post_json(
        "/v1/chat/completions",
        {"model": "groundwork", "messages": [{"role": "user", "content": "What is our holiday policy?"}]},
    )
    assert response.status_code == 200, response.content


# --- pages --------------------------------------------------------------------------------------


def _refused_page(response):
    assert response.status_code == 403
    assert "Not allowed" in response.content.decode() or "Only owners and admins" in response.content.decode()


@pytest.mark.parametrize("grantee", ROLES)
def test_pages_read(grantee, account_a, client, document_of):
    caller = Caller(grantee, account_a, client)
    document = document_of(account_a.test_owner)
    for path in ("/", "/documents/", f"/documents/{document.pk}/", "/documents/status/", "/chat/", "/credits/"):
        assert caller.get(path).status_code == 200, path
    team = caller.get("/team/")
    assert team.status_code == (200 if caller.may(Action.MEMBERS_MANAGE) else 403)


@pytest.mark.parametrize("grantee", ROLES)
def test_pages_show_only_the_controls_the_role_may_use(grantee, account_a, client, document_of):
    caller = Caller(grantee, account_a, client)
    theirs = document_of(account_a.test_owner, name="theirs.txt")
    mine = document_of(caller.user, name="mine.txt") if grantee != "owner" else theirs
    kb = caller.get("/documents/").content.decode()
    assert ('id="upload-form"' in kb) == caller.may(Action.DOCUMENT_UPLOAD)
    assert ("Reindex all documents" in kb) == caller.may(Action.ACCOUNT_REINDEX)
    assert (f'aria-label="Delete {theirs.name}"' in kb) == caller.may(Action.DOCUMENT_DELETE, theirs)
    assert (f'aria-label="Delete {mine.name}"' in kb) == caller.may(Action.DOCUMENT_DELETE, mine)
    page = caller.get(f"/documents/{theirs.pk}/").content.decode()
    assert (f"/documents/{theirs.pk}/delete/" in page) == caller.may(Action.DOCUMENT_DELETE, theirs)
    assert (f"/documents/{theirs.pk}/reindex/" in page) == caller.may(Action.DOCUMENT_REINDEX)
    nav = caller.get("/").content.decode()
    assert ('href="/team/"' in nav) == caller.may(Action.MEMBERS_MANAGE)
    status = caller.get("/documents/status/").json()["documents"]
    assert {d["id"]: d["may_delete"] for d in status}[theirs.pk] == caller.may(Action.DOCUMENT_DELETE, theirs)


@pytest.mark.parametrize("grantee", ROLES)
def test_pages_document_writes(grantee, account_a, client, document_of):
    caller = Caller(grantee, account_a, client)
    theirs = document_of(make_user() if grantee == "owner" else account_a.test_owner, name="theirs.txt")
    upload = caller.post(
        "/documents/upload/", {"file": SimpleUploadedFile("p.txt", b"page upload", content_type="text/plain")}
    )
    json_upload = caller.post(
        "/documents/upload/",
        {"file": SimpleUploadedFile("q.txt", b"json upload", content_type="text/plain")},
        HTTP_ACCEPT="application/json",
    )
    if caller.may(Action.DOCUMENT_UPLOAD):
        assert upload.status_code == 302 and json_upload.status_code == 202
    else:
        _refused_page(upload)
        _assert_refused_json(json_upload)
    reindex = caller.post(f"/documents/{theirs.pk}/reindex/")
    reindex_all = caller.post("/documents/reindex/")
    for response in (reindex, reindex_all):
        if caller.may(Action.DOCUMENT_REINDEX):
            assert response.status_code == 302
        else:
            _refused_page(response)
    delete = caller.post(f"/documents/{theirs.pk}/delete/")
    if caller.may(Action.DOCUMENT_DELETE, theirs):
        assert delete.status_code == 302
    else:
        _refused_page(delete)
    if grantee == "member":  # but their own: yes
        mine = document_of(caller.user, name="mine.txt")
        assert caller.post(f"/documents/{mine.pk}/delete/").status_code == 302
        with account_context(account_a):
            assert Document.objects.for_account(account_a).get(pk=mine.pk).status == "deleting"


@pytest.mark.parametrize("grantee", ROLES)
def test_pages_team_writes(grantee, account_a, client):
    caller = Caller(grantee, account_a, client)
    invite = caller.post("/team/invite/", {"email": f"new-{grantee}@example.test", "role": "viewer"})
    key = caller.post("/team/api-keys/", {"name": "zap", "scope": "read"})
    other = add_member(account_a, role=Role.VIEWER)
    with account_context(account_a):
        other_membership = Membership.objects.for_account(account_a).get(user=other)
    role = caller.post(f"/team/members/{other_membership.pk}/role/", {"role": "member"})
    remove = caller.post(f"/team/members/{other_membership.pk}/remove/")
    with account_context(account_a):
        keys = ApiKey.objects.for_account(account_a).filter(name="zap").count()
    if caller.may(Action.MEMBERS_MANAGE):
        assert invite.status_code == role.status_code == remove.status_code == 302
    else:
        for response in (invite, role, remove):
            _refused_page(response)
    if caller.may(Action.KEYS_MANAGE):
        assert key.status_code == 302 and keys == 1
    else:
        _refused_page(key)
        assert keys == 0


# --- the Team page's rules ----------------------------------------------------------------------


def _membership(account, user) -> Membership:
    with account_context(account):
        return Membership.objects.for_account(account).get(user=user)


def test_an_admin_cannot_make_an_owner_nor_touch_one(account_a, owner_a, client):
    admin = add_member(account_a, role=Role.ADMIN)
    member = add_member(account_a, role=Role.MEMBER)
    client.force_login(admin)
    page = client.get("/team/").content.decode()
    owner_row = page.split(owner_a.email, 1)[1].split("</tr>", 1)[0]
    assert "<select" not in owner_row and "Remove" not in owner_row  # no controls on an owner's row
    assert '<option value="owner"' not in page  # neither for members nor in the invitation form
    assert '<option value="viewer"' in page
    _refused_page(client.post(f"/team/members/{_membership(account_a, member).pk}/role/", {"role": "owner"}))
    _refused_page(client.post(f"/team/members/{_membership(account_a, owner_a).pk}/role/", {"role": "member"}))
    _refused_page(client.post(f"/team/members/{_membership(account_a, owner_a).pk}/remove/"))
    _refused_page(client.post("/team/invite/", {"email": "boss@example.test", "role": "owner"}))
    assert _membership(account_a, owner_a).role == Role.OWNER
    assert _membership(account_a, member).role == Role.MEMBER


def test_nobody_raises_their_own_role(account_a):
    admin = add_member(account_a, role=Role.ADMIN)
    with account_context(account_a), pytest.raises(services.AccountError) as refused:
        services.member_change_role(
            account=account_a, actor=admin, membership_id=_membership(account_a, admin).pk, role=Role.OWNER
        )
    assert refused.value.code == "forbidden" and refused.value.status == 403
    # Stepping down is allowed.
    with account_context(account_a):
        services.member_change_role(
            account=account_a, actor=admin, membership_id=_membership(account_a, admin).pk, role=Role.VIEWER
        )
    assert _membership(account_a, admin).role == Role.VIEWER


def test_the_last_owner_can_never_be_demoted_or_removed(account_a, owner_a):
    mine = _membership(account_a, owner_a).pk
    for change in (
        lambda: services.member_change_role(account=account_a, actor=owner_a, membership_id=mine, role=Role.ADMIN),
        lambda: services.member_remove(account=account_a, actor=owner_a, membership_id=mine),
    ):
        with account_context(account_a), pytest.raises(services.AccountError) as refused:
            change()
        assert refused.value.code == "last_owner"
    assert _membership(account_a, owner_a).role == Role.OWNER


def test_an_owner_makes_a_viewer_and_the_change_is_audited(account_a, owner_a, client_a):
    member = add_member(account_a, role=Role.MEMBER)
    membership = _membership(account_a, member)
    assert client_a.post(f"/team/members/{membership.pk}/role/", {"role": "viewer"}).status_code == 302
    assert _membership(account_a, member).role == Role.VIEWER
    from audit.models import AuditEntry

    with account_context(account_a):
        entry = AuditEntry.objects.for_account(account_a).get(action="member.role_change")
    assert entry.detail == {"from": "member", "to": "viewer"}
    # The viewer may read and chat, not upload.
    client_a.force_login(member)
    assert client_a.get("/documents/").status_code == 200
    _refused_page(client_a.post("/documents/upload/", {"file": SimpleUploadedFile("x.txt", b"x")}))


def test_invite_as_viewer_and_join_as_viewer(account_a, owner_a, client_a, client):
    assert client_a.post("/team/invite/", {"email": "vic@example.test", "role": "viewer"}).status_code == 302
    from accounts.models import Invitation

    with account_context(account_a):
        invitation = Invitation.objects.for_account(account_a).get(email="vic@example.test")
    assert invitation.role == Role.VIEWER
    vic = make_user("vic@example.test")
    membership = services.invitation_accept(invitation=invitation, user=vic, via_link=True)
    assert membership.role == Role.VIEWER


# --- API keys' scope ----------------------------------------------------------------------------


def test_the_scope_is_chosen_on_the_team_page_and_shown(account_a, client_a):
    client_a.post("/team/api-keys/", {"name": "reader", "scope": "read"})
    client_a.post("/team/api-keys/", {"name": "writer", "scope": "write"})
    with account_context(account_a):
        scopes = dict(ApiKey.objects.for_account(account_a).values_list("name", "scope"))
    assert scopes == {"reader": "read", "writer": "write"}
    page = client_a.get("/team/").content.decode()
    assert 'data-scope="read"' in page and 'data-scope="write"' in page
    assert 'name="scope"' in page


def test_a_bad_scope_is_refused_and_no_key_is_made(account_a, owner_a):
    with account_context(account_a), pytest.raises(services.AccountError) as refused:
        services.api_key_create(account=account_a, actor=owner_a, name="k", scope="admin")
    assert refused.value.code == "invalid_scope"


def test_operator_keys_keep_the_write_scope(account_a, client):
    raw = make_api_key(account_a)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.get("/api/v1/account/", **headers).json()["scope"] == KeyScope.WRITE
    upload = SimpleUploadedFile("op.txt", b"operator upload", content_type="text/plain")
    assert client.post("/api/v1/documents/", {"file": upload}, **headers).status_code == 202


def test_the_account_endpoint_names_role_or_scope(account_a, client):
    reader = Caller("key:read", account_a, client)
    assert reader.get("/api/v1/account/").json()["scope"] == "read"
    viewer = Caller("viewer", account_a, client)
    body = viewer.get("/api/v1/account/").json()
    assert body["role"] == "viewer" and body["scope"] is None


# --- websocket ----------------------------------------------------------------------------------


def _socket_for(grantee, account, client):
    from chat.tests.test_websocket import Socket, _session_headers

    if grantee in KEY_GRANTEES:
        return Socket([(b"authorization", f"Bearer {_key(account, grantee.split(':')[1])}".encode())])
    user = account.test_owner if grantee == "owner" else add_member(account, role=grantee)
    return Socket(_session_headers(client, user, "http://localhost:8000"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("grantee", ALL)
def test_websocket_chat_for_every_role_and_scope(grantee, account_a, client, fake_llm):
    socket = _socket_for(grantee, account_a, client)
    assert socket.connect()[0]
    frames = socket.ask("What is our holiday policy?")
    assert frames[-1]["type"] == "chat.done", frames
    socket.close()


@pytest.fixture
def chat_refused_to(monkeypatch):
    """The table with CHAT taken from some grantees: proves the websocket asks the table (today
    every role and scope chats, so nothing else can show the refusal)."""

    def take(*grantees):
        monkeypatch.setitem(RULES, Action.CHAT, {**RULES[Action.CHAT], **{g: Grant.NONE for g in grantees}})

    return take


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("grantee", ["viewer", "key:read"])
def test_websocket_handshake_refused_4403_when_the_table_says_no(grantee, account_a, client, fake_llm, chat_refused_to):
    chat_refused_to(grantee)
    socket = _socket_for(grantee, account_a, client)
    socket.connect()
    assert socket.closed_with() == {"type": "websocket.close", "code": 4403}


@pytest.mark.django_db(transaction=True)
def test_websocket_message_rechecks_the_role_chat_error_forbidden_then_4403(
    account_a, client, fake_llm, chat_refused_to
):
    socket = _socket_for("viewer", account_a, client)
    assert socket.connect()[0]
    chat_refused_to("viewer")  # e.g. a role change the socket's notice has not reached yet
    frames = socket.ask("What is our holiday policy?")
    assert frames[-1]["type"] == "chat.error" and frames[-1]["code"] == "forbidden", frames
    assert socket.closed_with()["code"] == 4403


@pytest.mark.django_db(transaction=True)
def test_rest_and_v1_chat_refused_forbidden_when_the_table_says_no(account_a, client, fake_llm, chat_refused_to):
    chat_refused_to("key:read", "viewer")
    reader = Caller("key:read", account_a, client)
    _assert_refused_json(
        reader.post_json(
            "/v1/chat/completions", {"model": "groundwork", "messages": [{"role": "user", "content": "hi"}]}
        )
    )
    _assert_refused_json(reader.post_json("/api/v1/chat/", {"message": "hi"}))
    viewer = Caller("viewer", account_a, client)
    _assert_refused_json(viewer.post_json("/api/v1/chat/", {"message": "hi"}))

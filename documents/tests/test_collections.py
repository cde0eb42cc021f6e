"""Collections: a restricted collection's documents never reach a
principal without access, on any surface — REST documents, search, chat (REST, SSE, /v1,
websocket) sources and citations, document and knowledge base pages, and the app role's own
SQL inside that principal's context — while owners, admins, principals given access and
system jobs see them. Granting access shows them; revoking hides them again."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import connection

from accounts.models import ApiKey, Role
from accounts.tests.factories import add_member, make_api_key, make_user
from audit.models import AuditEntry
from chat.models import Message
from core import tenancy
from core.tenancy import account_context
from documents.models import Chunk, Collection, Document
from documents.services import collection_create, collection_update

pytestmark = pytest.mark.django_db(transaction=True)  # sockets, streams and raw SQL read committed rows

SECRET = (
    "# Nightingale\n\nProject Nightingale will acquire Zephyrine Robotics for forty-two million "
    "euros. The Nightingale board meets in Oslo every quarter."
)
PUBLIC = "# Kitchen\n\nThe office kitchen fridge is emptied every Friday afternoon. Label your lunch."
QUESTION = "What will Project Nightingale acquire, Zephyrine Robotics for how many euros?"


def _auth(raw_key):
    return {"HTTP_AUTHORIZATION": f"Bearer {raw_key}"}


def _key(account, raw):
    from accounts.keys import hash_key

    with account_context(account):
        return ApiKey.objects.for_account(account).get(key_hash=hash_key(raw))


@pytest.fixture
def world(account_a, owner_a, fake_llm, upload_and_ingest):
    """Account A: General with a public document, restricted "Board" with a secret one; a
    member and a key without access, a member and a key with access, an admin."""
    member = add_member(account_a, make_user("member@acme.test"))
    insider = add_member(account_a, make_user("insider@acme.test"))
    admin = add_member(account_a, make_user("admin@acme.test"), role=Role.ADMIN)
    outsider_key, insider_key = make_api_key(account_a, "outsider"), make_api_key(account_a, "insider")
    with account_context(account_a, user=owner_a):
        board = collection_create(
            account=account_a,
            actor=owner_a,
            name="Board",
            restricted=True,
            user_ids=[insider.pk],
            api_key_ids=[_key(account_a, insider_key).pk],
        )
    public = upload_and_ingest(account_a, "kitchen.md", PUBLIC.encode(), "text/markdown")
    secret = upload_and_ingest(account_a, "nightingale.md", SECRET.encode(), "text/markdown")
    with tenancy.dangerously_bypass_tenancy(reason="test: file the secret under Board"):
        Document.all_accounts.filter(pk=secret.pk).update(collection=board)
        Chunk.all_accounts.filter(document_id=secret.pk).update(collection=board)
    fake_llm.answer = "Zephyrine Robotics, for forty-two million euros [Document 1]."
    return dict(
        account=account_a,
        owner=owner_a,
        member=member,
        insider=insider,
        admin=admin,
        board=board,
        outsider_key=outsider_key,
        insider_key=insider_key,
        public=public,
        secret=secret,
    )


def _login(client, user):
    client.force_login(user)
    return {}


# --- REST: documents, collections, search --------------------------------------------------


def _document_ids(client, headers):
    response = client.get("/api/v1/documents/", **headers)
    assert response.status_code == 200, response.content
    return {d["id"] for d in response.json()["results"]}


def _who(client, world, name):
    if name.endswith("_key"):
        return _auth(world[name])
    return _login(client, world[name])


@pytest.mark.parametrize(
    "who, sees",
    [
        ("member", False),
        ("outsider_key", False),
        ("insider", True),
        ("insider_key", True),
        ("owner", True),
        ("admin", True),
    ],
)
def test_rest_documents_and_collections(client, world, who, sees):
    headers = _who(client, world, who)
    secret, board = world["secret"], world["board"]
    assert world["public"].pk in _document_ids(client, headers)
    assert (secret.pk in _document_ids(client, headers)) is sees
    detail = client.get(f"/api/v1/documents/{secret.pk}/", **headers)
    assert detail.status_code == (200 if sees else 404)
    if sees:
        assert detail.json()["collection"] == {"id": board.pk, "name": "Board"}
    names = {c["name"] for c in client.get("/api/v1/collections/", **headers).json()["results"]}
    assert names == ({"General", "Board"} if sees else {"General"})
    assert client.get(f"/api/v1/collections/{board.pk}/", **headers).status_code == (200 if sees else 404)
    listed = client.get(f"/api/v1/documents/?collection={board.pk}", **headers)
    assert listed.status_code == (200 if sees else 404)


@pytest.mark.parametrize(
    "who, sees", [("member", False), ("outsider_key", False), ("insider_key", True), ("owner", True)]
)
def test_search_never_returns_a_restricted_chunk_without_access(client, world, who, sees):
    headers = _who(client, world, who)
    for mode_query in (QUESTION, "Nightingale Zephyrine"):  # hybrid; words only full text finds
        response = client.post(
            "/api/v1/search/", {"query": mode_query, "top_k": 20}, content_type="application/json", **headers
        )
        assert response.status_code == 200, response.content
        found = {r["document_id"] for r in response.json()["results"]}
        assert (world["secret"].pk in found) is sees
    narrowed = client.post(
        "/api/v1/search/",
        {"query": QUESTION, "collection": world["board"].pk},
        content_type="application/json",
        **headers,
    )
    assert narrowed.status_code == (200 if sees else 404)


def _chat_rest(client, headers, **extra):
    response = client.post("/api/v1/chat/", {"message": QUESTION, **extra}, content_type="application/json", **headers)
    assert response.status_code == 200, response.content
    return response.json()


def _stored_sources(account, conversation_id) -> set[int]:
    with account_context(account):
        rows = Message.objects.for_account(account).filter(conversation_id=conversation_id)
        return {s["document_id"] for m in rows for s in (m.sources or []) + (m.citations or [])}


@pytest.mark.parametrize(
    "who, sees", [("member", False), ("outsider_key", False), ("insider", True), ("insider_key", True)]
)
def test_rest_chat_sources_and_citations(client, world, who, sees):
    headers = _who(client, world, who)
    body = _chat_rest(client, headers)
    cited = {c["document_id"] for c in body["citations"]}
    assert (world["secret"].pk in cited) is sees
    assert (world["secret"].pk in _stored_sources(world["account"], body["conversation_id"])) is sees
    history = client.get(f"/api/v1/conversations/{body['conversation_id']}/", **headers).json()
    assert ("Zephyrine" in json.dumps(history["messages"][0]["sources"])) is False  # names, never text
    assert (world["secret"].pk in {s["document_id"] for m in history["messages"] for s in m["sources"]}) is sees


@pytest.mark.parametrize("who", ["member", "outsider_key"])
def test_rest_chat_narrowed_to_an_invisible_collection_is_404(client, world, who):
    headers = _who(client, world, who)
    response = client.post(
        "/api/v1/chat/",
        {"message": QUESTION, "collection": [world["board"].pk]},
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_sse_chat_sources(client, world):
    for key, sees in (("outsider_key", False), ("insider_key", True)):
        response = client.post(
            "/api/v1/chat/?stream=1", {"message": QUESTION}, content_type="application/json", **_auth(world[key])
        )
        events = [json.loads(line[6:]) for line in b"".join(response.streaming_content).decode().split("\n\n") if line]
        assert events[0]["type"] == "chat.sources" and events[-1]["type"] == "chat.done"
        assert (world["secret"].pk in {s["document_id"] for s in events[0]["sources"]}) is sees
        assert (world["secret"].pk in {c["document_id"] for c in events[-1]["citations"]}) is sees


def test_openai_compatible_endpoint(client, world):
    for key, sees in (("outsider_key", False), ("insider_key", True)):
        response = client.post(
            "/v1/chat/completions",
            {"model": "groundwork", "messages": [{"role": "user", "content": QUESTION}]},
            content_type="application/json",
            **_auth(world[key]),
        )
        assert response.status_code == 200, response.content
        body = response.json()
        assert (world["secret"].pk in {c["document_id"] for c in body.get("citations", [])}) is sees
        with account_context(world["account"]):
            latest = Message.objects.for_account(world["account"]).order_by("-pk").first()
        assert (world["secret"].pk in {s["document_id"] for s in latest.sources}) is sees


def test_websocket_sources_and_citations(client, world):
    from chat.tests.test_websocket import Socket, _session_headers

    def key(name):
        return [(b"authorization", f"Bearer {world[name]}".encode())]

    def session(name):  # made when used: logging another user in ends the previous session
        return _session_headers(client, world[name], "http://localhost:8000")

    cases = [
        (lambda: key("outsider_key"), False),
        (lambda: key("insider_key"), True),
        (lambda: session("member"), False),
        (lambda: session("insider"), True),
    ]
    for headers, sees in cases:
        socket = Socket(headers())
        connected = socket.connect()
        assert connected[0], (headers, connected)
        frames = socket.ask(QUESTION)
        socket.close()
        assert frames[0]["type"] == "chat.sources" and frames[-1]["type"] == "chat.done", frames[-1]
        assert (world["secret"].pk in {s["document_id"] for s in frames[0]["sources"]}) is sees
        assert (world["secret"].pk in {c["document_id"] for c in frames[-1]["citations"]}) is sees


# --- pages -------------------------------------------------------------------------------------


@pytest.mark.parametrize("who, sees", [("member", False), ("insider", True), ("admin", True)])
def test_pages(client, world, who, sees):
    client.force_login(world[who])
    page = client.get("/documents/").content.decode()
    assert ("nightingale.md" in page) is sees and "kitchen.md" in page
    assert client.get(f"/documents/{world['secret'].pk}/").status_code == (200 if sees else 404)
    status = client.get("/documents/status/").json()
    assert (world["secret"].pk in {d["id"] for d in status["documents"]}) is sees


# --- the database itself -----------------------------------------------------------------------


def _app_role_connection() -> psycopg.Connection:
    s = connection.settings_dict
    return psycopg.connect(
        dbname=s["NAME"], user=s["USER"], host=s["HOST"] or None, port=s["PORT"] or None, password=s["PASSWORD"] or None
    )


def _as_app_serving(cursor, account, *, user=None, api_key=None) -> None:
    """The context the app itself sets for a unit of work of this principal (core.tenancy)."""
    values = tenancy._settings_values(
        account_id=account.pk, user_id=getattr(user, "pk", None), api_key_id=getattr(api_key, "pk", None)
    )
    cursor.execute(tenancy._SETTINGS_SQL, [*values, tenancy._sign(values)])


def _secret_rows(cursor, world) -> dict[str, int]:
    secret, board = world["secret"], world["board"]
    counts = {}
    for name, sql, params in [
        ("document", "SELECT count(*) FROM documents_document WHERE id = %s", [secret.pk]),
        ("chunks", "SELECT count(*) FROM documents_chunk WHERE document_id = %s", [secret.pk]),
        ("chunks_by_collection", "SELECT count(*) FROM documents_chunk WHERE collection_id = %s", [board.pk]),
        (
            "fulltext",
            "SELECT count(*) FROM chunk_fulltext_search(%s, 'Nightingale Zephyrine', 50) AS f"
            " JOIN LATERAL (SELECT 1) AS x ON true WHERE f.chunk_id IN"
            " (SELECT unnest(%s::bigint[]))",
            [world["account"].pk, world["secret_chunk_ids"]],
        ),
    ]:
        cursor.execute(sql, params)
        counts[name] = cursor.fetchone()[0]
    return counts


@pytest.mark.parametrize(
    "who, sees",
    [
        ("member", False),
        ("outsider_key", False),
        ("insider", True),
        ("insider_key", True),
        ("owner", True),
        ("admin", True),
        ("system", True),
    ],
)
def test_the_app_roles_own_sql_inside_the_principals_context(world, who, sees):
    account = world["account"]
    with tenancy.dangerously_bypass_tenancy(reason="test: the secret's chunk ids"):
        world["secret_chunk_ids"] = list(
            Chunk.all_accounts.filter(document_id=world["secret"].pk).values_list("pk", flat=True)
        )
    assert world["secret_chunk_ids"]
    principal = {}
    if who.endswith("_key"):
        principal["api_key"] = _key(account, world[who])
    elif who != "system":
        principal["user"] = world[who]
    with _app_role_connection() as conn, conn.cursor() as cursor:
        _as_app_serving(cursor, account, **principal)
        counts = _secret_rows(cursor, world)
        cursor.execute("SELECT count(*) FROM documents_document WHERE id = %s", [world["public"].pk])
        assert cursor.fetchone()[0] == 1  # the rest of the account stays readable
        # Nor can the member's SQL write a row into the collection it cannot see.
        if not sees:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                cursor.execute(
                    "UPDATE documents_document SET collection_id = %s WHERE id = %s",
                    [world["board"].pk, world["public"].pk],
                )
    if sees:
        assert all(counts.values()), counts
    else:
        assert counts == {"document": 0, "chunks": 0, "chunks_by_collection": 0, "fulltext": 0}


# --- grant and revoke ----------------------------------------------------------------------------


def test_granting_access_shows_it_and_revoking_hides_it_again(client, world):
    member, board, secret, owner = world["member"], world["board"], world["secret"], world["owner"]
    client.force_login(member)

    def sees():
        search = client.post("/api/v1/search/", {"query": QUESTION}, content_type="application/json").json()
        return (
            secret.pk in _document_ids(client, {}),
            secret.pk in {r["document_id"] for r in search["results"]},
            client.get(f"/documents/{secret.pk}/").status_code == 200,
        )

    assert sees() == (False, False, False)
    client.force_login(owner)
    response = client.patch(
        f"/api/v1/collections/{board.pk}/", {"users": [world["insider"].pk, member.pk]}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert member.pk in response.json()["access"]["users"]
    client.force_login(member)
    assert sees() == (True, True, True)
    client.force_login(owner)
    client.patch(f"/api/v1/collections/{board.pk}/", {"users": [world["insider"].pk]}, content_type="application/json")
    client.force_login(member)
    assert sees() == (False, False, False)
    # Opening the collection shows it to everyone; the changes are in the audit log.
    with account_context(world["account"], user=owner):
        collection_update(account=world["account"], actor=owner, collection=board, restricted=False)
    assert sees() == (True, True, True)
    with account_context(world["account"]):
        actions = list(AuditEntry.objects.for_account(world["account"]).values_list("action", flat=True))
    assert {"collection.create", "collection.access", "collection.restrict"} <= set(actions)


def test_an_old_citation_of_a_document_now_hidden_keeps_no_name(client, world):
    member, board = world["member"], world["board"]
    with account_context(world["account"], user=world["owner"]):
        collection_update(
            account=world["account"], actor=world["owner"], collection=board, user_ids=[world["insider"].pk, member.pk]
        )
    client.force_login(member)
    body = _chat_rest(client, {})
    assert world["secret"].pk in {c["document_id"] for c in body["citations"]}
    with account_context(world["account"], user=world["owner"]):
        collection_update(
            account=world["account"], actor=world["owner"], collection=board, user_ids=[world["insider"].pk]
        )
    history = client.get(f"/api/v1/conversations/{body['conversation_id']}/").json()
    answer = history["messages"][-1]
    hidden = [c for c in answer["citations"] if c["document_id"] == world["secret"].pk]
    assert hidden and all(c["document_name"] == "" and c["available"] is False for c in hidden)
    page = client.get(f"/chat/{body['conversation_id']}/").content.decode()
    assert "nightingale.md" not in page and f"/documents/{world['secret'].pk}/" not in page


# --- managing collections ------------------------------------------------------------------------


def test_only_owners_and_admins_manage_collections(client, world):
    client.force_login(world["member"])
    refused = client.post("/api/v1/collections/", {"name": "Mine"}, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    key = client.post(
        "/api/v1/collections/", {"name": "Mine"}, content_type="application/json", **_auth(world["insider_key"])
    )
    assert key.status_code == 403
    client.force_login(world["admin"])
    made = client.post("/api/v1/collections/", {"name": "Legal", "restricted": True}, content_type="application/json")
    assert made.status_code == 201, made.content
    assert made.json()["restricted"] is True
    duplicate = client.post("/api/v1/collections/", {"name": "legal"}, content_type="application/json")
    assert duplicate.status_code == 400 and duplicate.json()["error"]["code"] == "duplicate_name"
    # Not empty: 409 unless its documents move to General.
    board = world["board"]
    assert client.delete(f"/api/v1/collections/{board.pk}/").status_code == 409
    assert client.delete(f"/api/v1/collections/{board.pk}/?move_documents=1").status_code == 204
    detail = client.get(f"/api/v1/documents/{world['secret'].pk}/").json()
    assert detail["collection"]["name"] == "General"
    with account_context(world["account"]):
        assert set(
            Chunk.objects.for_account(world["account"])
            .filter(document_id=world["secret"].pk)
            .values_list("collection__name", flat=True)
        ) == {"General"}
    general = detail["collection"]["id"]
    assert client.delete(f"/api/v1/collections/{general}/").status_code == 400


def test_upload_into_a_collection_and_move(client, world, run_jobs):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(world["insider"])
    upload = client.post(
        "/api/v1/documents/",
        {
            "file": SimpleUploadedFile("minutes.txt", b"Board minutes. " * 40, content_type="text/plain"),
            "collection": world["board"].pk,
        },
    )
    assert upload.status_code == 202, upload.content
    assert upload.json()["collection"] == {"id": world["board"].pk, "name": "Board"}
    run_jobs()
    client.force_login(world["member"])
    assert upload.json()["id"] not in _document_ids(client, {})
    # The member cannot upload into it either (404 like a missing collection).
    refused = client.post(
        "/api/v1/documents/",
        {
            "file": SimpleUploadedFile("x.txt", b"Hello there. " * 40, content_type="text/plain"),
            "collection": world["board"].pk,
        },
    )
    assert refused.status_code == 404
    # Its uploader, a member, may not move it; an owner moves it to General: everyone sees
    # it, chunks included.
    client.force_login(world["insider"])
    with account_context(world["account"]):
        general = Collection.objects.for_account(world["account"]).get(is_default=True)
    refused = client.post(
        f"/api/v1/documents/{upload.json()['id']}/move/", {"collection": general.pk}, content_type="application/json"
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    client.force_login(world["owner"])
    moved = client.post(
        f"/api/v1/documents/{upload.json()['id']}/move/", {"collection": general.pk}, content_type="application/json"
    )
    assert moved.status_code == 200, moved.content
    with account_context(world["account"]):
        assert set(
            Chunk.objects.for_account(world["account"])
            .filter(document_id=upload.json()["id"])
            .values_list("collection_id", flat=True)
        ) == {general.pk}
    client.force_login(world["member"])
    assert upload.json()["id"] in _document_ids(client, {})


def test_account_b_never_sees_account_a_collections(client, world, account_b):
    client.force_login(account_b.test_owner)
    assert {c["name"] for c in client.get("/api/v1/collections/").json()["results"]} == {"General"}
    assert client.get(f"/api/v1/collections/{world['board'].pk}/").status_code == 404
    assert (
        client.patch(
            f"/api/v1/collections/{world['board'].pk}/", {"name": "x"}, content_type="application/json"
        ).status_code
        == 404
    )
    assert (
        client.post(
            "/api/v1/search/", {"query": QUESTION, "collection": world["board"].pk}, content_type="application/json"
        ).status_code
        == 404
    )


def test_a_new_account_starts_with_general(account_b):
    with account_context(account_b):
        assert list(Collection.objects.for_account(account_b).values_list("name", "is_default", "restricted")) == [
            ("General", True, False)
        ]


# --- the pages for collections -------------------------------------------------------------


def test_collections_page_for_managers_and_members(client, world):
    board = world["board"]
    client.force_login(world["member"])
    page = client.get("/documents/collections/").content.decode()
    assert "General" in page and "Board" not in page and "New collection" not in page
    assert client.post(f"/documents/collections/{board.pk}/", {"name": "Mine"}).status_code == 404
    assert client.get(f"/documents/?collection={board.pk}").status_code == 404
    client.force_login(world["owner"])
    page = client.get("/documents/collections/").content.decode()
    assert "Board" in page and "New collection" in page
    assert f'<code class="collection-id">{board.pk}</code>' in page  # the Knowledge ID Dify asks for
    response = client.post(
        "/documents/collections/new/", {"name": "Legal", "restricted": "on", "users": [str(world["member"].pk)]}
    )
    assert response.status_code == 302
    with account_context(world["account"]):
        legal = Collection.objects.for_account(world["account"]).get(name="Legal")
    assert legal.restricted
    client.post(
        f"/documents/collections/{board.pk}/",
        {"name": "Board of directors", "restricted": "on", "users": [str(world["member"].pk)]},
    )
    client.force_login(world["member"])
    page = client.get(f"/documents/?collection={board.pk}").content.decode()
    assert "nightingale.md" in page and "kitchen.md" not in page and "Board of directors" in page


def test_moving_a_document_from_its_page(client, world):
    client.force_login(world["owner"])
    with account_context(world["account"]):
        general = Collection.objects.for_account(world["account"]).get(is_default=True)
    page = client.get(f"/documents/{world['secret'].pk}/").content.decode()
    assert "Board" in page and 'name="collection"' in page
    client.post(f"/documents/{world['secret'].pk}/move/", {"collection": general.pk})
    client.force_login(world["member"])
    assert client.get(f"/documents/{world['secret'].pk}/").status_code == 200
    # The member (not a manager) cannot move it back into a collection it cannot see.
    assert client.post(f"/documents/{world['secret'].pk}/move/", {"collection": world["board"].pk}).status_code == 404


@pytest.mark.parametrize(
    "who, sees", [("member", False), ("outsider_key", False), ("insider", True), ("insider_key", True), ("owner", True)]
)
def test_the_ledger_names_a_restricted_document_only_to_those_who_may_read_it(client, world, who, sees):
    """Found from outside: a read key or a viewer saw `document:<id>:rev1`
    entries of a restricted document on the Credits page and in GET credits/. They still see
    that a document was charged (the balance adds up), never which one."""
    from billing import references

    secret = world["secret"]
    named = references.document(secret.pk, secret.revision)
    headers = _who(client, world, who)
    entries = client.get("/api/v1/credits/?page_size=200", **headers).json()["entries"]
    refs = [e["reference"] for e in entries]
    assert (named in refs) is sees
    assert ("document:hidden" in refs) is not sees
    assert references.document(world["public"].pk, world["public"].revision) in refs
    if not who.endswith("_key"):
        page = client.get("/credits/", **headers).content.decode()
        assert (f"/documents/{secret.pk}/" in page) is sees and (named in page) is sees
        assert ("a document you cannot open" in page) is not sees

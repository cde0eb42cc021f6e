"""A budget is enforced on every surface that spends: REST chat (JSON and SSE), /v1, the
websocket (chat.error, socket stays open), search, upload and ingestion; the member sees
what is left; the REST API and the Team page manage budgets, account by account."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from accounts.models import Role
from accounts.services import api_key_create
from accounts.tests.factories import add_member, make_user
from billing.budgets import budget_set
from billing.models import Budget, CreditLedgerEntry
from billing.services import credits_debit
from core.tenancy import account_context

HANDBOOK = (
    "# Holidays\n\nEveryone at Acme has twenty-eight days of paid holiday a year. Unused holiday "
    "carries over until March.\n\n# Laptops\n\nNew starters receive a laptop and a badge on day one."
)


@pytest.fixture
def handbook(account_a, fake_llm, upload_and_ingest):
    return upload_and_ingest(account_a, "handbook.md", HANDBOOK.encode())


@pytest.fixture
def key_a(account_a):
    with account_context(account_a):
        key, raw = api_key_create(account=account_a, actor=None, name="integration")
    key.raw = raw
    return key


def _auth(key):
    return {"HTTP_AUTHORIZATION": f"Bearer {key.raw}"}


def _budget(account, actor, limit, period="day", **target):
    with account_context(account):
        return budget_set(account=account, actor=actor, period=period, limit=limit, **target)


def _refused(response, whose="Your"):
    assert response.status_code == 402, response.content
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert (
        error["message"].startswith(f"{whose} daily budget of 100 credits")
        and "resets at 00:00 UTC" in error["message"]
    )
    return error


# --- chat -----------------------------------------------------------------------------------


def test_rest_chat_of_a_member_past_their_budget_is_402(client_a, account_a, owner_a, handbook, fake_llm):
    _budget(account_a, owner_a, 100, user_id=owner_a.pk)
    fake_llm.clear()
    _refused(
        client_a.post("/api/v1/chat/", {"message": "How much holiday do we get?"}, content_type="application/json")
    )
    _refused(
        client_a.post(
            "/api/v1/chat/?stream=1", {"message": "How much holiday do we get?"}, content_type="application/json"
        )
    )
    assert fake_llm.requests == []


def test_rest_chat_charges_the_member_and_shows_what_is_left(client_a, account_a, owner_a, handbook, fake_llm):
    _budget(account_a, owner_a, 1_000_000, user_id=owner_a.pk)
    body = client_a.post(
        "/api/v1/chat/", {"message": "How much holiday do we get?"}, content_type="application/json"
    ).json()
    with account_context(account_a):
        charge = CreditLedgerEntry.objects.for_account(account_a).get(reference=f"message:{body['message_id']}")
        search = CreditLedgerEntry.objects.for_account(account_a).filter(reference="search").get()
    assert charge.spent_by_user_id == search.spent_by_user_id == owner_a.pk
    spent = -charge.delta - search.delta
    listing = client_a.get("/api/v1/budgets/").json()["results"]
    assert [(b["period"], b["limit"], b["spent"], b["remaining"]) for b in listing] == [
        ("day", 1_000_000, spent, 1_000_000 - spent)
    ]
    credits = client_a.get("/credits/").content.decode()
    assert f"{1_000_000 - spent:,}" in credits and "of your daily 1,000,000 credits left" in credits
    assert 'id="header-budget"' in credits and "left today" in credits


def test_v1_chat_of_a_key_past_its_budget_is_402(client, account_a, owner_a, key_a, handbook, fake_llm):
    _budget(account_a, owner_a, 100, api_key_id=key_a.pk)
    response = client.post(
        "/v1/chat/completions",
        {"model": "groundwork", "messages": [{"role": "user", "content": "How much holiday do we get?"}]},
        content_type="application/json",
        **_auth(key_a),
    )
    _refused(response, whose="This API key's")
    # The key's budget is the key's: the owner who made it still chats.
    _budget(account_a, owner_a, 100, user_id=owner_a.pk)
    response = client.post(
        "/v1/chat/completions",
        {
            "model": "groundwork",
            "stream": True,
            "messages": [{"role": "user", "content": "How much holiday do we get?"}],
        },
        content_type="application/json",
        **_auth(key_a),
    )
    _refused(response, whose="This API key's")


@pytest.mark.django_db(transaction=True)
def test_websocket_gets_chat_error_and_the_socket_stays_open(account_a, owner_a, key_a, handbook, fake_llm):
    from chat.tests.test_websocket import Socket

    _budget(account_a, owner_a, 100, api_key_id=key_a.pk)
    socket = Socket([(b"authorization", f"Bearer {key_a.raw}".encode())])
    assert socket.connect()[0]
    frames = socket.ask("How much holiday do we get?")
    assert [f["type"] for f in frames] == ["chat.error"] and frames[0]["code"] == "budget_exceeded"
    assert frames[0]["message"].startswith("This API key's daily budget of 100 credits")
    _budget(account_a, owner_a, 1_000_000, api_key_id=key_a.pk)
    assert socket.ask("How much holiday do we get?")[-1]["type"] == "chat.done"
    socket.close()


# --- search and upload ----------------------------------------------------------------------


def test_search_past_the_keys_budget_is_402(client, account_a, owner_a, key_a, handbook):
    _budget(account_a, owner_a, 100, api_key_id=key_a.pk)
    with account_context(account_a):
        credits_debit(account=account_a, tokens=100, key="used-up", kind="chat", api_key=key_a)
    response = client.post("/api/v1/search/", {"query": "holiday"}, content_type="application/json", **_auth(key_a))
    error = _refused(response, whose="This API key's")
    assert "is used up (100 spent today)" in error["message"]


def test_upload_needs_the_minimum_left_in_the_uploaders_budget(client_a, client, account_a, owner_a, key_a, settings):
    settings.MIN_CREDITS_TO_INGEST = 101
    _budget(account_a, owner_a, 100, user_id=owner_a.pk)
    upload = SimpleUploadedFile("notes.txt", b"Some notes about the office.", content_type="text/plain")
    _refused(client_a.post("/api/v1/documents/", {"file": upload}))
    _budget(account_a, owner_a, 100, api_key_id=key_a.pk)
    upload = SimpleUploadedFile("notes.txt", b"Some notes about the office.", content_type="text/plain")
    _refused(client.post("/api/v1/documents/", {"file": upload}, **_auth(key_a)), whose="This API key's")


def test_ingestion_fails_when_the_uploaders_budget_cannot_cover_the_estimate(
    account_a, owner_a, fake_llm, run_jobs, django_capture_on_commit_callbacks
):
    from documents.models import Document
    from documents.services import document_upload

    member = add_member(account_a, make_user("writer@a.test"), role=Role.MEMBER)
    _budget(account_a, owner_a, 150, user_id=member.pk)
    long_text = " ".join(
        f"Paragraph {i} of the employee handbook covers travel, expenses and holidays." for i in range(80)
    ).encode()

    def upload(name, data):
        with account_context(account_a, user=member), django_capture_on_commit_callbacks(execute=True):
            document, _ = document_upload(
                account=account_a, actor=member, upload=SimpleUploadedFile(name, data, content_type="text/plain")
            )
        run_jobs()
        with account_context(account_a):
            return Document.objects.for_account(account_a).get(pk=document.pk)

    big = upload("big.txt", long_text)
    assert big.status == "failed" and big.error_code == "budget_exceeded"
    assert "daily budget of 150 credits" in big.error
    small = upload("small.txt", b"Badges are collected at reception.")
    assert small.status == "ready"
    with account_context(account_a):
        entry = CreditLedgerEntry.objects.for_account(account_a).get(kind="embedding")
    assert entry.spent_by_user_id == member.pk and entry.reference.startswith(f"document:{small.pk}")


# --- the REST API of budgets ----------------------------------------------------------------


def test_budgets_api_admins_manage_others_see_their_own(client, client_a, account_a, owner_a, key_a):
    member = add_member(account_a, make_user("m@a.test"), role=Role.MEMBER)
    response = client_a.put(
        "/api/v1/budgets/", {"user_id": member.pk, "period": "month", "limit": 25_000}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["target"] == {"type": "member", "id": member.pk, "name": "m@a.test"}
    assert (body["period"], body["limit"], body["spent"], body["remaining"]) == ("month", 25_000, 0, 25_000)
    key_budget = client_a.put(
        "/api/v1/budgets/", {"api_key_id": key_a.pk, "period": "day", "limit": 500}, content_type="application/json"
    ).json()
    assert len(client_a.get("/api/v1/budgets/").json()["results"]) == 2
    # The key sees its own, and may not set any.
    mine = client.get("/api/v1/budgets/", **_auth(key_a)).json()["results"]
    assert [b["id"] for b in mine] == [key_budget["id"]]
    refused = client.put(
        "/api/v1/budgets/",
        {"api_key_id": key_a.pk, "period": "day", "limit": 10**6},
        content_type="application/json",
        **_auth(key_a),
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    # A member sees their own, and may neither set nor remove.
    client = Client()  # client_a is the owner's session on the `client` fixture
    client.force_login(member)
    assert [b["period"] for b in client.get("/api/v1/budgets/").json()["results"]] == ["month"]
    assert (
        client.put(
            "/api/v1/budgets/",
            {"user_id": member.pk, "period": "month", "limit": 10**6},
            content_type="application/json",
        ).status_code
        == 403
    )
    assert client.delete(f"/api/v1/budgets/{body['id']}/").status_code == 403
    assert client_a.delete(f"/api/v1/budgets/{body['id']}/").status_code == 204
    assert [b["id"] for b in client_a.get("/api/v1/budgets/").json()["results"]] == [key_budget["id"]]


@pytest.mark.parametrize(
    "payload",
    [
        {"period": "day", "limit": 10},
        {"user_id": "x", "period": "day", "limit": 10},
        {"api_key_id": 1, "period": "year", "limit": 10},
        {"api_key_id": 1, "period": "day", "limit": 0},
        {"api_key_id": 1, "period": "day", "limit": "lots"},
    ],
)
def test_budgets_api_bad_input_is_400(client_a, payload):
    response = client_a.put("/api/v1/budgets/", payload, content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] in ("invalid", "invalid_target")


def test_budgets_api_isolation(client, client_a, account_a, account_b, owner_a, owner_b):
    member = add_member(account_a, make_user("m2@a.test"), role=Role.MEMBER)
    budget = _budget(account_a, owner_a, 500, user_id=member.pk)
    client.force_login(owner_b)
    assert client.get("/api/v1/budgets/").json()["results"] == []
    response = client.put(
        "/api/v1/budgets/", {"user_id": member.pk, "period": "day", "limit": 5}, content_type="application/json"
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert client.delete(f"/api/v1/budgets/{budget.pk}/").status_code == 404
    with account_context(account_a):
        assert Budget.objects.for_account(account_a).get().limit == 500


# --- the Team page ----------------------------------------------------------------------------


def test_team_page_sets_and_removes_budgets(client_a, client, account_a, owner_a, key_a):
    member = add_member(account_a, make_user("team@a.test"), role=Role.MEMBER)
    page = client_a.get("/team/").content.decode()
    assert 'id="budgets-heading"' in page and f'value="user:{member.pk}"' in page and f'value="key:{key_a.pk}"' in page
    done = client_a.post(
        "/credits/budgets/", {"target": f"user:{member.pk}", "period": "day", "limit": "5,000"}, follow=True
    ).content.decode()
    assert "team@a.test may spend 5,000 credits per day (UTC)." in done
    assert 'id="budgets-table"' in done and "5,000" in done
    bad = client_a.post(
        "/credits/budgets/", {"target": f"user:{member.pk}", "period": "day", "limit": "five"}, follow=True
    ).content.decode()
    assert "The limit must be a whole number of credits from 1 to 1,000,000,000,000" in bad
    assert (
        "Choose a member or an API key"
        in client_a.post("/credits/budgets/", {"period": "day", "limit": "5"}, follow=True).content.decode()
    )
    with account_context(account_a):
        budget = Budget.objects.for_account(account_a).get()
    # The member sees their own budget on the Credits page and in the header.
    client = Client()
    client.force_login(member)
    credits = client.get("/credits/").content.decode()
    assert "<strong>5,000</strong> of your daily 5,000 credits left (0 spent today); resets at 00:00 UTC." in credits
    assert "5,000</span> left today" in credits
    assert (
        client.post("/credits/budgets/", {"target": f"user:{member.pk}", "period": "day", "limit": "9"}).status_code
        == 403
    )
    assert client.post(f"/credits/budgets/{budget.pk}/remove/").status_code == 403
    assert "Budget removed." in client_a.post(f"/credits/budgets/{budget.pk}/remove/", follow=True).content.decode()
    with account_context(account_a):
        assert not Budget.objects.for_account(account_a).exists()


def test_team_page_budgets_are_isolated(client, account_a, account_b, owner_a, owner_b):
    member = add_member(account_a, make_user("iso@a.test"), role=Role.MEMBER)
    budget = _budget(account_a, owner_a, 500, user_id=member.pk)
    client.force_login(owner_b)
    assert "iso@a.test" not in client.get("/team/").content.decode()
    assert (
        client.post("/credits/budgets/", {"target": f"user:{member.pk}", "period": "day", "limit": "5"}).status_code
        == 404
    )
    assert client.post(f"/credits/budgets/{budget.pk}/remove/").status_code == 404
    with account_context(account_a):
        assert Budget.objects.for_account(account_a).get().limit == 500

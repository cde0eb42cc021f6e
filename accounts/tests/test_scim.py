"""SCIM 2.0 provisioning at /scim/v2/: the owner's token, the request shapes Okta
and Microsoft Entra ID send (copied from their SCIM guides), deactivation ending one
membership only, and account B's token never reaching account A."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from accounts.domains.models import VerifiedDomain
from accounts.models import Account, Membership, Role, User
from accounts.scim.models import ScimIdentity, ScimToken
from accounts.tests.factories import add_member, make_api_key, make_user
from audit.models import AuditEntry
from core.tenancy import account_context

pytestmark = pytest.mark.django_db

SCIM = "application/scim+json"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"


def make_token(client, account) -> str:
    """A token made the way an owner makes one: the Team page's button, shown once."""
    owner = account.test_owner
    client.force_login(owner)
    session = client.session
    session["account_id"] = account.pk
    session.save()
    assert client.post("/team/scim-tokens/").status_code == 302
    page = client.get("/team/").content.decode()
    raw = page.split('id="new-scim-token">', 1)[1].split("<", 1)[0]
    assert raw.startswith("gwscim_")
    assert raw not in client.get("/team/").content.decode()  # shown once
    client.logout()
    return raw


class Scim:
    """An identity provider: every request with its bearer token, bodies as SCIM JSON."""

    def __init__(self, client, token: str):
        self.client, self.token = client, token

    def _call(self, method: str, path: str, body=None, **query):
        kwargs = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}
        if body is not None:
            kwargs.update(data=json.dumps(body) if not isinstance(body, (bytes, str)) else body, content_type=SCIM)
        response = getattr(self.client, method)(f"/scim/v2{path}", query_params=query or None, **kwargs)
        if response.status_code != 204:
            assert response["Content-Type"] == SCIM, response.content
        return response

    def get(self, path, **query):
        return self._call("get", path, **query)

    def post(self, path, body):
        return self._call("post", path, body)

    def put(self, path, body):
        return self._call("put", path, body)

    def patch(self, path, body):
        return self._call("patch", path, body)

    def delete(self, path):
        return self._call("delete", path)


@pytest.fixture
def scim_a(client, account_a):
    return Scim(client, make_token(client, account_a))


@pytest.fixture
def scim_b(client, account_b):
    return Scim(client, make_token(client, account_b))


def okta_user(email: str, given="Barbara", family="Jensen", active=True) -> dict:
    # Okta's "Create User" request (developer.okta.com, SCIM 2.0 reference).
    return {
        "schemas": [USER_SCHEMA],
        "userName": email,
        "name": {"givenName": given, "familyName": family},
        "emails": [{"primary": True, "value": email, "type": "work"}],
        "displayName": f"{given} {family}",
        "locale": "en-US",
        "externalId": "00ujl29u0le5T6Aj10h7",
        "groups": [],
        "password": "1mz050nq",
        "active": active,
    }


def entra_user(email: str) -> dict:
    # Entra ID's "Create User" request (learn.microsoft.com, "Develop a SCIM endpoint").
    return {
        "schemas": [USER_SCHEMA, "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"],
        "externalId": "0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef",
        "userName": email,
        "active": True,
        "addresses": [{"primary": True, "type": "work", "formatted": "1864 Nienow Cape"}],
        "displayName": "Kramer Lea",
        "emails": [{"primary": True, "type": "work", "value": email}],
        "meta": {"resourceType": "User"},
        "name": {"familyName": "Lea", "givenName": "Kramer"},
        "phoneNumbers": [{"primary": True, "type": "work", "value": "+1 555 0100"}],
        "roles": [],
        "title": "Engineer",
        "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User": {"department": "Sales"},
    }


def okta_deactivate():
    return {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "replace", "value": {"active": False}}]}


def entra_active(value: str):
    return {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "Replace", "path": "active", "value": value}]}


def membership(account, user) -> Membership | None:
    with account_context(account):
        return Membership.objects.for_account(account).filter(user=user).first()


def assert_error(response, status: int, scim_type: str | None = None):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["schemas"] == [ERROR_SCHEMA] and body["status"] == str(status) and body["detail"]
    assert body.get("scimType") == scim_type
    return body


# --- tokens ----------------------------------------------------------------------------------------


def test_without_a_valid_token_every_path_is_401_with_a_scim_error(client, account_a):
    raw = make_token(client, account_a)
    for auth in (
        {},
        {"HTTP_AUTHORIZATION": "Bearer gwscim_wrong"},
        {"HTTP_AUTHORIZATION": f"Basic {raw}"},
        {"HTTP_AUTHORIZATION": f"Bearer {make_api_key(account_a)}"},
    ):
        for path in ("/Users", "/Users/x", "/ServiceProviderConfig", "/Schemas", "/ResourceTypes", "/Groups"):
            response = client.get(f"/scim/v2{path}", **auth)
            assert_error(response, 401)
            assert response["Content-Type"] == SCIM and response["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_token_is_401_and_both_are_audited(client, account_a, owner_a):
    raw = make_token(client, account_a)
    scim = Scim(client, raw)
    assert scim.get("/Users").status_code == 200
    client.force_login(owner_a)
    with account_context(account_a):
        token = ScimToken.objects.for_account(account_a).get()
        assert token.token_hash != raw and raw not in token.token_hash and token.last_used_at is not None
    assert client.post(f"/team/scim-tokens/{token.pk}/revoke/").status_code == 302
    client.logout()
    assert_error(scim.get("/Users"), 401)
    with account_context(account_a):
        actions = set(AuditEntry.objects.for_account(account_a).values_list("action", flat=True))
    assert {"scim_token.create", "scim_token.revoke"} <= actions


@pytest.mark.parametrize("role", [Role.ADMIN, Role.MEMBER, Role.VIEWER])
def test_only_owners_make_or_revoke_tokens(client, account_a, role):
    make_token(client, account_a)
    with account_context(account_a):
        token = ScimToken.objects.for_account(account_a).get()
    person = add_member(account_a, role=role)
    client.force_login(person)
    assert client.post("/team/scim-tokens/").status_code == 403
    assert client.post(f"/team/scim-tokens/{token.pk}/revoke/").status_code == 403
    page = client.get("/team/")
    assert b"Create SCIM token" not in page.content
    with account_context(account_a):
        assert ScimToken.objects.for_account(account_a).filter(revoked_at__isnull=True).count() == 1


def test_an_owner_cannot_revoke_another_accounts_token(client, account_a, account_b):
    make_token(client, account_b)
    with account_context(account_b):
        token_b = ScimToken.objects.for_account(account_b).get()
    client.force_login(account_a.test_owner)
    assert client.post(f"/team/scim-tokens/{token_b.pk}/revoke/").status_code == 404
    with account_context(account_b):
        assert ScimToken.objects.for_account(account_b).get().revoked_at is None


def _signed_in_as(client_class, user, account):
    browser = client_class()
    browser.force_login(user)
    session = browser.session
    session["account_id"] = account.pk
    session.save()
    return browser


def _token_made_by(browser, name="") -> str:
    assert browser.post("/team/scim-tokens/", {"name": name}).status_code == 302
    return browser.get("/team/").content.decode().split('id="new-scim-token">', 1)[1].split("<", 1)[0]


def _scim_id(scim, email):
    return scim.get("/Users", filter=f'userName eq "{email}"').json()["Resources"][0]["id"]


def test_a_removed_owners_token_cannot_bring_them_back_or_lock_the_others_out(client, scim_a, account_a, owner_a):
    admin = add_member(account_a, make_user("admin@acme.test"), role=Role.ADMIN)
    admin_id = _scim_id(scim_a, admin.email)
    # The provider makes admin@ an owner; as an owner they make a token of their own.
    assert (
        scim_a.patch(
            "/Groups/owners",
            {
                "schemas": [PATCH_SCHEMA],
                "Operations": [{"op": "add", "path": "members", "value": [{"value": admin_id}]}],
            },
        ).status_code
        == 204
    )
    kept = Scim(client, _token_made_by(_signed_in_as(client.__class__, admin, account_a), name="Kept"))
    assert kept.get("/Users").status_code == 200
    # The other owner removes them on the Team page.
    team = _signed_in_as(client.__class__, owner_a, account_a)
    assert team.post(f"/team/members/{membership(account_a, admin).pk}/remove/").status_code == 302
    assert membership(account_a, admin) is None
    # Their kept token is revoked with them: it brings nobody back and locks nobody out.
    assert_error(kept.patch(f"/Users/{admin_id}", entra_active("True")), 401)
    assert_error(
        kept.patch(
            "/Groups/owners",
            {
                "schemas": [PATCH_SCHEMA],
                "Operations": [{"op": "add", "path": "members", "value": [{"value": admin_id}]}],
            },
        ),
        401,
    )
    assert_error(kept.patch(f"/Users/{_scim_id(scim_a, owner_a.email)}", entra_active("False")), 401)
    assert membership(account_a, admin) is None and membership(account_a, owner_a).role == Role.OWNER
    assert team.get("/team/").status_code == 200
    assert scim_a.get("/Users").status_code == 200  # the remaining owner's token works on
    with account_context(account_a):
        [revoked] = AuditEntry.objects.for_account(account_a).filter(action="scim_token.revoke")
    assert "Kept" in revoked.target and revoked.detail["reason"]


def test_a_demoted_owners_tokens_are_revoked_and_the_team_page_names_each_tokens_maker(
    client, scim_a, account_a, owner_a
):
    second = add_member(account_a, make_user("second@acme.test"), role=Role.OWNER)
    mine = Scim(client, _token_made_by(_signed_in_as(client.__class__, second, account_a), name="Entra ID"))
    page = _signed_in_as(client.__class__, owner_a, account_a).get("/team/").content.decode()
    table = page.split('id="scim-tokens-table"', 1)[1].split("</table>", 1)[0]
    assert "Entra ID" in table and "second@acme.test" in table and owner_a.email in table
    team = _signed_in_as(client.__class__, owner_a, account_a)
    assert team.post(f"/team/members/{membership(account_a, second).pk}/role/", {"role": "admin"}).status_code == 302
    assert_error(mine.get("/Users"), 401)
    table = team.get("/team/").content.decode().split('id="scim-tokens-table"', 1)[1].split("</table>", 1)[0]
    assert "Entra ID" not in table and owner_a.email in table


def test_a_token_whose_maker_is_gone_is_401(client, scim_a, account_a):
    second = add_member(account_a, make_user("gone@acme.test"), role=Role.OWNER)
    theirs = Scim(client, _token_made_by(_signed_in_as(client.__class__, second, account_a)))
    assert theirs.get("/Users").status_code == 200
    with account_context(account_a):
        second.delete()  # the person's user is deleted (the admin's delete): no membership, no maker
    assert_error(theirs.get("/Users"), 401)
    assert scim_a.get("/Users").status_code == 200


def test_a_token_never_deactivates_or_demotes_an_owner_who_did_not_come_from_the_provider(scim_a, account_a):
    by_hand = add_member(account_a, make_user("by-hand@acme.test"), role=Role.OWNER)
    by_hand_id = _scim_id(scim_a, by_hand.email)
    for call in (
        lambda: scim_a.patch(f"/Users/{by_hand_id}", okta_deactivate()),
        lambda: scim_a.delete(f"/Users/{by_hand_id}"),
        lambda: scim_a.put(f"/Users/{by_hand_id}", {"userName": by_hand.email, "active": False}),
        lambda: scim_a.patch(
            "/Groups/owners",
            {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "remove", "path": f'members[value eq "{by_hand_id}"]'}]},
        ),
        lambda: scim_a.patch(
            "/Groups/admins",
            {
                "schemas": [PATCH_SCHEMA],
                "Operations": [{"op": "add", "path": "members", "value": [{"value": by_hand_id}]}],
            },
        ),
    ):
        body = assert_error(call(), 403)
        assert "Team page" in body["detail"]
        assert membership(account_a, by_hand).role == Role.OWNER


def test_a_token_never_deactivates_or_demotes_the_last_owner_besides_its_maker(scim_a, account_a, owner_a):
    one = scim_a.post("/Users", okta_user("one@example.test")).json()
    two = scim_a.post("/Users", okta_user("two@example.test")).json()
    scim_a.patch(
        "/Groups/owners",
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "add", "path": "members", "value": [{"value": one["id"]}, {"value": two["id"]}]}],
        },
    )
    # Provisioned owners come and go while another owner than the token's maker stays.
    assert scim_a.patch(f"/Users/{one['id']}", okta_deactivate()).json()["active"] is False
    body = assert_error(scim_a.patch(f"/Users/{two['id']}", okta_deactivate()), 403)
    assert "owner" in body["detail"]
    assert_error(
        scim_a.patch(
            "/Groups/owners",
            {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "remove", "path": f'members[value eq "{two["id"]}"]'}]},
        ),
        403,
    )
    assert _role(account_a, "two@example.test") == Role.OWNER
    # The maker is no lock on the others: they may hand ownership over on the Team page.
    assert membership(account_a, owner_a).role == Role.OWNER


def test_every_scim_change_is_audited_with_the_tokens_name(client, account_a, owner_a):
    scim = Scim(client, _token_made_by(_signed_in_as(client.__class__, owner_a, account_a), name="Okta prod"))
    created = scim.post("/Users", okta_user("au@example.test")).json()
    scim.patch(
        f"/Users/{created['id']}",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "replace", "path": "displayName", "value": "Renamed"}]},
    )
    scim.patch(
        "/Groups/admins",
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "add", "path": "members", "value": [{"value": created["id"]}]}],
        },
    )
    scim.patch(f"/Users/{created['id']}", okta_deactivate())
    scim.delete(f"/Users/{created['id']}")
    with account_context(account_a):
        entries = list(
            AuditEntry.objects.for_account(account_a)
            .filter(target="au@example.test")
            .order_by("id")
            .values_list("action", "actor_label")
        )
    assert [a for a, _ in entries] == [
        "member.add",
        "scim.user_create",
        "scim.user_update",
        "member.role_change",
        "member.remove",
        "scim.user_update",
        "scim.user_delete",
    ]
    assert all("Okta prod" in label and owner_a.email in label for _, label in entries)


# --- discovery -------------------------------------------------------------------------------------


def test_discovery_documents(scim_a):
    config = scim_a.get("/ServiceProviderConfig").json()
    assert config["patch"]["supported"] is True and config["bulk"]["supported"] is False
    assert config["authenticationSchemes"][0]["type"] == "oauthbearertoken"
    schemas = scim_a.get("/Schemas").json()
    assert [r["id"] for r in schemas["Resources"]] == [USER_SCHEMA, GROUP_SCHEMA]
    types = scim_a.get("/ResourceTypes").json()
    assert [t["endpoint"] for t in types["Resources"]] == ["/Users", "/Groups"]
    assert_error(scim_a.get("/Devices"), 404)


# --- create ----------------------------------------------------------------------------------------


def test_okta_create_makes_the_user_a_member_with_no_team_of_their_own(scim_a, account_a):
    before = Account.objects.count()
    response = scim_a.post("/Users", okta_user("Barbara@Example.test"))
    assert response.status_code == 201, response.content
    body = response.json()
    user = User.objects.get(email="barbara@example.test")
    assert body["userName"] == "barbara@example.test" and body["active"] is True
    assert body["name"] == {"givenName": "Barbara", "familyName": "Jensen", "formatted": "Barbara Jensen"}
    assert body["externalId"] == "00ujl29u0le5T6Aj10h7"
    assert body["id"] != str(user.pk) and response["Location"].endswith(f"/scim/v2/Users/{body['id']}")
    assert membership(account_a, user).role == Role.MEMBER
    assert Account.objects.count() == before
    assert user.full_name == "Barbara Jensen" and not user.has_usable_password()
    assert scim_a.get(f"/Users/{body['id']}").json() == body


def test_entra_create_with_attributes_it_does_not_keep(scim_a, account_a):
    response = scim_a.post("/Users", entra_user("kramer@example.test"))
    assert response.status_code == 201, response.content
    assert response.json()["displayName"] == "Kramer Lea"
    assert membership(account_a, User.objects.get(email="kramer@example.test")).role == Role.MEMBER


def test_create_finds_an_existing_user_and_leaves_their_other_teams_alone(scim_a, account_a, account_b):
    # In a domain A verified (accounts/tests/test_verified_domains.py), a user of B joins A at once.
    with account_context(account_a):
        VerifiedDomain.objects.for_account(account_a).create(
            account=account_a, domain="example.test", mailbox="admin", verified_at=timezone.now()
        )
    person = add_member(account_b, make_user("dana@example.test", full_name="Dana B"), role=Role.ADMIN)
    response = scim_a.post("/Users", okta_user("DANA@example.test", given="Other", family="Name"))
    assert response.status_code == 201
    person.refresh_from_db()
    assert person.full_name == "Dana B"  # A's directory never renames the person for B
    assert membership(account_a, person).role == Role.MEMBER
    assert membership(account_b, person).role == Role.ADMIN


def test_create_inactive_records_the_identity_without_a_membership(scim_a, account_a):
    body = scim_a.post("/Users", okta_user("later@example.test", active=False)).json()
    assert body["active"] is False
    assert membership(account_a, User.objects.get(email="later@example.test")) is None


def test_creating_a_provisioned_user_or_a_member_again_is_409(scim_a, account_a, owner_a):
    assert scim_a.post("/Users", okta_user("x@example.test")).status_code == 201
    assert_error(scim_a.post("/Users", okta_user("X@example.test")), 409, "uniqueness")
    assert_error(scim_a.post("/Users", okta_user(owner_a.email)), 409, "uniqueness")


@pytest.mark.parametrize(
    "body,scim_type",
    [
        ({"schemas": [USER_SCHEMA]}, "invalidValue"),
        ({"userName": "not an email"}, "invalidValue"),
        ({"userName": "a@example.test", "emails": "a@example.test"}, "invalidValue"),
        ({"userName": "a@example.test", "name": {"givenName": "x\x00"}}, "invalidValue"),
        ({"userName": "a@example.test", "favouriteColour": "blue"}, "invalidPath"),
        ([1, 2], "invalidSyntax"),
        ("{not json", "invalidSyntax"),
    ],
)
def test_bad_create_bodies_are_400_and_write_nothing(scim_a, body, scim_type):
    users = User.objects.count()
    assert_error(scim_a.post("/Users", body), 400, scim_type)
    assert User.objects.count() == users
    assert ScimIdentity.all_accounts.count() == 0


# --- list and filter -------------------------------------------------------------------------------


def test_list_filters_by_username_case_insensitively_and_pages(scim_a, account_a, owner_a):
    for n in range(3):
        scim_a.post("/Users", okta_user(f"p{n}@example.test"))
    everyone = scim_a.get("/Users").json()
    assert everyone["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:ListResponse"]
    assert everyone["totalResults"] == 4  # the owner, who joined before the provider looked, too
    assert owner_a.email in [u["userName"] for u in everyone["Resources"]]
    # Okta's and Entra's matching query.
    found = scim_a.get("/Users", filter='userName eq "P1@Example.test"', startIndex="1", count="100").json()
    assert found["totalResults"] == 1 and found["Resources"][0]["userName"] == "p1@example.test"
    none = scim_a.get("/Users", filter='userName eq "nobody@example.test"').json()
    assert none["totalResults"] == 0 and none["Resources"] == []
    page = scim_a.get("/Users", startIndex="2", count="2").json()
    assert (page["startIndex"], page["itemsPerPage"], page["totalResults"]) == (2, 2, 4)
    assert [u["id"] for u in page["Resources"]] == [u["id"] for u in everyone["Resources"][1:3]]
    assert scim_a.get("/Users", count="0").json()["Resources"] == []
    by_external = scim_a.get("/Users", filter='externalId eq "00ujl29u0le5T6Aj10h7"').json()
    assert by_external["totalResults"] == 3
    # The ids are stable.
    assert [u["id"] for u in scim_a.get("/Users").json()["Resources"]] == [u["id"] for u in everyone["Resources"]]


@pytest.mark.parametrize(
    "query", [{"filter": 'displayName co "a"'}, {"filter": "userName eq x"}, {"startIndex": "one"}, {"count": "1.5"}]
)
def test_bad_list_queries_are_400(scim_a, query):
    body = assert_error(scim_a.get("/Users", **query), 400, "invalidFilter" if "filter" in query else "invalidValue")
    assert body["detail"]


@pytest.mark.parametrize(
    "query,field",
    [
        ({"startIndex": "99999999999999999999"}, "startIndex"),
        ({"startIndex": "2147483648"}, "startIndex"),
        ({"count": "99999999999999999999x"}, "count"),
        ({"startIndex": "-"}, "startIndex"),
        ({"count": "ten"}, "count"),
        ({"startIndex": "1e3"}, "startIndex"),
    ],
)
def test_out_of_range_or_non_numeric_paging_is_400_naming_the_field(scim_a, query, field):
    for path in ("/Users", "/Groups"):
        body = assert_error(scim_a.get(path, **query), 400, "invalidValue")
        assert field in body["detail"]


def test_negative_paging_reads_as_rfc_7644_says(scim_a):
    # RFC 7644 3.4.2.4: a startIndex below 1 is 1, a negative count is 0.
    page = scim_a.get("/Users", startIndex="-5", count="-99999999999999999999").json()
    assert (page["startIndex"], page["itemsPerPage"], page["totalResults"]) == (1, 0, 1)
    assert scim_a.get("/Users", startIndex="-99999999999999999999").json()["startIndex"] == 1


def test_a_user_name_longer_than_an_address_can_be_is_400(scim_a):
    users = User.objects.count()
    long_name = "a" * 64 + "@" + ".".join(["b" * 60] * 4) + ".test"
    assert len(long_name) > 254
    body = assert_error(scim_a.post("/Users", okta_user(long_name)), 400, "invalidValue")
    assert "userName" in body["detail"]
    assert User.objects.count() == users


def test_the_list_does_not_cost_a_query_per_user(scim_a, django_assert_max_num_queries):
    for n in range(5):
        scim_a.post("/Users", okta_user(f"q{n}@example.test"))
    with django_assert_max_num_queries(12):
        assert scim_a.get("/Users").json()["totalResults"] == 6


# --- deactivate, reactivate, update, delete --------------------------------------------------------


def test_okta_deactivation_ends_only_this_membership_and_reactivation_restores_the_role(
    scim_a, client, account_a, account_b, owner_a
):
    body = scim_a.post("/Users", okta_user("e@example.test")).json()
    person = User.objects.get(email="e@example.test")
    add_member(account_b, person)
    with account_context(account_a):
        from accounts import services

        services.member_change_role(
            account=account_a, actor=owner_a, membership_id=membership(account_a, person).pk, role=Role.ADMIN
        )
    # The person is working in A in a browser.
    browser = client.__class__()
    browser.force_login(person)
    session = browser.session
    session["account_id"] = account_a.pk
    session.save()
    assert browser.get("/team/").status_code == 200  # an admin of A

    response = scim_a.patch(f"/Users/{body['id']}", okta_deactivate())
    assert response.status_code == 200 and response.json()["active"] is False
    assert membership(account_a, person) is None
    assert membership(account_b, person) is not None
    assert browser.get("/team/").status_code == 403  # the same session now works in B, as a member
    assert scim_a.get(f"/Users/{body['id']}").json()["active"] is False

    response = scim_a.patch(
        f"/Users/{body['id']}",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "replace", "value": {"active": True}}]},
    )
    assert response.json()["active"] is True and response.json()["id"] == body["id"]
    assert membership(account_a, person).role == Role.ADMIN
    with account_context(account_a):
        actions = list(
            AuditEntry.objects.for_account(account_a).filter(target=person.email).values_list("action", "actor_label")
        )
    assert ("member.remove", "SCIM provisioning (gwscim_") in [(a, label[:26]) for a, label in actions]


def test_reactivation_restores_the_role_at_removal_not_the_one_seen_earlier(client, scim_a, account_a, owner_a):
    body = scim_a.post("/Users", okta_user("r@example.test")).json()
    person = User.objects.get(email="r@example.test")
    team = client.__class__()
    team.force_login(owner_a)
    assert team.post(f"/team/members/{membership(account_a, person).pk}/role/", {"role": "admin"}).status_code == 302
    # Deactivated and reactivated by the provider while an admin: an admin again.
    scim_a.patch(f"/Users/{body['id']}", okta_deactivate())
    scim_a.patch(f"/Users/{body['id']}", entra_active("True"))
    assert membership(account_a, person).role == Role.ADMIN
    # Demoted to viewer, then removed, on the Team page: the provider brings back a viewer.
    assert team.post(f"/team/members/{membership(account_a, person).pk}/role/", {"role": "viewer"}).status_code == 302
    assert team.post(f"/team/members/{membership(account_a, person).pk}/remove/").status_code == 302
    assert scim_a.get(f"/Users/{body['id']}").json()["active"] is False
    assert scim_a.patch(f"/Users/{body['id']}", entra_active("True")).json()["active"] is True
    assert membership(account_a, person).role == Role.VIEWER


def test_an_owner_removed_on_the_team_page_is_reactivated_as_a_member(client, scim_a, account_a, owner_a):
    body = scim_a.post("/Users", okta_user("o@example.test")).json()
    scim_a.patch(
        "/Groups/owners",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "add", "path": "members", "value": [{"value": body["id"]}]}]},
    )
    person = User.objects.get(email="o@example.test")
    team = _signed_in_as(client.__class__, owner_a, account_a)
    assert team.post(f"/team/members/{membership(account_a, person).pk}/remove/").status_code == 302
    assert scim_a.patch(f"/Users/{body['id']}", entra_active("True")).json()["active"] is True
    assert membership(account_a, person).role == Role.MEMBER  # ownership only by the owners group


def test_entra_patches_active_as_a_string_and_names_by_path(scim_a, account_a):
    body = scim_a.post("/Users", entra_user("f@example.test")).json()
    person = User.objects.get(email="f@example.test")
    assert scim_a.patch(f"/Users/{body['id']}", entra_active("False")).json()["active"] is False
    assert membership(account_a, person) is None
    assert scim_a.patch(f"/Users/{body['id']}", entra_active("True")).json()["active"] is True
    # Entra's attribute update (learn.microsoft.com, "Update User [Multi-valued properties]").
    updated = scim_a.patch(
        f"/Users/{body['id']}",
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [
                {"op": "Replace", "path": 'emails[type eq "work"].value', "value": "f.work@example.test"},
                {"op": "Replace", "path": "name.familyName", "value": "Updated"},
                {
                    "op": "Add",
                    "path": "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department",
                    "value": "Ops",
                },
                {"op": "Replace", "path": "displayName", "value": "F Updated"},
            ],
        },
    ).json()
    assert updated["emails"] == [{"value": "f.work@example.test", "type": "work", "primary": True}]
    assert updated["name"]["familyName"] == "Updated" and updated["displayName"] == "F Updated"
    assert updated["userName"] == "f@example.test"  # the login stays
    person.refresh_from_db()
    assert person.email == "f@example.test"


def test_entras_custom_extension_and_add_of_a_work_email(scim_a, account_a):
    # As Entra sent them (learn.microsoft.com Q&A 1684621, "Entra ID patch sending Add instead of Replace").
    created = scim_a.post(
        "/Users",
        {
            "schemas": [USER_SCHEMA, "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"],
            "userName": "joe@testaccount.example.test",
            "active": True,
            "emails": [{"primary": True, "type": "work", "value": "joe@joe.example.test"}],
            "meta": {"resourceType": "User"},
            "name": {"familyName": "TestLastName1", "givenName": "joe"},
            "title": "scim tester",
            "urn:ietf:params:scim:schemas:extension:custom:2.0:User": {
                "employeeNumber": "99887766",
                "worksiteId": "180",
            },
        },
    )
    assert created.status_code == 201, created.content
    patched = scim_a.patch(
        f"/Users/{created.json()['id']}",
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [
                {"op": "Replace", "path": "title", "value": "tester"},
                {"op": "Add", "path": 'emails[type eq "work"].value', "value": "joe.new@joe.example.test"},
                {
                    "op": "Replace",
                    "path": "urn:ietf:params:scim:schemas:extension:custom:2.0:User:worksiteId",
                    "value": "181",
                },
            ],
        },
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["emails"] == [{"value": "joe.new@joe.example.test", "type": "work", "primary": True}]


@pytest.mark.parametrize(
    "operations,scim_type",
    [
        ([{"op": "replace", "path": "active", "value": "maybe"}], "invalidValue"),
        ([{"op": "replace", "path": "userName", "value": "new@example.test"}], "mutability"),
        ([{"op": "copy", "path": "active", "value": True}], "invalidSyntax"),
        ([{"op": "replace", "path": "shoeSize", "value": 9}], "invalidPath"),
        ([{"op": "remove", "path": "active"}], "noTarget"),
        ([{"op": "replace", "value": False}], "invalidValue"),
        ("not a list", "invalidSyntax"),
    ],
)
def test_bad_patches_are_400_and_change_nothing(scim_a, account_a, operations, scim_type):
    body = scim_a.post("/Users", okta_user("g@example.test")).json()
    patch = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "replace", "path": "displayName", "value": "Changed"}, *operations]
        if isinstance(operations, list)
        else operations,
    }
    assert_error(scim_a.patch(f"/Users/{body['id']}", patch), 400, scim_type)
    after = scim_a.get(f"/Users/{body['id']}").json()
    assert after["displayName"] == "Barbara Jensen" and after["active"] is True


def test_put_replaces_the_resource(scim_a, account_a):
    body = scim_a.post("/Users", okta_user("h@example.test")).json()
    replaced = scim_a.put(
        f"/Users/{body['id']}",
        {
            "schemas": [USER_SCHEMA],
            "id": body["id"],
            "userName": "h@example.test",
            "name": {"givenName": "Hana", "familyName": "Ito"},
            "active": False,
            "emails": [{"value": "h@example.test", "type": "work", "primary": True}],
        },
    ).json()
    assert replaced["name"]["givenName"] == "Hana" and replaced["active"] is False
    assert "externalId" not in replaced and replaced["displayName"] == "Hana Ito"
    assert membership(account_a, User.objects.get(email="h@example.test")) is None
    assert_error(scim_a.put(f"/Users/{body['id']}", {"userName": "other@example.test"}), 400, "mutability")


def test_delete_ends_the_membership_and_forgets_the_id(scim_a, account_a):
    body = scim_a.post("/Users", okta_user("i@example.test")).json()
    assert scim_a.delete(f"/Users/{body['id']}").status_code == 204
    assert membership(account_a, User.objects.get(email="i@example.test")) is None
    assert_error(scim_a.get(f"/Users/{body['id']}"), 404)
    assert User.objects.filter(email="i@example.test").exists()  # the person, and their other teams, stay


def test_the_last_owner_cannot_be_deprovisioned(client, scim_a, account_a, owner_a):
    # An owner who came from the provider and made the token, alone: their token cannot take
    # them out (and an owner from the Team page it cannot touch at all).
    solo = scim_a.post("/Users", okta_user("solo@example.test")).json()
    scim_a.patch(
        "/Groups/owners",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "add", "path": "members", "value": [{"value": solo["id"]}]}]},
    )
    person = User.objects.get(email="solo@example.test")
    theirs = Scim(client, _token_made_by(_signed_in_as(client.__class__, person, account_a)))
    team = _signed_in_as(client.__class__, person, account_a)
    assert team.post(f"/team/members/{membership(account_a, owner_a).pk}/remove/").status_code == 302
    for call in (
        lambda: theirs.patch(f"/Users/{solo['id']}", okta_deactivate()),
        lambda: theirs.delete(f"/Users/{solo['id']}"),
    ):
        body = assert_error(call(), 403)
        assert "owner" in body["detail"]
    assert membership(account_a, person).role == Role.OWNER


def test_unknown_ids_and_methods(scim_a):
    assert_error(scim_a.get("/Users/not-a-uuid"), 404)
    assert_error(scim_a.get("/Users/6f1c0b3e-8f1a-4a55-9d39-7b7f0b1f0e11"), 404)
    assert_error(scim_a.delete("/Users"), 405)
    assert_error(scim_a.post("/ServiceProviderConfig", {}), 405)


# --- isolation -------------------------------------------------------------------------------------


def test_account_bs_token_never_sees_or_changes_as_members(client, account_a, account_b, owner_a):
    scim_a, scim_b = Scim(client, make_token(client, account_a)), Scim(client, make_token(client, account_b))
    a_user = scim_a.post("/Users", okta_user("only-a@example.test")).json()
    owner_a_id = next(u["id"] for u in scim_a.get("/Users").json()["Resources"] if u["userName"] == owner_a.email)
    listed_by_b = scim_b.get("/Users").json()
    assert [u["userName"] for u in listed_by_b["Resources"]] == ["owner@beta.test"]
    assert scim_b.get("/Users", filter='userName eq "only-a@example.test"').json()["totalResults"] == 0
    for scim_id in (a_user["id"], owner_a_id):
        assert_error(scim_b.get(f"/Users/{scim_id}"), 404)
        assert_error(scim_b.patch(f"/Users/{scim_id}", okta_deactivate()), 404)
        assert_error(scim_b.put(f"/Users/{scim_id}", okta_user("only-a@example.test", active=False)), 404)
        assert_error(scim_b.delete(f"/Users/{scim_id}"), 404)
    person = User.objects.get(email="only-a@example.test")
    assert membership(account_a, person) is not None and membership(account_a, owner_a) is not None
    # B provisioning the same person (A's member) only invites them to B; A's membership stays.
    assert_error(scim_b.post("/Users", okta_user("only-a@example.test")), 409, "uniqueness")
    assert membership(account_a, person) is not None and membership(account_b, person) is None
    assert scim_a.get(f"/Users/{a_user['id']}").json()["active"] is True
    # With the domain verified by B, B's own membership and id; deactivating it leaves A's.
    with account_context(account_b):
        VerifiedDomain.objects.for_account(account_b).create(
            account=account_b, domain="example.test", mailbox="admin", verified_at=timezone.now()
        )
    b_user = scim_b.post("/Users", okta_user("only-a@example.test")).json()
    assert b_user["id"] != a_user["id"]
    assert scim_b.patch(f"/Users/{b_user['id']}", okta_deactivate()).json()["active"] is False
    assert membership(account_a, person) is not None and membership(account_b, person) is None
    assert scim_a.get(f"/Users/{a_user['id']}").json()["active"] is True


def test_a_deleted_accounts_token_is_401(client, account_a, owner_a):
    scim = Scim(client, make_token(client, account_a))
    from accounts import services

    with account_context(account_a):
        services.account_delete(account=account_a, actor=owner_a)
    assert_error(scim.get("/Users"), 401)


# --- groups: the four roles ------------------------------------------------------------------------


def _group(scim, name):
    return scim.get(f"/Groups/{name}").json()


def _role(account, email):
    return membership(account, User.objects.get(email=email)).role


def test_groups_are_the_four_roles_with_their_members(scim_a, account_a, owner_a):
    viewer = add_member(account_a, role=Role.VIEWER)
    groups = scim_a.get("/Groups").json()
    assert [g["id"] for g in groups["Resources"]] == ["owners", "admins", "members", "viewers"]
    by_id = {g["id"]: [m["display"] for m in g["members"]] for g in groups["Resources"]}
    assert by_id == {"owners": [owner_a.email], "admins": [], "members": [], "viewers": [viewer.email]}
    # Entra's group matching query.
    found = scim_a.get("/Groups", filter='displayName eq "Admins"', excludedAttributes="members").json()
    assert [g["id"] for g in found["Resources"]] == ["admins"] and "members" not in found["Resources"][0]
    assert scim_a.get("/Groups", filter='displayName eq "staff"').json()["totalResults"] == 0
    assert_error(scim_a.get("/Groups", filter='id eq "admins"'), 400, "invalidFilter")
    assert_error(scim_a.get("/Groups/everyone"), 404)
    assert_error(scim_a.post("/Groups", {"displayName": "staff"}), 405)
    assert_error(scim_a.delete("/Groups/admins"), 405)


def test_okta_and_entra_group_patches_set_roles(scim_a, account_a):
    one = scim_a.post("/Users", okta_user("one@example.test")).json()
    two = scim_a.post("/Users", entra_user("two@example.test")).json()
    # Okta's "add members" (developer.okta.com, SCIM 2.0: Update a Group's members).
    response = scim_a.patch(
        "/Groups/admins",
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [
                {
                    "op": "add",
                    "path": "members",
                    "value": [{"value": one["id"], "display": "one@example.test"}, {"value": two["id"]}],
                }
            ],
        },
    )
    assert response.status_code == 204
    assert (_role(account_a, "one@example.test"), _role(account_a, "two@example.test")) == (Role.ADMIN, Role.ADMIN)
    assert sorted(m["display"] for m in _group(scim_a, "admins")["members"]) == ["one@example.test", "two@example.test"]
    # Okta's removal, by filter.
    scim_a.patch(
        "/Groups/admins",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "remove", "path": f'members[value eq "{one["id"]}"]'}]},
    )
    assert _role(account_a, "one@example.test") == Role.MEMBER
    # Entra's removal, with a value list (learn.microsoft.com, "Update Group [Remove Members]").
    scim_a.patch(
        "/Groups/admins",
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "Remove", "path": "members", "value": [{"value": two["id"]}]}],
        },
    )
    assert _role(account_a, "two@example.test") == Role.MEMBER
    # Into viewers, then a PUT of the whole list.
    scim_a.patch(
        "/Groups/viewers",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "Add", "path": "members", "value": [{"value": one["id"]}]}]},
    )
    assert _role(account_a, "one@example.test") == Role.VIEWER
    put = scim_a.put(
        "/Groups/viewers", {"schemas": [GROUP_SCHEMA], "displayName": "viewers", "members": [{"value": two["id"]}]}
    ).json()
    assert [m["value"] for m in put["members"]] == [two["id"]]
    assert (_role(account_a, "one@example.test"), _role(account_a, "two@example.test")) == (Role.MEMBER, Role.VIEWER)


def test_the_owners_group_never_empties(scim_a, account_a, owner_a):
    heir = scim_a.post("/Users", okta_user("heir@example.test")).json()
    next_heir = scim_a.post("/Users", okta_user("next@example.test")).json()
    owner_id = _group(scim_a, "owners")["members"][0]["value"]
    assert_error(scim_a.put("/Groups/owners", {"displayName": "owners", "members": []}), 403)
    assert_error(
        scim_a.patch(
            "/Groups/owners",
            {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "remove", "path": f'members[value eq "{owner_id}"]'}]},
        ),
        403,
    )
    assert membership(account_a, owner_a).role == Role.OWNER
    # Swapping one provisioned owner for another in one list works: the new one is added first.
    scim_a.put("/Groups/owners", {"displayName": "owners", "members": [{"value": owner_id}, {"value": heir["id"]}]})
    response = scim_a.put(
        "/Groups/owners", {"displayName": "owners", "members": [{"value": owner_id}, {"value": next_heir["id"]}]}
    )
    assert response.status_code == 200, response.content
    assert (_role(account_a, "heir@example.test"), _role(account_a, "next@example.test")) == (Role.MEMBER, Role.OWNER)
    assert membership(account_a, owner_a).role == Role.OWNER


@pytest.mark.parametrize(
    "operations,scim_type",
    [
        ([{"op": "replace", "path": "displayName", "value": "superusers"}], "mutability"),
        (
            [{"op": "add", "path": "members", "value": [{"value": "6f1c0b3e-8f1a-4a55-9d39-7b7f0b1f0e11"}]}],
            "invalidValue",
        ),
        ([{"op": "add", "path": "members", "value": "one"}], "invalidValue"),
        ([{"op": "add", "path": "owner", "value": "x"}], "invalidPath"),
        ([{"op": "merge", "path": "members", "value": []}], "invalidSyntax"),
    ],
)
def test_bad_group_patches_are_400_and_change_nothing(scim_a, account_a, operations, scim_type):
    one = scim_a.post("/Users", okta_user("one@example.test")).json()
    patch = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "add", "path": "members", "value": [{"value": one["id"]}]}, *operations],
    }
    assert_error(scim_a.patch("/Groups/admins", patch), 400, scim_type)
    assert _role(account_a, "one@example.test") == Role.MEMBER


def test_a_deactivated_person_cannot_be_given_a_role(scim_a, account_a):
    one = scim_a.post("/Users", okta_user("one@example.test")).json()
    scim_a.patch(f"/Users/{one['id']}", okta_deactivate())
    assert_error(
        scim_a.patch(
            "/Groups/admins",
            {
                "schemas": [PATCH_SCHEMA],
                "Operations": [{"op": "add", "path": "members", "value": [{"value": one["id"]}]}],
            },
        ),
        400,
        "invalidValue",
    )
    assert membership(account_a, User.objects.get(email="one@example.test")) is None


def test_account_bs_token_cannot_give_as_members_roles(client, account_a, account_b, owner_a):
    scim_a, scim_b = Scim(client, make_token(client, account_a)), Scim(client, make_token(client, account_b))
    a_user = scim_a.post("/Users", okta_user("only-a@example.test")).json()
    owner_a_id = _group(scim_a, "owners")["members"][0]["value"]
    for scim_id in (a_user["id"], owner_a_id):
        assert_error(
            scim_b.patch(
                "/Groups/admins",
                {
                    "schemas": [PATCH_SCHEMA],
                    "Operations": [{"op": "add", "path": "members", "value": [{"value": scim_id}]}],
                },
            ),
            400,
            "invalidValue",
        )
        assert_error(
            scim_b.put("/Groups/owners", {"displayName": "owners", "members": [{"value": scim_id}]}),
            400,
            "invalidValue",
        )
    assert (_role(account_a, "only-a@example.test"), membership(account_a, owner_a).role) == (Role.MEMBER, Role.OWNER)
    assert [m["display"] for m in _group(scim_b, "owners")["members"]] == ["owner@beta.test"]
    assert all(g["members"] == [] for g in scim_b.get("/Groups").json()["Resources"] if g["id"] != "owners")

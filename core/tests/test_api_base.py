"""core.views.AccountAPIView is the base of every API view, and the request's transaction is
the view's choice (`account_transaction`), read from the view the middleware is about to call."""

import re

import pytest
from django.db import connection
from django.http import Http404, JsonResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, path
from rest_framework.response import Response

from accounts.tests.factories import make_api_key
from audit.models import AuditEntry
from audit.services import audit_record
from billing.selectors import balance_get
from billing.services import credits_grant
from config.urls import handler404, handler500  # noqa: F401
from config.urls import urlpatterns as real_urlpatterns
from core.tenancy import account_context, current_context
from core.views import AccountAPIView

pytestmark = pytest.mark.django_db


def _api_views(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _api_views(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            route = prefix + str(p.pattern)
            if route.startswith(("api/v1/", "v1/")):
                yield route, p.callback


def test_every_api_view_in_the_urlconf_inherits_the_base():
    views = list(_api_views(get_resolver().url_patterns))
    assert len(views) > 20  # the walk found the API
    outside = [
        f"{route} ({getattr(callback, '__name__', callback)})"
        for route, callback in views
        if not issubclass(getattr(callback, "cls", None) or getattr(callback, "view_class", object), AccountAPIView)
    ]
    assert not outside, "inherit core.views.AccountAPIView: " + ", ".join(outside)


# --- the transaction choice, probed -----------------------------------------------------------


def _where() -> dict:
    """Where a view runs: how deep in atomic blocks, and in which account's context."""
    return {"atomic_depth": len(connection.atomic_blocks), "account_id": current_context().account_id}


class InsideView(AccountAPIView):
    def get(self, request):
        return Response({**_where(), "view_account_id": self.account.pk, "principal": self.principal.pk})


class OutsideView(AccountAPIView):
    account_transaction = False

    def get(self, request):
        return Response({**_where(), "view_account_id": self.account.pk, "principal": self.principal.pk})


def page_inside(request):
    return JsonResponse(_where())


def page_outside(request):
    return JsonResponse(_where())


page_outside.account_transaction = False


def page_writes_then_fails(request):
    audit_record(account=request.account, action="member.add", target="written before a failure")
    if request.GET.get("answer") == "404":
        raise Http404("an answer, not a failure")
    raise ZeroDivisionError("a bug")


def page_template(request):
    from django.template.response import TemplateResponse

    return TemplateResponse(request, "errors/404.html", status=200)


urlpatterns = [
    path("api/v1/_inside/", InsideView.as_view()),
    path("api/v1/_outside/", OutsideView.as_view()),
    path("_page/inside/", page_inside),
    path("_page/outside/", page_outside),
    path("_page/fails/", page_writes_then_fails),
    path("_page/template/", page_template),
    *real_urlpatterns,
]


def _bearer(key: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


@pytest.mark.urls(__name__)
def test_a_view_with_account_transaction_false_runs_outside_a_transaction(client, account_a):
    key = make_api_key(account_a)
    baseline = len(connection.atomic_blocks)  # the test's own transaction
    inside = client.get("/api/v1/_inside/", **_bearer(key)).json()
    outside = client.get("/api/v1/_outside/", **_bearer(key)).json()
    assert inside["atomic_depth"] == baseline + 1 and inside["account_id"] == account_a.pk
    assert outside["atomic_depth"] == baseline and outside["account_id"] is None
    # Both still know their account and principal (the key), transaction or not.
    assert inside["view_account_id"] == outside["view_account_id"] == account_a.pk
    assert inside["principal"] == outside["principal"]


@pytest.mark.urls(__name__)
def test_pages_choose_the_same_way(client_a, account_a):
    baseline = len(connection.atomic_blocks)
    assert client_a.get("/_page/inside/").json() == {"atomic_depth": baseline + 1, "account_id": account_a.pk}
    assert client_a.get("/_page/outside/").json() == {"atomic_depth": baseline, "account_id": None}


@pytest.mark.urls(__name__)
def test_the_key_is_touched_with_or_without_a_transaction(client, account_a):
    from accounts.models import ApiKey

    for route in ("/api/v1/_outside/", "/api/v1/_inside/", "/api/v1/no-such-thing/"):
        key = make_api_key(account_a, name=route)
        client.get(route, **_bearer(key))
        with account_context(account_a):
            assert ApiKey.objects.for_account(account_a).get(name=route).last_used_at is not None, route


def _entries(account) -> list[str]:
    with account_context(account):
        return list(
            AuditEntry.objects.for_account(account).filter(action="member.add").values_list("target", flat=True)
        )


@pytest.fixture
def balance(account_a) -> int:
    with account_context(account_a):
        credits_grant(account=account_a, amount=1234, reason="test")
        return balance_get(account=account_a)


def _shown_balance(response) -> int | None:
    """The balance in the page's header, which reads the account's rows (RLS: none outside
    the account's context)."""
    found = re.search(r"data-balance>([^<]+)<", response.content.decode())
    return int(re.sub(r"\D", "", found.group(1))) if found else None


@pytest.mark.urls(__name__)
def test_a_failed_view_is_rolled_back_and_a_404_is_an_answer(account_a, balance):
    client = Client(raise_request_exception=False)
    client.force_login(account_a.test_owner)
    assert client.get("/_page/fails/").status_code == 500
    assert "written before a failure" not in _entries(account_a)
    response = client.get("/_page/fails/?answer=404")
    # The 404 page renders in the request's transaction, which commits.
    assert response.status_code == 404 and _shown_balance(response) == balance
    assert "written before a failure" in _entries(account_a)


@pytest.mark.urls(__name__)
def test_pages_without_a_view_and_template_responses_read_the_account(client_a, balance):
    for route in ("/_page/template/", "/no-such-page/"):
        assert _shown_balance(client_a.get(route)) == balance, route


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)  # the ASGI handler's thread has its own connection
def test_the_choice_holds_under_asgi(account_a):
    """Served by daphne, each middleware step runs in its own copy of the context variables:
    the transaction is opened and closed around the view in one frame all the same."""
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    key = make_api_key(account_a)
    client, auth = AsyncClient(), {"Authorization": f"Bearer {key}"}
    baseline = 0  # that connection, outside any request
    inside = async_to_sync(client.get)("/api/v1/_inside/", headers=auth).json()
    outside = async_to_sync(client.get)("/api/v1/_outside/", headers=auth).json()
    assert inside["atomic_depth"] == baseline + 1 and inside["account_id"] == account_a.pk
    assert outside["atomic_depth"] == baseline and outside["account_id"] is None
    assert current_context().account_id is None  # nothing leaked into the caller's context

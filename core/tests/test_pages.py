"""The page-view base (core.pages), through real requests: a page of the session's account
refuses a member without the right (the 403 page, saying why), answers 404 without an
account and for another account's thing, and its form round trip keeps the input on a 400."""

import pytest
from django import forms
from django.contrib.messages import get_messages
from django.http import HttpResponse
from django.urls import include, path

from accounts.models import Role
from accounts.permissions import Action, page_check
from accounts.tests.factories import add_member, make_user
from core.error_codes import CoreErrorCode
from core.errors import GroundworkError
from core.pages import account_page, form_round_trip, page_found, page_post
from core.tenancy import account_context
from documents.models import Collection
from documents.selectors import collection_access_by_id


class NameForm(forms.Form):
    name = forms.CharField(max_length=20)


def _save(data):
    """A service: refuses some names the way domain services do."""
    if data["name"] == "taken":
        raise GroundworkError("duplicate_name", "That name is taken.", status=409, field="name")
    if data["name"] == "mine":
        raise GroundworkError(CoreErrorCode.FORBIDDEN, "As a member, you may not rename this.", status=403)
    return data["name"].upper()


@account_page(page_check(Action.MEMBERS_MANAGE), methods=("GET", "POST"))
def managers_page(request):
    return HttpResponse(f"the team of {request.account.name}")


@account_page()
def collection_page(request, collection_id: int):
    collection = page_found(collection_access_by_id, account=request.account, collection_id=collection_id)
    return HttpResponse(collection.name)


@account_page(methods=("POST",))
def form_page(request):
    return form_round_trip(
        request,
        NameForm(request.POST),
        act=_save,
        to="/elsewhere/",
        success=lambda saved: f"Saved as {saved}.",
        rerender=lambda form, status: HttpResponse(form.as_p(), status=status),
    )


@account_page(methods=("POST",))
def button_page(request):
    def act():
        if request.POST.get("missing"):
            raise GroundworkError(CoreErrorCode.NOT_FOUND, "Not here.", status=404)
        raise GroundworkError("busy", "Try again later.")

    return page_post(request, act, to="/elsewhere/", success="Done.", refusal_pages=request.POST.get("pages") == "1")


urlpatterns = [
    path("t/managers/", managers_page),
    path("t/collections/<int:collection_id>/", collection_page),
    path("t/form/", form_page),
    path("t/button/", button_page),
    path("", include("config.urls")),
]
pytestmark = pytest.mark.urls("core.tests.test_pages")


def _messages(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def test_a_page_sends_the_signed_out_to_the_login_page(client):
    response = client.get("/t/managers/")
    assert response.status_code == 302 and response.url.startswith("/login/")


def test_a_page_refuses_a_member_without_the_right_saying_why(client, account_a):
    member = add_member(account_a, role=Role.MEMBER)
    client.force_login(member)
    response = client.get("/t/managers/")
    assert response.status_code == 403
    assert "As a member, you may not manage members and invitations." in response.content.decode()


def test_a_page_serves_a_member_with_the_right(client, account_a):
    admin = add_member(account_a, role=Role.ADMIN)
    client.force_login(admin)
    response = client.get("/t/managers/")
    assert response.status_code == 200 and response.content.decode() == f"the team of {account_a.name}"


def test_a_page_is_404_without_an_account_and_405_for_another_method(client, account_a):
    client.force_login(make_user())  # a member of nothing
    assert client.get("/t/managers/").status_code == 404
    client.force_login(account_a.test_owner)
    assert client.put("/t/managers/").status_code == 405
    assert client.get("/t/form/").status_code == 405


def test_another_accounts_thing_answers_like_a_missing_one(client_a, account_a, account_b):
    with account_context(account_a):
        own = Collection.objects.for_account(account_a).get(is_default=True)
    with account_context(account_b):
        theirs = Collection.objects.for_account(account_b).get(is_default=True)
    assert client_a.get(f"/t/collections/{own.pk}/").status_code == 200
    assert client_a.get(f"/t/collections/{theirs.pk}/").status_code == 404
    assert client_a.get(f"/t/collections/{theirs.pk + 1000}/").status_code == 404


def test_the_form_round_trip_re_renders_invalid_input_with_400_and_keeps_it(client_a):
    response = client_a.post("/t/form/", {"name": "x" * 21})
    html = response.content.decode()
    assert response.status_code == 400
    assert 'value="' + "x" * 21 + '"' in html and "at most 20 characters" in html
    assert _messages(response) == []


def test_the_form_round_trip_puts_a_refusal_on_its_field_with_its_status(client_a):
    response = client_a.post("/t/form/", {"name": "taken"})
    html = response.content.decode()
    assert response.status_code == 409
    assert 'value="taken"' in html and "That name is taken." in html


def test_the_form_round_trip_shows_a_refusal_by_role_as_the_403_page(client_a):
    response = client_a.post("/t/form/", {"name": "mine"})
    assert response.status_code == 403 and "you may not rename this" in response.content.decode()


def test_the_form_round_trip_redirects_with_the_success_message(client_a):
    response = client_a.post("/t/form/", {"name": "ok"})
    assert response.status_code == 302 and response.url == "/elsewhere/"
    assert _messages(response) == [("success", "Saved as OK.")]


def test_a_button_tells_its_refusal_on_the_next_page_or_as_the_404_page(client_a):
    told = client_a.post("/t/button/")
    assert told.status_code == 302 and told.url == "/elsewhere/"
    assert _messages(told) == [("error", "Try again later.")]
    assert client_a.post("/t/button/", {"missing": "1"}).status_code == 302  # told, not a page
    assert client_a.post("/t/button/", {"missing": "1", "pages": "1"}).status_code == 404

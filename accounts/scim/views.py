"""/scim/v2/: thin views. Each authenticates the bearer SCIM token, runs in the token's
account context (one transaction, row-level security scoped to that account only) and
answers application/scim+json; every refusal is a SCIM error body."""

from __future__ import annotations

import json
from functools import wraps

from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from accounts.errors import AccountError
from accounts.resolution import bearer_token
from accounts.scim import selectors, serializers, services
from accounts.scim.errors import ScimError, ScimType
from accounts.scim.tokens import scim_token_maker_is_owner
from audit.actors import acting_as
from core.tenancy import account_context

SCIM_CONTENT_TYPE = "application/scim+json"


def _response(body, status: int = 200) -> HttpResponse:
    if body is None:
        return HttpResponse(status=status)
    return HttpResponse(json.dumps(body), status=status, content_type=SCIM_CONTENT_TYPE)


def _error(error: ScimError) -> HttpResponse:
    response = _response(serializers.error_body(error), status=error.status)
    if error.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="scim"'
    return response


def scim_endpoint(*methods: str):
    """The view answers `methods` for the token's account; anything else is 401/405."""

    def decorate(view):
        @csrf_exempt  # a bearer token, never a cookie, authenticates these requests
        @wraps(view)
        def endpoint(request, *args, **kwargs):
            token = selectors.scim_token_for_secret(raw=bearer_token(request.headers.get("Authorization")) or "")
            if token is None:
                return _error(
                    ScimError(
                        401,
                        "A valid SCIM token is required: Authorization: Bearer <token> "
                        "(an owner makes one on the Team page).",
                    )
                )
            if request.method not in methods:
                return _error(ScimError(405, f"{request.method} is not supported here; use {', '.join(methods)}."))
            base_url = request.build_absolute_uri(reverse("scim:root")).rstrip("/")
            try:
                with account_context(token.account), acting_as(services.scim_actor(token)):
                    if not scim_token_maker_is_owner(token=token):
                        # Revoked with its maker's rights (accounts/scim/tokens.py); this also
                        # holds when the maker's user or membership went another way.
                        raise ScimError(
                            401,
                            "This SCIM token's maker is no longer an owner of the account, so "
                            "it no longer works: an owner makes a new one on the Team page.",
                        )
                    services.scim_token_touch(token=token)
                    return view(request, *args, token=token, base_url=base_url, **kwargs)
            except ScimError as exc:
                return _error(exc)
            except AccountError as exc:  # a member service's refusal the SCIM services did not word
                return _error(ScimError(exc.status, exc.message))

        # The account is the token's, not the session's: no request transaction
        # (accounts.middleware); the endpoint opens the token account's context itself.
        endpoint.account_transaction = False
        return endpoint

    return decorate


def _body(request):
    try:
        return json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ScimError(400, "The body is not valid JSON.", ScimType.INVALID_SYNTAX) from exc


@scim_endpoint("GET", "POST")
def users_view(request, *, token, base_url):
    account = token.account
    if request.method == "POST":
        created = services.scim_user_create(
            account=account,
            token=token,
            changes=serializers.changes_from_resource(_body(request)),
            site_url=request.build_absolute_uri("/").rstrip("/"),
        )
        if isinstance(created, services.ScimInvited):
            # Answered, not raised: raising would roll back the invitation with the context.
            return _error(ScimError(409, created.detail, ScimType.UNIQUENESS))
        identity = selectors.scim_identity_access_by_id(account=account, scim_id=created.scim_id)
        response = _response(serializers.user_resource(identity, base_url=base_url), status=201)
        response["Location"] = f"{base_url}/Users/{identity.scim_id}"
        return response
    lookup = serializers.parse_filter(request.GET.get("filter"))
    start, count = serializers.parse_paging(request.GET)
    services.scim_identities_ensure(account=account)
    identities = selectors.scim_identity_list(account=account, **lookup)
    page = list(identities[start - 1 : start - 1 + count]) if count else []
    return _response(
        serializers.list_response(
            [serializers.user_resource(i, base_url=base_url) for i in page], total=identities.count(), start_index=start
        )
    )


@scim_endpoint("GET", "PUT", "PATCH", "DELETE")
def user_view(request, scim_id: str, *, token, base_url):
    account = token.account
    identity = selectors.scim_identity_access_by_id(account=account, scim_id=scim_id)
    if request.method == "DELETE":
        services.scim_user_delete(account=account, token=token, identity=identity)
        return _response(None, status=204)
    if request.method in ("PUT", "PATCH"):
        body = _body(request)
        changes = (
            serializers.changes_from_resource(body)
            if request.method == "PUT"
            else serializers.changes_from_patch(body, current=identity)
        )
        services.scim_user_update(account=account, token=token, identity=identity, changes=changes)
        identity = selectors.scim_identity_access_by_id(account=account, scim_id=scim_id)
    return _response(serializers.user_resource(identity, base_url=base_url))


def _group_members(account, group: str) -> list:
    return list(selectors.scim_identity_list_in_role(account=account, role=services.GROUP_ROLES[group]))


def _wants_members(request) -> bool:
    excluded = {a.strip().lower() for a in request.GET.get("excludedAttributes", "").split(",")}
    return "members" not in excluded


@scim_endpoint("GET")
def groups_view(request, *, token, base_url):
    """The four fixed groups, one per role (a group cannot be created or deleted)."""
    account = token.account
    names = serializers.parse_group_filter(request.GET.get("filter"), services.GROUP_ROLES)
    start, count = serializers.parse_paging(request.GET)
    page = names[start - 1 : start - 1 + count]
    if _wants_members(request):
        services.scim_identities_ensure(account=account)
    resources = [
        serializers.group_resource(
            g, _group_members(account, g) if _wants_members(request) else None, base_url=base_url
        )
        for g in page
    ]
    return _response(serializers.list_response(resources, total=len(names), start_index=start))


@scim_endpoint("GET", "PUT", "PATCH")
def group_view(request, group: str, *, token, base_url):
    account = token.account
    if group not in services.GROUP_ROLES:
        raise ScimError(404, f"No group {group!r}: the groups are owners, admins, members and viewers.")
    if request.method in ("PUT", "PATCH"):
        services.scim_identities_ensure(account=account)
        if request.method == "PUT":
            add, remove, replace = [], [], serializers.group_members_from_put(_body(request), group=group)
        else:
            add, remove, replace = serializers.group_changes_from_patch(_body(request), group=group)
        services.scim_group_members_change(
            account=account, token=token, group=group, add=add, remove=remove, replace=replace
        )
        if request.method == "PATCH":
            return _response(None, status=204)
    services.scim_identities_ensure(account=account)
    members = _group_members(account, group) if _wants_members(request) else None
    return _response(serializers.group_resource(group, members, base_url=base_url))


@scim_endpoint("GET")
def service_provider_config_view(request, *, token, base_url):
    return _response(serializers.service_provider_config(base_url=base_url))


@scim_endpoint("GET")
def schemas_view(request, *, token, base_url):
    found = serializers.schemas(base_url=base_url)
    return _response(serializers.list_response(found, total=len(found), start_index=1))


@scim_endpoint("GET")
def resource_types_view(request, *, token, base_url):
    found = serializers.resource_types(base_url=base_url)
    return _response(serializers.list_response(found, total=len(found), start_index=1))


@scim_endpoint("GET", "POST", "PUT", "PATCH", "DELETE")
def not_found_view(request, rest: str = "", *, token, base_url):
    raise ScimError(404, f"There is no SCIM endpoint /{rest}: see {base_url}/ResourceTypes.")

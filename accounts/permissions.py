"""Who may do what: the one table of roles and API-key scopes, and its checks for every surface.

A principal is a member (their `Membership`, whose `role` is owner, admin, member or viewer)
or an API key (its `scope`, read or write). `RULES` says, for each `Action`, what each of the
six may do: all of it, only what they uploaded themselves, or nothing. Everything else asks
here: the REST API (`allows(...)`, a DRF permission), /v1 and the websocket (`principal_may`
with the socket's principal), the services (`actor_require`: the actor's membership, then the
check), the pages (`page_require`, and `page_check` for core.pages.account_page) and their
buttons (`may` in every template). The table of docs/security/permissions.md ("Who may do what") is this
table; a test keeps them equal.

A write key may delete and reindex any document of its account: keys are made by owners and
admins, who may, and an integration that keeps a document store in sync must be able to
replace documents that a person (or another key) uploaded. A key never manages keys, members,
budgets, billing or the account, and never reads the audit log: those are people's decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.core.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

from accounts.errors import AccountError
from accounts.models import ApiKey, KeyScope, Membership, Role
from core.error_codes import CoreErrorCode


class Action(StrEnum):
    DOCUMENT_READ = "document.read"  # list documents, open one (chunks), live statuses
    SEARCH = "search"
    CHAT = "chat"  # ask (every surface) and read one's own conversations
    CREDITS_VIEW = "credits.view"  # the balance and the ledger
    DOCUMENT_UPLOAD = "document.upload"
    DOCUMENT_DELETE = "document.delete"
    DOCUMENT_REINDEX = "document.reindex"  # one document
    ACCOUNT_REINDEX = "account.reindex"  # every document (and cancelling that run)
    COLLECTIONS_MANAGE = "collections.manage"  # create, restrict, delete collections; move documents
    KEYS_MANAGE = "keys.manage"  # create, list, revoke API keys
    MEMBERS_MANAGE = "members.manage"  # invitations, roles, removing members (the Team page)
    AUDIT_VIEW = "audit.view"
    BUDGETS_MANAGE = "budgets.manage"  # credit caps per member and per key
    BILLING_MANAGE = "billing.manage"  # the account's billing settings; buying credits (billing/purchases)
    ACCOUNT_DELETE = "account.delete"
    DATA_EXPORT = "data.export"  # one's own data export (a person's, across their accounts)
    FEEDBACK_VIEW = "feedback.view"  # everyone's thumbs up/down on answers, with the answers
    DOCUMENT_TAG = "document.tag"  # set a document's tags (they steer retrieval)
    RETRIEVAL_SETTINGS = "retrieval.settings"  # read and set the account's excluded tags
    SCIM_MANAGE = "scim.manage"  # create and revoke the account's SCIM provisioning tokens
    DOMAINS_MANAGE = "domains.manage"  # the account's verified domains (SCIM adds their people at once)
    SSO_REQUIRE = "sso.require"  # the switch "Members must sign in with SSO"
    ACCOUNT_RENAME = "account.rename"  # the team's name (the Team page, PATCH account/)


class Grant(StrEnum):
    ALL = "yes"
    OWN = "own"  # only what the principal uploaded itself
    NONE = "no"


READ_KEY, WRITE_KEY = f"key:{KeyScope.READ}", f"key:{KeyScope.WRITE}"
# The table's columns, in the order of docs/security/permissions.md.
GRANTEES = (Role.OWNER.value, Role.ADMIN.value, Role.MEMBER.value, Role.VIEWER.value, READ_KEY, WRITE_KEY)
GRANTEE_LABELS = {
    Role.OWNER.value: "owner",
    Role.ADMIN.value: "admin",
    Role.MEMBER.value: "member",
    Role.VIEWER.value: "viewer",
    READ_KEY: "read key",
    WRITE_KEY: "write key",
}

_Y, _O, _N = Grant.ALL, Grant.OWN, Grant.NONE
#                           owner admin member viewer read-key write-key
_TABLE = {
    Action.DOCUMENT_READ: (_Y, _Y, _Y, _Y, _Y, _Y),
    Action.SEARCH: (_Y, _Y, _Y, _Y, _Y, _Y),
    Action.CHAT: (_Y, _Y, _Y, _Y, _Y, _Y),
    Action.CREDITS_VIEW: (_Y, _Y, _Y, _Y, _Y, _Y),
    Action.DOCUMENT_UPLOAD: (_Y, _Y, _Y, _N, _N, _Y),
    Action.DOCUMENT_DELETE: (_Y, _Y, _O, _N, _N, _Y),
    Action.DOCUMENT_REINDEX: (_Y, _Y, _N, _N, _N, _Y),
    Action.ACCOUNT_REINDEX: (_Y, _Y, _N, _N, _N, _Y),
    Action.COLLECTIONS_MANAGE: (_Y, _Y, _N, _N, _N, _N),
    Action.KEYS_MANAGE: (_Y, _Y, _N, _N, _N, _N),
    Action.MEMBERS_MANAGE: (_Y, _Y, _N, _N, _N, _N),
    Action.AUDIT_VIEW: (_Y, _Y, _N, _N, _N, _N),
    Action.BUDGETS_MANAGE: (_Y, _Y, _N, _N, _N, _N),
    Action.BILLING_MANAGE: (_Y, _N, _N, _N, _N, _N),
    Action.ACCOUNT_DELETE: (_Y, _N, _N, _N, _N, _N),
    Action.DATA_EXPORT: (_Y, _Y, _Y, _Y, _N, _N),
    Action.FEEDBACK_VIEW: (_Y, _Y, _N, _N, _N, _N),
    Action.DOCUMENT_TAG: (_Y, _Y, _O, _N, _N, _Y),
    Action.RETRIEVAL_SETTINGS: (_Y, _Y, _N, _N, _N, _N),
    Action.SCIM_MANAGE: (_Y, _N, _N, _N, _N, _N),
    Action.DOMAINS_MANAGE: (_Y, _N, _N, _N, _N, _N),
    Action.SSO_REQUIRE: (_Y, _N, _N, _N, _N, _N),
    Action.ACCOUNT_RENAME: (_Y, _N, _N, _N, _N, _N),
}
RULES: dict[Action, dict[str, Grant]] = {action: dict(zip(GRANTEES, row)) for action, row in _TABLE.items()}

# What a refusal says the principal tried: "… may not {phrase}."
PHRASES = {
    Action.DOCUMENT_READ: "read documents",
    Action.SEARCH: "search",
    Action.CHAT: "chat",
    Action.CREDITS_VIEW: "see credits",
    Action.DOCUMENT_UPLOAD: "upload documents",
    Action.DOCUMENT_DELETE: "delete this document",
    Action.DOCUMENT_REINDEX: "reindex documents",
    Action.ACCOUNT_REINDEX: "reindex every document",
    Action.COLLECTIONS_MANAGE: "manage collections",
    Action.KEYS_MANAGE: "manage API keys",
    Action.MEMBERS_MANAGE: "manage members and invitations",
    Action.AUDIT_VIEW: "read the audit log",
    Action.BUDGETS_MANAGE: "set credit budgets",
    Action.BILLING_MANAGE: "manage billing",
    Action.ACCOUNT_DELETE: "delete the account",
    Action.DATA_EXPORT: "export a person's data",
    Action.FEEDBACK_VIEW: "read the team's feedback on answers",
    Action.DOCUMENT_TAG: "tag this document",
    Action.RETRIEVAL_SETTINGS: "change the account's retrieval settings",
    Action.SCIM_MANAGE: "manage SCIM provisioning tokens",
    Action.DOMAINS_MANAGE: "manage the verified domains",
    Action.SSO_REQUIRE: "change the single sign-on requirement",
    Action.ACCOUNT_RENAME: "rename the team",
}


class Forbidden(AccountError):
    """Refused by role or key scope: 403 `forbidden` (docs/security/permissions.md) on every surface."""

    status = 403

    def __init__(self, message: str):
        super().__init__(CoreErrorCode.FORBIDDEN, message, status=403)


@dataclass(frozen=True)
class Grantee:
    column: str  # one of GRANTEES
    user_id: int | None  # the member's user (what they "own"); None for a key


def grantee_of(principal) -> Grantee | None:
    """The table's column for a Membership, an ApiKey, or anything that carries them (an
    HTTP request, a DRF request, a websocket's principal): its key first, else its member."""
    if isinstance(principal, ApiKey):
        # An unknown scope reads as read-only: fail towards less.
        scope = principal.scope if principal.scope in KeyScope.values else KeyScope.READ
        return Grantee(f"key:{scope}", None)
    if isinstance(principal, Membership):
        return Grantee(principal.role, principal.user_id) if principal.role in GRANTEES else None
    api_key = getattr(principal, "api_key", None)
    if api_key is not None:
        return grantee_of(api_key)
    membership = getattr(principal, "membership", None)
    return grantee_of(membership) if membership is not None else None


def _grant(principal, action: Action) -> tuple[Grantee | None, Grant]:
    grantee = grantee_of(principal)
    if grantee is None:
        return None, Grant.NONE
    return grantee, RULES[Action(action)].get(grantee.column, Grant.NONE)


def grant_of(principal, action: Action) -> Grant:
    """The principal's grant for `action`: all, only its own, or none."""
    return _grant(principal, action)[1]


def principal_may(principal, action: Action, obj=None) -> bool:
    """May the principal do `action` (to `obj`, for an action that can be limited to one's own
    things)? An own-only grant without an object is a no: pass the object."""
    grantee, grant = _grant(principal, action)
    if grant is Grant.ALL:
        return True
    if grant is Grant.OWN and obj is not None:
        owner_id = getattr(obj, "uploaded_by_id", None)
        return grantee.user_id is not None and owner_id == grantee.user_id
    return False


def principal_may_some(principal, action: Action) -> bool:
    """May the principal do `action` to at least some things (its own)? For a surface that
    checks the object itself afterwards, and for showing a control at all."""
    return _grant(principal, action)[1] is not Grant.NONE


def refusal_message(principal, action: Action) -> str:
    grantee = grantee_of(principal)
    if grantee is None:
        who = "You"
    elif grantee.column == READ_KEY:
        return (
            f"This API key is read-only (scope read): it may read, search and chat, not {PHRASES[action]}. "
            "An owner or admin can create a key with scope write on the Team page."
        )
    elif grantee.column == WRITE_KEY:
        who = "An API key"
    else:
        who = f"As {'an' if grantee.column in ('owner', 'admin') else 'a'} {grantee.column}, you"
    if grantee is not None and RULES[Action(action)].get(grantee.column) is Grant.OWN:
        return f"{who} may only {PHRASES[action].split(' ')[0]} what you uploaded yourself."
    return f"{who} may not {PHRASES[action]}. Ask an owner or admin of the account."


def principal_require(principal, action: Action, obj=None) -> None:
    """`principal_may`, or the 403 `forbidden` error that says why not."""
    if not principal_may(principal, action, obj):
        raise Forbidden(refusal_message(principal, action))


def actor_require(*, account, actor, action: Action, outsider: str | None = None) -> Membership | ApiKey:
    """What a service's `actor` acts as in `account`, if it may do `action`: an API key is
    itself; a person is their membership there. Else the 403 `forbidden` error: `outsider`
    for a person who is not a member (where given), the table's refusal otherwise."""
    principal = actor
    if not isinstance(actor, ApiKey):
        user_id = getattr(actor, "pk", None)
        principal = Membership.objects.for_account(account).filter(user_id=user_id).first() if user_id else None
        if principal is None and outsider is not None:
            raise Forbidden(outsider)
    principal_require(principal, action)
    return principal


# --- the REST API ------------------------------------------------------------------------------


class RoleAllows(BasePermission):
    """A DRF permission from a view's `required_actions` ({"GET": Action, "POST": …}); made by
    `allows()`. Put it after HasAccount, which answers 401 for a request with no principal.
    A refusal raises `Forbidden`, which core.api maps to 403 {"error": {"code": "forbidden"}}."""

    required_actions: dict[str, Action] = {}

    def has_permission(self, request, view):
        method = "GET" if request.method in ("HEAD", "OPTIONS") else request.method
        action = self.required_actions.get(method)
        if action is None:
            return True  # DRF answers 405 for a method the view does not have
        if not principal_may_some(request, action):
            raise Forbidden(refusal_message(request, action))
        return True


def allows(action: Action | None = None, **by_method: Action) -> type[RoleAllows]:
    """`allows(Action.SEARCH)` for every method, or `allows(GET=…, POST=…)` per method."""
    actions = {m: action for m in ("GET", "POST", "PUT", "PATCH", "DELETE")} if action is not None else {}
    actions.update({method.upper(): a for method, a in by_method.items()})
    name = "Allows_" + "_".join(f"{m}_{a.value}" for m, a in sorted(actions.items()))
    return type(name, (RoleAllows,), {"required_actions": actions})


# --- pages -------------------------------------------------------------------------------------


class PageForbidden(PermissionDenied):
    """A page refused by role: Django's 403 handler renders templates/403.html with the reason."""


def page_require(request, action: Action, obj=None) -> None:
    """For a dashboard page: the 403 page unless the session's member may (also for own-only
    grants with `obj=None`: then `obj` must be checked by the view)."""
    allowed = principal_may(request, action, obj) if obj is not None else principal_may_some(request, action)
    if not allowed:
        raise PageForbidden(refusal_message(request, action))


def page_check(action: Action):
    """A page's check for core.pages.account_page: `page_require(request, action)`."""

    def check(request) -> None:
        page_require(request, action)

    return check


def section_account(context, action: Action):
    """For a Team page section (an inclusion tag): the session's account if its member may do
    `action`, else None (the section is not shown)."""
    request = context["request"]
    account = getattr(request, "account", None)
    return account if account is not None and principal_may(request, action) else None


class Abilities:
    """`may` in templates (accounts.context_processors): `{% if may.document_upload %}`, true when
    the principal may do it to something. Own-only grants are decided per object by the views."""

    def __init__(self, principal):
        self._principal = principal

    def __getattr__(self, name: str) -> bool:
        try:
            action = Action(name.replace("_", ".", 1))
        except ValueError:
            raise AttributeError(name) from None
        return principal_may_some(self._principal, action)

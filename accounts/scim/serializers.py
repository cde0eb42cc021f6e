"""SCIM's wire format (RFC 7643, 7644): users as resources, request bodies as changes, the
list and error envelopes, filters, and the three discovery documents."""

from __future__ import annotations

import re

from accounts.scim.errors import ScimError, ScimType
from accounts.scim.models import ScimIdentity
from accounts.scim.services import UserChanges

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
MAX_COUNT = 200
# The largest startIndex answered (PostgreSQL's OFFSET is a bigint; no directory is this long).
MAX_START_INDEX = 2**31 - 1

# User attributes a provider may send that Groundwork does not keep (Entra's default mapping
# sends several): accepted and not stored, so a sync does not fail on them.
IGNORED_ATTRIBUTES = {
    "title",
    "phonenumbers",
    "addresses",
    "preferredlanguage",
    "locale",
    "timezone",
    "nickname",
    "profileurl",
    "usertype",
    "photos",
    "ims",
    "x509certificates",
    "password",
    "entitlements",
    "roles",
    "groups",
    "schemas",
    "meta",
    "id",
    "name.formatted",
    "name.middlename",
    "name.honorificprefix",
    "name.honorificsuffix",
}


# --- out ----------------------------------------------------------------------------------------


def user_resource(identity: ScimIdentity, *, base_url: str) -> dict:
    user = identity.user
    given, family = identity.given_name, identity.family_name
    if not (given or family) and user.full_name:
        given, _, family = user.full_name.partition(" ")
    formatted = " ".join(p for p in (given, family) if p)
    emails = identity.emails or [{"value": user.email, "type": "work", "primary": True}]
    resource = {
        "schemas": [USER_SCHEMA],
        "id": str(identity.scim_id),
        "userName": user.email,
        "name": {"givenName": given, "familyName": family, "formatted": formatted},
        "displayName": identity.display_name or formatted or user.email,
        "emails": emails,
        "active": bool(identity.is_member),
        "meta": {
            "resourceType": "User",
            "created": identity.created_at.isoformat(),
            "lastModified": identity.updated_at.isoformat(),
            "location": f"{base_url}/Users/{identity.scim_id}",
        },
    }
    if identity.external_id:
        resource["externalId"] = identity.external_id
    return resource


def list_response(resources: list, *, total: int, start_index: int) -> dict:
    return {
        "schemas": [LIST_SCHEMA],
        "totalResults": total,
        "startIndex": start_index,
        "itemsPerPage": len(resources),
        "Resources": resources,
    }


def error_body(error: ScimError) -> dict:
    body = {"schemas": [ERROR_SCHEMA], "status": str(error.status), "detail": error.detail}
    if error.scim_type:
        body["scimType"] = str(error.scim_type)
    return body


# --- in -----------------------------------------------------------------------------------------

_FILTER = re.compile(r'^\s*(userName|externalId)\s+eq\s+"((?:[^"\\]|\\.)*)"\s*$', re.IGNORECASE)


def parse_filter(raw: str | None) -> dict:
    """`userName eq "…"` (case-insensitive, as RFC 7643 makes userName) or `externalId eq "…"`:
    the selector's keyword arguments. What providers send to match a person; anything else
    is refused (400 invalidFilter) rather than answered with every user."""
    if raw is None or not raw.strip():
        return {}
    match = _FILTER.match(raw)
    if match is None:
        raise ScimError(
            400, 'Only the filters userName eq "…" and externalId eq "…" are supported.', ScimType.INVALID_FILTER
        )
    value = re.sub(r"\\(.)", r"\1", match.group(2))
    return {"user_name": value} if match.group(1).lower() == "username" else {"external_id": value}


def parse_paging(query) -> tuple[int, int]:
    """(startIndex, count) from the query: 1-based, a start below 1 reads as 1; count 0
    asks for the total only, a negative count is 0, and it is capped at MAX_COUNT (RFC 7644
    §3.4.2.4). Not a whole number, or a start past MAX_START_INDEX: 400 naming the parameter."""

    def number(name: str, default: int) -> int:
        raw = query.get(name)
        if raw in (None, ""):
            return default
        try:
            return int(raw)
        except ValueError as exc:
            raise ScimError(400, f"{name} must be a whole number.", ScimType.INVALID_VALUE) from exc

    start = number("startIndex", 1)
    if start > MAX_START_INDEX:
        raise ScimError(400, f"startIndex must be at most {MAX_START_INDEX}.", ScimType.INVALID_VALUE)
    return max(start, 1), min(max(number("count", 100), 0), MAX_COUNT)


def parse_active(value) -> bool:
    """`true`/`false`, also as the strings Entra sends ("True", "False")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ScimError(400, f"active must be true or false, not {value!r}.", ScimType.INVALID_VALUE)


def _attribute(path: str) -> str:
    """A path without its schema URN, lower-cased (SCIM attribute names are case-insensitive)."""
    path = path.strip()
    if path.lower().startswith(USER_SCHEMA.lower() + ":"):
        return path[len(USER_SCHEMA) + 1 :].lower()
    if path.lower().startswith("urn:"):
        # An extension's attribute (Entra's enterprise or a custom one): not kept here.
        return "extension." + path.lower()
    return path.lower()


_EMAIL_OF_TYPE = re.compile(r'^emails\[type eq "([a-z]+)"\]\.value$')


def _set(changes: UserChanges, attribute: str, value, *, op: str = "replace") -> None:
    """One attribute of a resource or a PATCH operation onto `changes`."""
    if attribute == "active":
        changes.active = parse_active(value)
    elif attribute == "username":
        changes.user_name = value
    elif attribute == "externalid":
        changes.external_id = value
    elif attribute == "displayname":
        changes.display_name = value
    elif attribute == "name":
        if not isinstance(value, dict):
            raise ScimError(400, "name must be an object (givenName, familyName).", ScimType.INVALID_VALUE)
        for key, part in value.items():
            _set(changes, f"name.{key.lower()}", part)
    elif attribute == "name.givenname":
        changes.given_name = value
    elif attribute == "name.familyname":
        changes.family_name = value
    elif attribute == "emails":
        emails = value if isinstance(value, list) else [value]
        changes.emails = _emails_merged(changes.emails or [], emails) if op == "add" else emails
    elif (match := _EMAIL_OF_TYPE.match(attribute)) is not None:
        others = [e for e in (changes.emails or []) if isinstance(e, dict) and e.get("type") != match.group(1)]
        changes.emails = [*others, {"value": value, "type": match.group(1), "primary": match.group(1) == "work"}]
    elif (
        attribute in IGNORED_ATTRIBUTES
        or attribute.startswith("extension.")
        or attribute.split("[")[0] in IGNORED_ATTRIBUTES
    ):
        return
    else:
        raise ScimError(400, f"Unknown or unsupported attribute {attribute!r}.", ScimType.INVALID_PATH)
    changes.touched.add(attribute)


def _emails_merged(current: list, added: list) -> list:
    seen = {e.get("value", "").lower() for e in current if isinstance(e, dict)}
    return current + [e for e in added if not isinstance(e, dict) or e.get("value", "").lower() not in seen]


def changes_from_resource(body) -> UserChanges:
    """A POST or PUT body (a whole User resource). PUT replaces: what it leaves out is
    cleared (name, displayName, emails, externalId); `active` left out stays as it is."""
    if not isinstance(body, dict):
        raise ScimError(400, "The body must be a JSON object (a SCIM User resource).", ScimType.INVALID_SYNTAX)
    changes = UserChanges(external_id="", given_name="", family_name="", display_name="", emails=[])
    for key, value in body.items():
        _set(changes, _attribute(key), value)
    return changes


def changes_from_patch(body, *, current: ScimIdentity) -> UserChanges:
    """A PatchOp body: `add`/`replace` (any case: Entra sends "Replace") with a path
    ("active", "name.givenName", 'emails[type eq "work"].value', …) or without one (a value
    object, as Okta sends `{"active": false}`); `remove` of the optional attributes."""
    if not isinstance(body, dict) or not isinstance(body.get("Operations", body.get("operations")), list):
        raise ScimError(400, f'A PATCH body is a {PATCH_SCHEMA} with an "Operations" list.', ScimType.INVALID_SYNTAX)
    changes = UserChanges(emails=list(current.emails) if current.emails else None)
    for operation in body.get("Operations", body.get("operations")):
        if not isinstance(operation, dict):
            raise ScimError(400, 'Each operation must be an object with "op".', ScimType.INVALID_SYNTAX)
        op = str(operation.get("op", "")).lower()
        path, value = operation.get("path"), operation.get("value")
        if op in ("add", "replace"):
            if path:
                _set(changes, _attribute(str(path)), value, op=op)
            elif isinstance(value, dict):
                for key, part in value.items():
                    _set(changes, _attribute(key), part, op=op)
            else:
                raise ScimError(400, f"An {op} without a path needs an object value.", ScimType.INVALID_VALUE)
        elif op == "remove":
            _remove(changes, _attribute(str(path or "")))
        else:
            raise ScimError(
                400, f"Unknown PATCH op {operation.get('op')!r}: use add, replace or remove.", ScimType.INVALID_SYNTAX
            )
    return changes


def _remove(changes: UserChanges, attribute: str) -> None:
    cleared = {
        "externalid": "external_id",
        "displayname": "display_name",
        "name.givenname": "given_name",
        "name.familyname": "family_name",
    }
    if attribute in cleared:
        setattr(changes, cleared[attribute], "")
    elif attribute == "name":
        changes.given_name = changes.family_name = ""
    elif attribute == "emails":
        changes.emails = []
    elif (
        attribute in IGNORED_ATTRIBUTES
        or attribute.startswith("extension.")
        or attribute.split("[")[0] in IGNORED_ATTRIBUTES
    ):
        return
    else:
        raise ScimError(
            400,
            f"{attribute or 'A remove without a path'} cannot be removed.",
            ScimType.NO_TARGET if attribute else ScimType.INVALID_PATH,
        )


# --- groups (the four roles) ----------------------------------------------------------------------


def group_resource(group: str, members: list[ScimIdentity] | None, *, base_url: str) -> dict:
    """A fixed group; `members` None: asked without them (excludedAttributes=members)."""
    resource = {
        "schemas": [GROUP_SCHEMA],
        "id": group,
        "displayName": group,
        "meta": {"resourceType": "Group", "location": f"{base_url}/Groups/{group}"},
    }
    if members is not None:
        resource["members"] = [
            {"value": str(i.scim_id), "display": i.user.email, "$ref": f"{base_url}/Users/{i.scim_id}"} for i in members
        ]
    return resource


_GROUP_FILTER = re.compile(r'^\s*displayName\s+eq\s+"((?:[^"\\]|\\.)*)"\s*$', re.IGNORECASE)


def parse_group_filter(raw: str | None, groups) -> list[str]:
    """The groups a `displayName eq "…"` filter (case-insensitive) selects, or all of them."""
    if raw is None or not raw.strip():
        return list(groups)
    match = _GROUP_FILTER.match(raw)
    if match is None:
        raise ScimError(400, 'Only the filter displayName eq "…" is supported for groups.', ScimType.INVALID_FILTER)
    return [g for g in groups if g == match.group(1).strip().lower()]


def _member_ids(value) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, dict) and isinstance(i.get("value"), str) for i in items):
        raise ScimError(400, 'members must be a list of {"value": "<user id>"}.', ScimType.INVALID_VALUE)
    return [i["value"] for i in items]


_MEMBER_OF = re.compile(r'^members\[value eq "([^"]+)"\]$', re.IGNORECASE)


def _check_group_name(group: str, value) -> None:
    if not isinstance(value, str) or value.strip().lower() != group:
        raise ScimError(
            400,
            f"The groups are fixed (owners, admins, members, viewers): {group} cannot be renamed.",
            ScimType.MUTABILITY,
        )


def group_changes_from_patch(body, *, group: str) -> tuple[list[str], list[str], list[str] | None]:
    """A PatchOp on a group, as (added ids, removed ids, the whole new list or None): Okta's and
    Entra's `add`/`remove` of `members`, `remove` of 'members[value eq "…"]', `replace`."""
    if not isinstance(body, dict) or not isinstance(body.get("Operations", body.get("operations")), list):
        raise ScimError(400, f'A PATCH body is a {PATCH_SCHEMA} with an "Operations" list.', ScimType.INVALID_SYNTAX)
    add, remove, replace = [], [], None
    for operation in body.get("Operations", body.get("operations")):
        if not isinstance(operation, dict):
            raise ScimError(400, 'Each operation must be an object with "op".', ScimType.INVALID_SYNTAX)
        op, path, value = str(operation.get("op", "")).lower(), str(operation.get("path") or ""), operation.get("value")
        member = _MEMBER_OF.match(path.strip())
        if op == "add" and path.lower() == "members":
            add += _member_ids(value)
        elif op == "remove" and member is not None:
            remove.append(member.group(1))
        elif op == "remove" and path.lower() == "members":
            if value is None:
                replace = []
            else:
                remove += _member_ids(value)
        elif op == "replace" and path.lower() == "members":
            replace = _member_ids(value)
        elif op in ("add", "replace") and path.lower() == "displayname":
            _check_group_name(group, value)
        elif op in ("add", "replace") and not path and isinstance(value, dict):
            for key, part in value.items():
                if key.lower() == "members":
                    replace = _member_ids(part)
                elif key.lower() == "displayname":
                    _check_group_name(group, part)
                elif key.lower() not in ("id", "schemas"):
                    raise ScimError(400, f"Unknown or unsupported group attribute {key!r}.", ScimType.INVALID_PATH)
        elif op in ("add", "remove", "replace"):
            raise ScimError(400, f"Unsupported group operation {op} {path!r}.", ScimType.INVALID_PATH)
        else:
            raise ScimError(
                400, f"Unknown PATCH op {operation.get('op')!r}: use add, replace or remove.", ScimType.INVALID_SYNTAX
            )
    return add, remove, replace


def group_members_from_put(body, *, group: str) -> list[str]:
    if not isinstance(body, dict):
        raise ScimError(400, "The body must be a JSON object (a SCIM Group resource).", ScimType.INVALID_SYNTAX)
    if "displayName" in body:
        _check_group_name(group, body["displayName"])
    return _member_ids(body.get("members") or [])


# --- discovery (RFC 7643 §5-7) ----------------------------------------------------------------------


def service_provider_config(*, base_url: str) -> dict:
    return {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"],
        "documentationUri": "https://github.com/groundwork/groundwork#provisioning-scim",
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_COUNT},
        "changePassword": {"supported": False},
        "sort": {"supported": False},
        "etag": {"supported": False},
        "authenticationSchemes": [
            {
                "type": "oauthbearertoken",
                "name": "Bearer token",
                "primary": True,
                "description": "The account's SCIM token, made by an owner on the Team page.",
            }
        ],
        "meta": {"resourceType": "ServiceProviderConfig", "location": f"{base_url}/ServiceProviderConfig"},
    }


def _attr(name: str, type_: str = "string", **extra) -> dict:
    return {
        "name": name,
        "type": type_,
        "multiValued": False,
        "required": False,
        "caseExact": False,
        "mutability": "readWrite",
        "returned": "default",
        "uniqueness": "none",
        **extra,
    }


USER_SCHEMA_DOCUMENT = {
    "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Schema"],
    "id": USER_SCHEMA,
    "name": "User",
    "description": "A member of the account",
    "attributes": [
        _attr(
            "userName",
            required=True,
            uniqueness="server",
            mutability="immutable",
            description="The person's email address, their login.",
        ),
        _attr(
            "name",
            "complex",
            subAttributes=[_attr("givenName"), _attr("familyName"), _attr("formatted", mutability="readOnly")],
        ),
        _attr("displayName"),
        _attr(
            "emails",
            "complex",
            multiValued=True,
            subAttributes=[_attr("value"), _attr("type"), _attr("primary", "boolean")],
        ),
        _attr("active", "boolean", description="A member of this account; false ends the membership."),
        _attr("externalId", caseExact=True),
    ],
}


GROUP_SCHEMA_DOCUMENT = {
    "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Schema"],
    "id": GROUP_SCHEMA,
    "name": "Group",
    "description": "A role: owners, admins, members, viewers (fixed)",
    "attributes": [
        _attr("displayName", required=True, uniqueness="server", mutability="immutable"),
        _attr(
            "members",
            "complex",
            multiValued=True,
            subAttributes=[_attr("value", mutability="immutable"), _attr("display", mutability="readOnly")],
        ),
    ],
}


def schemas(*, base_url: str) -> list[dict]:
    return [
        {**document, "meta": {"resourceType": "Schema", "location": f"{base_url}/Schemas/{document['id']}"}}
        for document in (USER_SCHEMA_DOCUMENT, GROUP_SCHEMA_DOCUMENT)
    ]


def resource_types(*, base_url: str) -> list[dict]:
    return [
        {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ResourceType"],
            "id": "User",
            "name": "User",
            "endpoint": "/Users",
            "description": "The account's members",
            "schema": USER_SCHEMA,
            "meta": {"resourceType": "ResourceType", "location": f"{base_url}/ResourceTypes/User"},
        },
        {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ResourceType"],
            "id": "Group",
            "name": "Group",
            "endpoint": "/Groups",
            "description": "The account's roles (fixed groups)",
            "schema": GROUP_SCHEMA,
            "meta": {"resourceType": "ResourceType", "location": f"{base_url}/ResourceTypes/Group"},
        },
    ]

from __future__ import annotations

from django.db.models import Q, QuerySet

from audit.models import ActorKind, AuditEntry


def audit_entry_list(*, account, action: str | None = None, actor: str | None = None) -> QuerySet[AuditEntry]:
    """The account's entries, newest first. `action` is an exact action or a prefix
    ("document" or "document."); `actor` a kind (user, key, staff, system) or an email / key
    name, case-insensitively."""
    entries = AuditEntry.objects.for_account(account).order_by("-created_at", "-id")
    action = (action or "").replace("\x00", "").strip()
    if action:
        prefix = action if action.endswith(".") else f"{action}."
        entries = entries.filter(Q(action=action) | Q(action__startswith=prefix))
    actor = (actor or "").replace("\x00", "").strip()
    if actor:
        if actor in ActorKind.values:
            entries = entries.filter(actor_kind=actor)
        else:
            entries = entries.filter(Q(actor_label__iexact=actor) | Q(actor_label__istartswith=f"{actor} ("))
    return entries

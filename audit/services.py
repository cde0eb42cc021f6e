"""The one way an audit entry is written."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from audit.actors import resolve, user_actor
from audit.models import ActorKind, AuditEntry

# action -> what the Team page's filter calls it
ACTIONS = {
    "document.upload": "Document uploaded",
    "document.delete": "Document deleted",
    "document.reindex": "Document reindexed",
    "conversation.delete": "Conversation deleted",
    "account.reindex": "All documents reindexed",
    "document.move": "Document moved",
    "document.tags": "Document tags changed",
    "retrieval.exclude_tags": "Excluded tags changed",
    "collection.create": "Collection created",
    "collection.rename": "Collection renamed",
    "collection.restrict": "Collection restricted or opened",
    "collection.access": "Collection access changed",
    "collection.delete": "Collection deleted",
    "source.create": "Source added",
    "source.sync": "Source sync started",
    "source.delete": "Source deleted",
    "key.create": "API key created",
    "key.revoke": "API key revoked",
    "scim_token.create": "SCIM token created",
    "scim_token.revoke": "SCIM token revoked",
    "scim.user_create": "Provisioned by SCIM",
    "scim.user_update": "Changed by SCIM",
    "scim.user_delete": "Deprovisioned by SCIM (id forgotten)",
    "domain.verification_sent": "Domain verification link sent",
    "domain.verify": "Domain verified",
    "domain.remove": "Domain removed",
    "member.role_change": "Role changed",
    "member.remove": "Member removed",
    "member.add": "Member added",
    "invitation.create": "Invitation sent",
    "invitation.accept": "Invitation accepted",
    "invitation.cancel": "Invitation cancelled",
    "credits.grant": "Credits granted",
    "credits.checkout": "Credits checkout started",
    "credits.take_back": "Credits taken back (refund)",
    "budget.set": "Budget set",
    "budget.remove": "Budget removed",
    "billing.update": "Billing settings changed",
    "billing.alert": "Low-balance alert sent",
    "ledger.export": "Ledger exported",
    "staff.access": "Support staff opened the account",
    "account.delete": "Account deleted",
    "account.sso_required": "Single sign-on requirement changed",
    "account.staff_password_2fa": "Staff password + 2FA requirement changed",
    "sso.link": "Single sign-on identity linked",
    "account.rename": "Team renamed",
    "user.name_change": "Name changed",
    "user.email_change": "Email address changed",
    "user.password_change": "Password changed",
    "user.sessions_end": "Other sessions signed out",
    "user.two_factor_enable": "Two-factor sign-in turned on",
    "user.two_factor_disable": "Two-factor sign-in turned off",
    "user.recovery_codes": "Recovery codes made anew",
}


def audit_record(*, account, action: str, target: str = "", detail: dict | None = None, actor=None) -> AuditEntry:
    """Append one entry to the account's log, in the caller's transaction (so an action that
    rolls back leaves no entry). `actor` is a User, an ApiKey, an audit Actor or None (the
    request's actor; the system outside a request)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    who = resolve(actor)
    account_id = getattr(account, "pk", account)
    return AuditEntry.objects.for_account(account_id).create(
        account_id=account_id,
        action=action,
        actor_kind=who.kind,
        actor_id=who.id,
        actor_label=who.label[:254],
        target=str(target)[:300],
        detail=detail or {},
    )


STAFF_ACCESS_WINDOW = timedelta(minutes=30)


def audit_staff_access(*, account_id: int, staff) -> AuditEntry | None:
    """Support staff opened the account's page: one entry per staff user and account per
    half hour, so reloading the page does not bury the log."""
    since = timezone.now() - STAFF_ACCESS_WINDOW
    seen = (
        AuditEntry.objects.for_account(account_id)
        .filter(action="staff.access", actor_kind=ActorKind.STAFF, actor_id=staff.pk, created_at__gte=since)
        .exists()
    )
    if seen:
        return None
    return audit_record(
        account=account_id, action="staff.access", actor=user_actor(staff, staff=True), target=staff.email
    )

"""A SCIM token's life beside its maker's rights: revoked when the owner who made it is
removed or stops being an owner (the member services call this in the removal's or role
change's transaction, as they cancel the person's invitations)."""
from __future__ import annotations

from django.utils import timezone

from accounts.models import Account, Membership
from accounts.permissions import Action, principal_may
from accounts.scim.models import ScimToken
from audit.services import audit_record


def scim_token_label(token: ScimToken) -> str:
    return f"{token.name} ({token.prefix}…)"


def scim_token_mark_revoked(*, account: Account, token: ScimToken, actor, reason: str = "") -> None:
    """Revoke one token (idempotent) and audit it: /scim/v2/ answers it 401 from now on."""
    if token.revoked_at is not None:
        return
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    audit_record(account=account, action="scim_token.revoke", actor=actor, target=scim_token_label(token),
                 detail={"reason": reason} if reason else None)


def scim_tokens_past_rights_revoke(*, account: Account, maker_id: int, membership: Membership | None,
                                   actor) -> None:
    """Revoke the tokens `maker_id` made that their `membership` (None: removed) may no longer
    make: a removed or demoted owner's token does not keep the owner's power over the team."""
    if membership is not None and principal_may(membership, Action.SCIM_MANAGE):
        return
    tokens = ScimToken.objects.for_account(account).filter(created_by_id=maker_id, revoked_at__isnull=True)
    for token in tokens.select_for_update():
        scim_token_mark_revoked(account=account, token=token, actor=actor,
                                reason="its maker is no longer an owner")


def scim_token_maker_is_owner(*, token: ScimToken) -> bool:
    """Whether the token's maker is, now, an active owner of its account (the token works
    only then; in the token's account context)."""
    if token.created_by_id is None:
        return False
    maker = (Membership.objects.for_account(token.account_id).select_related("user")
             .filter(user_id=token.created_by_id).first())
    return maker is not None and maker.user.is_active and principal_may(maker, Action.SCIM_MANAGE)

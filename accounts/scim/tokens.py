"""A SCIM token's life beside its maker's rights: revoked when the owner who made it is
removed or stops being an owner (the member services call this in the removal's or role
change's transaction, as they cancel the person's invitations)."""

from __future__ import annotations

from accounts.models import Account, Membership
from accounts.permissions import Action, principal_may
from accounts.scim.models import ScimToken
from accounts.tokens import secret_revoke


def scim_tokens_past_rights_revoke(*, account: Account, maker_id: int, membership: Membership | None, actor) -> None:
    """Revoke the tokens `maker_id` made that their `membership` (None: removed) may no longer
    make: a removed or demoted owner's token does not keep the owner's power over the team."""
    if membership is not None and principal_may(membership, Action.SCIM_MANAGE):
        return
    tokens = ScimToken.objects.for_account(account).filter(created_by_id=maker_id, revoked_at__isnull=True)
    for token in tokens.select_for_update():
        secret_revoke(token, account=account, actor=actor, detail={"reason": "its maker is no longer an owner"})


def scim_token_maker_is_owner(*, token: ScimToken) -> bool:
    """Whether the token's maker is, now, an active owner of its account (the token works
    only then; in the token's account context)."""
    if token.created_by_id is None:
        return False
    maker = (
        Membership.objects.for_account(token.account_id)
        .select_related("user")
        .filter(user_id=token.created_by_id)
        .first()
    )
    return maker is not None and maker.user.is_active and principal_may(maker, Action.SCIM_MANAGE)

"""Writes of a person's data export: request it and hand out its download (the job's work,
building and cleaning up, is exports/pipeline.py).

An export is a person's, not an account's: its row is theirs (RLS on its user), it covers
every account they are a member of when it is built, and only they can download it, through
a signed link that expires EXPORT_TTL_HOURS after it is ready.

A team whose members must sign in with SSO (accounts/sso/session.py, `sso_shuts_out`) is in the
export only when the session that asked signed in with SSO (recorded as `by_sso`), and an
export that holds such a team is downloaded only by a session that did.
"""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from accounts.selectors import membership_list_for_user
from accounts.sso.session import sso_required_error, sso_shuts_out
from core.tenancy import current_context, user_context
from exports.error_codes import ExportErrorCode
from exports.errors import ExportError, ExportNotFound
from exports.jobs import enqueue_build
from exports.models import DataExport, ExportStatus
from exports.selectors import export_access_by_id

TOKEN_SALT = "exports.download"


def _as_person(user):
    """The person's own context, unless the transaction already acts for them (a member's
    session runs in its account's context with the member as principal)."""
    if current_context().user_id == user.pk:
        return contextlib.nullcontext()
    return user_context(user)


def export_request(*, user, by_sso: bool) -> DataExport:
    """A new export of everything the product holds about `user`, built by a job enqueued on
    commit; `by_sso`: the asking session signed in with SSO (else the teams that require it are
    left out). While one is still being built for the same kind of session, asking again
    returns that one (no second job); a session signed in with SSO does not get a password
    session's (it would leave out what this one may take)."""
    with _as_person(user):
        pending = DataExport.objects.for_user(user).filter(status=ExportStatus.PENDING, by_sso=by_sso).first()
        if pending is not None:
            return pending
        export = DataExport.objects.for_user(user).create(user=user, by_sso=by_sso)
        enqueue_build(export)
    return export


# --- downloading --------------------------------------------------------------------------


def _token(export: DataExport) -> str:
    """Opaque: an HMAC (keyed by SECRET_KEY) of the export, its person and its stored file's
    random name; it names nothing and cannot be made for another export."""
    return salted_hmac(TOKEN_SALT, f"{export.pk}:{export.user_id}:{export.file}", algorithm="sha256").hexdigest()


def export_is_expired(export: DataExport) -> bool:
    return export.expires_at is not None and export.expires_at <= timezone.now()


def export_download_url(export: DataExport) -> str | None:
    """The signed, opaque link, only while the export is ready and not expired. The link
    alone is not enough: the download also checks that the signed-in person owns it."""
    if export.status != ExportStatus.READY or export_is_expired(export) or not export.file:
        return None
    return reverse("api-export-download", args=[export.pk, _token(export)])


def export_expired_message(export: DataExport) -> str:
    return (
        f"This export expired at {export.expires_at:%Y-%m-%d %H:%M} UTC: download links last "
        f"{settings.EXPORT_TTL_HOURS} hours. Request a new export from your overview page."
    )


def export_for_download(*, user, export_id, token: str, by_sso: bool) -> DataExport:
    """The person's ready export whose link this is, or: 404 (not theirs, missing, or a link
    that is not this export's), 409 (still being built, or refused/failed), 410 (expired),
    403 `sso_required` (it holds a team that requires SSO and this session signed in otherwise)."""
    with _as_person(user):
        export = export_access_by_id(user=user, export_id=export_id)
    if not export.file and export_is_expired(export):
        # The cleanup job deleted the file, and with it what the link was signed over.
        raise ExportError(ExportErrorCode.EXPORT_EXPIRED, export_expired_message(export), status=410)
    if not constant_time_compare(str(token), _token(export)):
        raise ExportNotFound()
    if export.status != ExportStatus.READY:
        raise ExportError(
            ExportErrorCode.EXPORT_NOT_READY,
            f"This export has no file to download: its status is {export.status}.",
            status=409,
        )
    if export_is_expired(export) or not export.file:
        raise ExportError(ExportErrorCode.EXPORT_EXPIRED, export_expired_message(export), status=410)
    _require_sso_where_held(user=user, export=export, by_sso=by_sso)
    return export


def _require_sso_where_held(*, user, export: DataExport, by_sso: bool) -> None:
    """The teams the export holds are read as they are now: one that requires SSO since, or
    still, refuses a password session the file (it is that team's data too)."""
    if by_sso or not export.account_ids:
        return
    for membership in membership_list_for_user(user=user):
        if membership.account_id in export.account_ids and sso_shuts_out(membership.account, by_sso=by_sso):
            raise sso_required_error(membership.account)

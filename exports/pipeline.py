"""The export job's work: build a person's export (exports/build.py reads and packs it) and
clean up expired files. Called by exports/jobs.py; imports neither it nor the services."""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
import uuid

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from core.tenancy import dangerously_bypass_tenancy, user_context
from exports import build
from exports.error_codes import ExportErrorCode
from exports.errors import ExportRefused
from exports.models import DataExport, ExportStatus

logger = logging.getLogger("groundwork.exports")

# A pending export older than this was lost with its worker (the job's timeout is an hour).
STALE_AFTER = dt.timedelta(hours=2)


def _claim(export_id: int, user) -> DataExport | None:
    with user_context(user):
        export = DataExport.objects.for_user(user).select_for_update().filter(pk=export_id).first()
        if export is None or export.status != ExportStatus.PENDING:
            return None
        return export


def _finish(export_id: int, user, **fields) -> bool:
    """Record the outcome if the export is still pending; False if another run got there first."""
    with user_context(user):
        export = DataExport.objects.for_user(user).select_for_update().filter(pk=export_id).first()
        if export is None or export.status != ExportStatus.PENDING:
            return False
        for name, value in fields.items():
            setattr(export, name, value)
        export.finished_at = timezone.now()
        export.save()
        return True


def export_build(*, export_id: int, user_id: int) -> None:
    """Build the export: plan (limits checked first: a refusal writes no file), pack the zip
    into a temporary file, store it under a random name, mark it ready with its expiry.

    Safe to run twice: a run that finds the export no longer pending does nothing.
    NOTE: two runs at once may both build; the second to finish finds it ready and deletes
    its own file, so the export still names exactly one stored file.
    """
    user = User.objects.filter(pk=user_id).first()
    export = _claim(export_id, user) if user is not None else None
    if export is None:
        return
    name = ""
    try:
        export_plan = build.plan(user=user, by_sso=export.by_sso)
        with tempfile.TemporaryFile() as out:
            written = build.write_zip(user=user, export_plan=export_plan, by_sso=export.by_sso, out=out)
            size = out.tell()
            out.seek(0)
            name = default_storage.save(f"exports/{uuid.uuid4().hex}.zip", File(out))
        now = timezone.now()
        done = _finish(
            export_id,
            user,
            status=ExportStatus.READY,
            file=name,
            size=size,
            account_ids=written,
            left_out=export_plan.left_out,
            expires_at=now + dt.timedelta(hours=settings.EXPORT_TTL_HOURS),
        )
    except ExportRefused as refusal:
        _finish(export_id, user, status=ExportStatus.REFUSED, error_code=refusal.code, error=refusal.message)
        return
    except Exception:
        logger.exception("export %s failed", export_id)
        _file_delete(name)
        _finish(
            export_id,
            user,
            status=ExportStatus.FAILED,
            error_code=ExportErrorCode.EXPORT_FAILED,
            error="The export could not be built. It has been logged; please request a new one.",
        )
        return
    if not done:
        _file_delete(name)


def _file_delete(name: str) -> None:
    if name and default_storage.exists(name):
        default_storage.delete(name)


# --- cleanup ------------------------------------------------------------------------------


def exports_cleanup() -> int:
    """Delete the files of expired exports (the row stays, saying it expired), and mark
    exports lost with their worker as failed. A cross-person system job: the audited bypass.
    Returns the number of files deleted."""
    now = timezone.now()
    deleted = 0
    with dangerously_bypass_tenancy(reason="exports: delete expired export files"):
        expired = (
            DataExport.all_people.select_for_update(skip_locked=True)
            .filter(status=ExportStatus.READY, expires_at__lte=now)
            .exclude(file="")
        )
        for export in expired:
            name = export.file
            export.file = ""
            export.save(update_fields=["file"])
            transaction.on_commit(lambda name=name: _file_delete(name))
            deleted += 1
        DataExport.all_people.filter(status=ExportStatus.PENDING, created_at__lt=now - STALE_AFTER).update(
            status=ExportStatus.FAILED,
            error_code=ExportErrorCode.EXPORT_FAILED,
            finished_at=now,
            error="The export was interrupted. Please request a new one.",
        )
    return deleted

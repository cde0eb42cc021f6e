"""Reads of a person's exports. They take the person explicitly, and run in a context whose
principal is that person (a member's session, or `user_context`): RLS shows nobody else's."""

from __future__ import annotations

from django.db.models import QuerySet

from core.errors import object_id
from exports.errors import ExportNotFound
from exports.models import DataExport


def export_list(*, user) -> QuerySet[DataExport]:
    return DataExport.objects.for_user(user).order_by("-created_at", "-pk")


def export_latest(*, user) -> DataExport | None:
    return export_list(user=user).first()


def export_access_by_id(*, user, export_id) -> DataExport:
    """The person's export, or ExportNotFound (404) alike for a missing id, another person's
    and a malformed one. An export is a person's, across their accounts: the person, not an
    account, is what it is looked up for."""
    found = export_list(user=user).filter(pk=object_id(export_id)).first()
    if found is None:
        raise ExportNotFound()
    return found

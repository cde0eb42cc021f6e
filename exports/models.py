"""A person's data export: one row per request, owned by the person, not by an account.

An export covers every account its person is a member of, so the row has no account_id.
Its table is under forced row-level security all the same (migration 0001): a row is
visible and writable only when the transaction's principal is its user (core.rls
CTX_USER_ID, set by a member's session and by `user_context`), or inside the audited
bypass (the cleanup job). An API key's context has no user: it sees no export.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ExportStatus(models.TextChoices):
    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"
    REFUSED = "refused"


class UnscopedExportQuery(RuntimeError):
    """DataExport.objects was queried without naming the person."""


class DataExportManager(models.Manager):
    """Fails closed like core.tenancy.TenantManager: a query must name its person."""

    def get_queryset(self):
        if getattr(self, "core_filters", None) is None:
            raise UnscopedExportQuery("DataExport.objects needs a person: use DataExport.objects.for_user(user)")
        return super().get_queryset()

    def for_user(self, user):
        user_id = getattr(user, "pk", user)
        if not user_id:
            raise UnscopedExportQuery("DataExport.objects.for_user() got no user")
        return super().get_queryset().filter(user_id=user_id)


class DataExport(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=10, choices=ExportStatus.choices, default=ExportStatus.PENDING)
    error_code = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    # Django's default storage, under a random name (exports/<uuid4>.zip); empty until ready
    # and again once the cleanup job has deleted the expired file.
    file = models.CharField(max_length=300, blank=True)
    size = models.BigIntegerField(default=0)
    account_ids = models.JSONField(default=list, blank=True, help_text="The accounts the export covers")
    # How the session that asked signed in (accounts/sso/session.py): a team whose members must
    # sign in with SSO is exported only for a session that did. Recorded at the request, since
    # the job that builds the export runs without the session. Database defaults too, so a web
    # process of the release before (which writes neither) keeps working during a rolling deploy.
    by_sso = models.BooleanField(default=False, db_default=False, help_text="Asked for by a session signed in with SSO")
    left_out = models.JSONField(
        default=list, db_default=[], blank=True, help_text='The teams left out, and why: [{"id", "name", "reason"}]'
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    all_people = models.Manager()  # the cleanup job and the admin, inside dangerously_bypass_tenancy()
    objects = DataExportManager()

    class Meta:
        base_manager_name = "all_people"
        default_manager_name = "all_people"
        indexes = [models.Index(fields=["user", "-created_at"], name="export_user_newest")]

    def __str__(self):
        return f"export {self.pk} of user {self.user_id} ({self.status})"

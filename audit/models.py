"""The audit log: who (a user, an API key or support staff) did what to an account, and when.

Append-only: the database refuses UPDATE and DELETE on the table (migration 0001's trigger),
and it sits under forced row-level security like every tenant table. The actor is kept as a
kind, an id and a label copied at the time (email or key name), not as a foreign key: an
entry must still say who it was after the user or key is gone, and a foreign key's
ON DELETE SET NULL would be an UPDATE the trigger refuses.
"""

from django.db import models

from core.tenancy import TenantModel


class ActorKind(models.TextChoices):
    USER = "user", "user"
    KEY = "key", "API key"
    STAFF = "staff", "support staff"
    SYSTEM = "system", "system"


class AuditEntry(TenantModel):
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=40)
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices)
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_label = models.CharField(max_length=254, blank=True)
    target = models.CharField(max_length=300, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta(TenantModel.Meta):
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["account", "-created_at", "-id"], name="audit_account_newest")]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_display} {self.action} {self.target}"

    @property
    def actor_display(self) -> str:
        if self.actor_kind == ActorKind.SYSTEM:
            return "system"
        label = self.actor_label or f"#{self.actor_id}"
        return {ActorKind.KEY: f"API key {label}", ActorKind.STAFF: f"support staff {label}"}.get(
            self.actor_kind, label
        )

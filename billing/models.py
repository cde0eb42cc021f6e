"""Credits: an append-only ledger, one balance row per account, and holds.

Amounts are credits; what a provider call costs in credits is billing.pricing's to say (by
default 1 credit = 1 token as the provider reports it), and an entry keeps the tokens beside
its credits. The balance row is updated in the same transaction as every ledger entry, and
a CHECK keeps it from going below zero.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.tenancy import TenantModel


class Kind(models.TextChoices):
    GRANT = "grant", "Grant"
    SIGNUP = "signup", "Sign-up credits"
    EMBEDDING = "embedding", "Embedding"
    CHAT = "chat", "Chat"
    HOLD = "hold", "Hold"
    HOLD_RELEASE = "hold_release", "Hold released"
    REFUND = "refund", "Refund"
    ADJUSTMENT = "adjustment", "Adjustment"


class AccountBalance(TenantModel):
    """The account's spendable credits. Every spender locks this row: that is what
    serialises concurrent debits on one account."""

    account = models.OneToOneField("accounts.Account", on_delete=models.CASCADE, related_name="credit_balance")
    balance = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(balance__gte=0), name="balance_never_negative")]

    def __str__(self):
        return f"{self.balance} credits"


class CreditLedgerEntry(TenantModel):
    """One immutable movement of credits. The database refuses UPDATE and DELETE."""

    # Financial history outlives mistakes: an account with a ledger cannot be deleted.
    account = models.ForeignKey("accounts.Account", on_delete=models.PROTECT, db_index=True)
    delta = models.BigIntegerField(help_text="Signed change to the balance, in credits (billing.pricing)")
    balance_after = models.BigIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    tokens = models.BigIntegerField(default=0, help_text="Provider-reported tokens behind this entry")
    shortfall = models.BigIntegerField(default=0, help_text="Credits used that the balance could not cover")
    model = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    reference = models.CharField(max_length=200, blank=True, help_text="e.g. document:12:rev3, message:88")
    idempotency_key = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Staff user; empty for the system",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    metadata = models.JSONField(default=dict, blank=True)
    # Who spent (budgets.md): a member's session, or an API key (a key is never its creator);
    # both empty for grants and the system. A hold's release and charge carry the hold's.
    spent_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    spent_by_api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        verbose_name = "credit ledger entry"
        verbose_name_plural = "credit ledger"
        # Viewing or even changing an account in the admin is not minting money: granting
        # credits is its own permission (the admin's "Grant credits" action checks it).
        # Exporting a month of the ledger (admin action, audited) is its own permission too: view
        # rights let staff read entries on the page, not take a whole month away as a file.
        permissions = [
            ("grant_credits", "Can grant credits to accounts"),
            ("export_ledger", "Can export an account's ledger (CSV)"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["account", "idempotency_key"], name="ledger_key_unique_per_account"),
        ]
        indexes = [
            models.Index(fields=["account", "-created_at"], name="ledger_account_recent"),
            # A budget's spend in its period: one principal's entries since the period began.
            models.Index(
                fields=["account", "spent_by_user", "created_at"],
                name="ledger_user_spend",
                condition=models.Q(spent_by_user__isnull=False),
            ),
            models.Index(
                fields=["account", "spent_by_api_key", "created_at"],
                name="ledger_key_spend",
                condition=models.Q(spent_by_api_key__isnull=False),
            ),
        ]

    def __str__(self):
        return f"{self.kind} {self.delta:+d}"


class HoldStatus(models.TextChoices):
    OPEN = "open", "Open"
    SETTLED = "settled", "Settled"
    RELEASED = "released", "Released"


class CreditHold(TenantModel):
    """Credits reserved for the worst case before a model call, settled to real usage after."""

    key = models.CharField(max_length=200)
    amount = models.BigIntegerField()
    status = models.CharField(max_length=10, choices=HoldStatus.choices, default=HoldStatus.OPEN)
    reference = models.CharField(max_length=200, blank=True)
    used_tokens = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    spent_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    spent_by_api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        indexes = [
            models.Index(fields=["account", "status"], name="hold_account_open", condition=models.Q(status="open"))
        ]
        constraints = [
            models.UniqueConstraint(fields=["account", "key"], name="hold_key_unique_per_account"),
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="hold_amount_positive"),
        ]

    def __str__(self):
        return f"hold {self.key} {self.amount} ({self.status})"


class BudgetPeriod(models.TextChoices):
    DAY = "day", "Daily"
    MONTH = "month", "Monthly"


class Budget(TenantModel):
    """A cap on what one member or one API key of the account may spend per UTC day or
    month. Enforced by billing.services in the same transaction as every hold and debit."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    period = models.CharField(max_length=5, choices=BudgetPeriod.choices)
    limit = models.BigIntegerField(help_text="Credits per period")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(limit__gt=0), name="budget_limit_positive"),
            models.CheckConstraint(
                condition=(
                    models.Q(user__isnull=False, api_key__isnull=True)
                    | models.Q(user__isnull=True, api_key__isnull=False)
                ),
                name="budget_one_target",
            ),
            models.UniqueConstraint(
                fields=["account", "user", "period"],
                name="budget_user_period_unique",
                condition=models.Q(user__isnull=False),
            ),
            models.UniqueConstraint(
                fields=["account", "api_key", "period"],
                name="budget_key_period_unique",
                condition=models.Q(api_key__isnull=False),
            ),
        ]

    def __str__(self):
        return f"{self.get_period_display()} budget of {self.limit:,} credits"


class BillingSettings(TenantModel):
    """The account's billing settings, set by its owners (`billing.manage`): who receives
    billing email, and the low-balance alert with its state. The alert is armed until a
    charge takes the balance below the threshold (one email), and armed again once credits
    bring the balance back to the threshold (billing.alerts)."""

    account = models.OneToOneField("accounts.Account", on_delete=models.CASCADE, related_name="billing_settings")
    contact_email = models.EmailField(blank=True, help_text="Who receives billing email, such as low-balance alerts")
    low_balance_threshold = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Email the billing contact when a charge takes the balance below this many credits; empty: no alert",
    )
    alert_armed = models.BooleanField(default=True, help_text="False from an alert until the balance is back")
    last_alert_at = models.DateTimeField(null=True, blank=True)
    last_alert_balance = models.BigIntegerField(null=True, blank=True)
    last_alert_to = models.EmailField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        verbose_name_plural = "billing settings"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(low_balance_threshold__isnull=True) | models.Q(low_balance_threshold__gte=0),
                name="billing_threshold_not_negative",
            )
        ]

    def __str__(self):
        return f"billing settings of account {self.account_id}"


# Credits bought with Stripe (billing/purchases): its model lives with the rest of that feature.
from billing.purchases.models import Purchase, PurchaseStatus  # noqa: E402,F401

"""Support staff's admin. Staff see across accounts: AccountContextMiddleware runs every
/admin/ request of a staff user inside `dangerously_bypass_tenancy`, and tenant models are
listed through their `all_accounts` manager. Non-staff never get past the admin login."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, redirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import services
from accounts.errors import AccountError
from accounts.forms import AdminLoginForm
from accounts.models import Account, ApiKey, Invitation, Membership, Role, SsoIdentity, User
from audit.services import audit_staff_access
from core.admin_mixins import AccountFilter, AllAccountsMixin, ReadOnlyMixin, record_action
from core.tenancy import account_context

# The admin login counts failures with the dashboard's (accounts.ratelimit): one limit per
# address and per IP, whichever door is knocked on.
admin.site.login_form = AdminLoginForm

# django-otp registers its device models: their pages show a person's TOTP secret (and a QR
# code of it) and recovery codes. Support never sees those; a person who lost both their app
# and their codes gets two-factor sign-in turned off by an operator (`manage.py two_factor_off`).
for _device in (TOTPDevice, StaticDevice):
    if admin.site.is_registered(_device):
        admin.site.unregister(_device)
_admin_login = admin.site.login


def _rate_limited_admin_login(request, extra_context=None):
    response = _admin_login(request, extra_context)
    form = (getattr(response, "context_data", None) or {}).get("form")
    if getattr(form, "rate_limited", False):
        response.status_code = 429
    return response


admin.site.login = _rate_limited_admin_login


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    ordering = ("email",)
    list_display = ("email", "full_name", "is_active", "is_staff", "date_joined", "last_login")
    list_filter = ("is_active", "is_staff", "is_superuser")
    search_fields = ("email", "full_name")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Profile", {"fields": ("full_name",)}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")}),
        ("Dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = ((None, {"classes": ("wide",), "fields": ("email", "password1", "password2")}),)

    def get_readonly_fields(self, request, obj=None):
        # Change rights on users are not a way to more rights: only a superuser hands out
        # staff status, superuser status, groups or permissions (to others or to oneself).
        readonly = super().get_readonly_fields(request, obj)
        if not request.user.is_superuser:
            readonly = (*readonly, "is_staff", "is_superuser", "groups", "user_permissions")
        if obj is not None and not may_set_credentials(request.user, obj):
            readonly = (*readonly, "email")  # the login: changing it takes the account over
        return readonly

    def has_change_permission(self, request, obj=None):
        # Nobody edits a person who has more rights than they do (a superuser, or staff with
        # permissions the actor lacks): view only, and Django's password form refuses too.
        if obj is not None and outranks(obj, request.user):
            return False
        return super().has_change_permission(request, obj)

    def user_change_password(self, request, id, form_url=""):
        target = self.get_object(request, id)
        if target is not None and not may_set_credentials(request.user, target):
            raise PermissionDenied
        return super().user_change_password(request, id, form_url)


def outranks(target: User, actor: User) -> bool:
    """Whether `target` has rights `actor` lacks: a superuser over anyone else, staff with a
    permission the actor does not have over that actor."""
    if target.pk == actor.pk or actor.is_superuser:
        return False
    if target.is_superuser:
        return True
    return target.is_staff and not target.get_all_permissions() <= actor.get_all_permissions()


def may_set_credentials(actor: User, target: User) -> bool:
    """Setting `target`'s password or email in the admin (a takeover of their account, a team
    owner's included): one's own, or a superuser's power, or `accounts.set_user_credentials`'s,
    which no support role has by default; never over someone with more rights."""
    if target.pk == actor.pk:
        return True
    if outranks(target, actor):
        return False
    return actor.is_superuser or actor.has_perm("accounts.set_user_credentials")


# --- memberships: through accounts.services, as the Team page's ---------------------------------
# The services keep the last owner, audit once (as staff: audit.actors names the admin's user)
# and tell the member's open sockets. A refusal (AccountError: the last owner, a deleted
# account) rolls the whole save back and is shown on the page it came from.


def _as_staff(request, account: Account, service, **kwargs):
    with account_context(account):
        return service(account=account, actor=request.user, by_staff=True, **kwargs)


def _membership_before(membership: Membership) -> dict | None:
    """The row's account, user and role as stored, before the form's edit (None: a new row)."""
    if membership.pk is None:
        return None
    return Membership.all_accounts.filter(pk=membership.pk).values("account_id", "user_id", "role").first()


def _member_save(request, membership: Membership, *, before: dict | None) -> Membership:
    """An added or edited row (not yet written) through the services; the row as stored."""
    if before is None:
        return _as_staff(request, membership.account, services.member_add, user=membership.user, role=membership.role)
    if (before["account_id"], before["user_id"]) != (membership.account_id, membership.user_id):
        # Moved to another person or account: one leaves, another joins.
        _as_staff(
            request, Account.objects.get(pk=before["account_id"]), services.member_remove, membership_id=membership.pk
        )
        return _as_staff(request, membership.account, services.member_add, user=membership.user, role=membership.role)
    if before["role"] != membership.role:
        return _as_staff(
            request, membership.account, services.member_change_role, membership_id=membership.pk, role=membership.role
        )
    return membership


def _member_remove(request, membership: Membership) -> None:
    _as_staff(request, membership.account, services.member_remove, membership_id=membership.pk)


class RefusalsShownMixin:
    """A change the services refuse is undone whole (the view runs in one atomic block) and
    shown as an error on the page it was made on."""

    def _refusals_shown(self, view, request, *args, **kwargs):
        try:
            with transaction.atomic():
                return view(request, *args, **kwargs)
        except AccountError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return redirect(request.get_full_path())

    def changeform_view(self, request, *args, **kwargs):
        return self._refusals_shown(super().changeform_view, request, *args, **kwargs)


class MembershipInline(AllAccountsMixin, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)
    fields = ("user", "role", "created_at")
    readonly_fields = ("created_at",)

    # A deleted account is a tombstone: nobody joins it again.
    def has_add_permission(self, request, obj=None):
        return super().has_add_permission(request, obj) and not getattr(obj, "deleted_at", None)


class ApiKeyInline(AllAccountsMixin, ReadOnlyMixin, admin.TabularInline):
    """The account's keys, read-only; each key's own page revokes it."""

    model = ApiKey
    extra = 0
    fields = ("name", "prefix", "scope", "created_by", "created_at", "last_used_at", "state")
    readonly_fields = fields
    ordering = ("revoked_at", "-created_at")
    show_change_link = True

    @admin.display(description="state")
    def state(self, key):
        if key.revoked_at:
            return f"revoked {key.revoked_at:%Y-%m-%d %H:%M}"
        url = reverse("admin:accounts_apikey_change", args=[key.pk])
        return format_html('active · <a href="{}">revoke…</a>', url)


class DeletedFilter(admin.SimpleListFilter):
    """Active accounts, or the deleted ones (tombstones whose ledger and audit log are kept)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("deleted", "Deleted")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


@dataclass(frozen=True)
class Panel:
    """A read-only section of the account page, added by a floor above accounts (billing's
    credits, documents' documents): accounts must not import them."""

    name: str
    title: str
    permission: str  # "app.codename": staff without it don't see the section
    render: Callable  # (account) -> safe HTML


@admin.register(Account)
class AccountAdmin(RefusalsShownMixin, admin.ModelAdmin):
    """Support's view of a team: members, keys, and the panels and actions the floors above
    add with `add_panel()`, `add_column()` and `add_action()`."""

    list_display = ("name", "id", "slug", "owners", "state", "created_at")  # id: what support is told
    list_filter = (DeletedFilter,)
    search_fields = ("=id", "name", "slug", "membership__user__email")
    search_help_text = "Account id, name, slug, or the email of an owner or member"
    readonly_fields = ("id", "created_at", "owners", "deleted_at")
    inlines = [MembershipInline, ApiKeyInline]
    actions: list = []
    panels: list[Panel] = []
    annotations: dict = {}

    @classmethod
    def add_panel(cls, panel: Panel) -> None:
        def show(self, account):
            return panel.render(account)

        show.short_description = panel.title
        setattr(cls, panel.name, show)
        cls.panels = [*cls.panels, panel]

    @classmethod
    def add_column(cls, column, *, annotation=None) -> None:
        """A list column; `annotation` (name -> expression) computes it in the list's query."""
        cls.list_display = (*cls.list_display[:-1], column, cls.list_display[-1])
        cls.annotations = {**cls.annotations, **(annotation or {})}

    @classmethod
    def add_action(cls, action, *, permission: str) -> None:
        """An action for holders of `permission` ("app.codename"); the action names it as
        `@admin.action(permissions=[<its own name>])`."""
        (name,) = action.allowed_permissions
        setattr(cls, f"has_{name}_permission", lambda self, request: request.user.has_perm(permission))
        cls.actions = [*cls.actions, action]

    def get_queryset(self, request):
        owners = Prefetch(
            "membership_set",
            to_attr="owner_memberships",
            queryset=Membership.all_accounts.filter(role=Role.OWNER).select_related("user"),
        )
        return super().get_queryset(request).annotate(**self.annotations).prefetch_related(owners)

    @admin.display(description="owners")
    def owners(self, account):
        return ", ".join(m.user.email for m in account.owner_memberships) or "—"

    @admin.display(description="state", ordering="deleted_at")
    def state(self, account):
        return f"deleted {account.deleted_at:%Y-%m-%d %H:%M}" if account.deleted_at else "active"

    def _panels(self, request):
        return [p for p in self.panels if request.user.has_perm(p.permission)]

    def get_fieldsets(self, request, obj=None):
        fieldsets = [
            (
                None,
                {
                    "fields": (["id"] if obj else [])
                    + ["name", "slug", "created_at"]
                    + (["owners"] if obj else [])
                    + (["deleted_at"] if obj is not None and obj.deleted_at else [])
                },
            )
        ]
        if obj is not None:
            fieldsets += [(p.title, {"fields": [p.name]}) for p in self._panels(request)]
        return fieldsets

    def get_readonly_fields(self, request, obj=None):
        return (*super().get_readonly_fields(request, obj), *(p.name for p in self._panels(request)))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if request.method == "GET" and str(object_id).isdigit() and Account.objects.filter(pk=object_id).exists():
            audit_staff_access(account_id=int(object_id), staff=request.user)
        return super().change_view(request, object_id, form_url, extra_context)

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        before = {f.instance.pk: _membership_before(f.instance) for f in formset.initial_forms}
        formset.save(commit=False)  # sorts the rows into new, changed and deleted; writes nothing
        # New owners first and removals last: the account keeps an owner at every step.
        changed = sorted(formset.changed_objects, key=lambda pair: pair[0].role != Role.OWNER)
        for membership in formset.new_objects:
            _member_save(request, membership, before=None)
        for membership, _fields in changed:
            _member_save(request, membership, before=before.get(membership.pk))
        for membership in formset.deleted_objects:
            _member_remove(request, membership)


class MembershipAdminForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ("account", "user", "role")

    def clean_account(self):
        account = self.cleaned_data.get("account")
        if account is not None and account.deleted_at is not None:
            raise forms.ValidationError("This account was deleted: nobody can join it.")
        return account


@admin.register(Membership)
class MembershipAdmin(RefusalsShownMixin, AllAccountsMixin, admin.ModelAdmin):
    form = MembershipAdminForm
    list_display = ("user", "account", "role", "created_at")
    list_filter = ("role", AccountFilter)
    search_fields = ("user__email", "account__name", "account__slug")
    list_select_related = ("user", "account")
    autocomplete_fields = ("user", "account")

    def save_model(self, request, obj, form, change):
        saved = _member_save(request, obj, before=_membership_before(obj) if change else None)
        obj.pk, obj.created_at = saved.pk, saved.created_at  # for the admin's log and redirect

    def delete_model(self, request, obj):
        _member_remove(request, obj)

    def delete_queryset(self, request, queryset):
        # All of them, or (a refusal) none: changelist_view runs in one atomic block.
        for membership in queryset.select_related("account"):
            _member_remove(request, membership)

    def delete_view(self, request, *args, **kwargs):
        return self._refusals_shown(super().delete_view, request, *args, **kwargs)

    def changelist_view(self, request, *args, **kwargs):
        return self._refusals_shown(super().changelist_view, request, *args, **kwargs)


@admin.register(Invitation)
class InvitationAdmin(AllAccountsMixin, admin.ModelAdmin):
    list_display = ("email", "account", "role", "invited_by", "created_at", "expires_at", "accepted_at")
    list_filter = ("role", AccountFilter)
    readonly_fields = ("token_hash", "accepted_at", "accepted_by")
    search_fields = ("email", "account__name")
    list_select_related = ("account", "invited_by")
    autocomplete_fields = ("account",)


@admin.register(ApiKey)
class ApiKeyAdmin(AllAccountsMixin, admin.ModelAdmin):
    list_display = ("name", "prefix", "scope", "account", "created_by", "created_at", "last_used_at", "revoked_at")
    list_filter = ("scope", "revoked_at", AccountFilter)
    search_fields = ("name", "prefix", "account__name", "account__slug")
    list_select_related = ("account", "created_by")
    # The scope is chosen when the key is made and never widened (make a new key instead).
    readonly_fields = (
        "prefix",
        "scope",
        "key_hash",
        "created_at",
        "last_used_at",
        "revoked_at",
        "created_by",
        "account",
    )
    fields = ("name",) + readonly_fields
    actions = ["revoke"]

    def has_add_permission(self, request):
        # A secret is shown once to the person who makes it: keys are made in Team settings.
        return False

    def has_revoke_permission(self, request, obj=None):
        return request.user.has_perm("accounts.change_apikey")

    def get_urls(self):
        # Before the admin's own: its `<path:object_id>/` would swallow ".../revoke/".
        revoke = self.admin_site.admin_view(require_POST(self.revoke_view))
        return [path("<int:key_id>/revoke/", revoke, name="accounts_apikey_revoke"), *super().get_urls()]

    def revoke_view(self, request, key_id):
        if not self.has_revoke_permission(request):
            raise PermissionDenied
        key = get_object_or_404(self.get_queryset(request).select_related("account"), pk=key_id)
        self._revoke(request, [key])
        self.message_user(request, f"Revoked {key}.", messages.SUCCESS)
        return redirect("admin:accounts_apikey_change", key.pk)

    @admin.action(description="Revoke selected API keys", permissions=["revoke"])
    def revoke(self, request, queryset):
        active = list(queryset.filter(revoked_at__isnull=True).select_related("account"))
        self._revoke(request, active)
        self.message_user(request, f"Revoked {len(active)} API key(s).", messages.SUCCESS)

    def _revoke(self, request, keys) -> None:
        # Through the service, so the keys' open sockets close too (staff are no manager of
        # the team: actor=None; the admin log records who).
        for key in keys:
            with account_context(key.account):
                services.api_key_revoke(account=key.account, actor=None, key_id=key.pk)
        record_action(self, request, keys, "Revoked the key (its open sockets are closed).")


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    """A person's link to their subject at the SSO provider (accounts/sso/services.py). Made
    only by signing in; removing one lets another subject with the person's address link to
    them at its next sign-in, so it is a credentials change: a superuser's or
    `accounts.set_user_credentials`' power, like setting another person's email."""

    list_display = ("user", "issuer", "subject", "email", "created_at", "last_login_at")
    search_fields = ("user__email", "email", "subject")
    list_select_related = ("user",)
    readonly_fields = ("user", "issuer", "subject", "email", "created_at", "last_login_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser or request.user.has_perm("accounts.set_user_credentials")

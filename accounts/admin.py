"""Support staff's admin. Staff see across accounts: AccountContextMiddleware runs every
/admin/ request of a staff user inside `dangerously_bypass_tenancy`, and tenant models are
listed through their `all_accounts` manager. Non-staff never get past the admin login."""
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from core.admin_mixins import AllAccountsMixin
from core.tenancy import account_context
from accounts import services
from accounts.forms import AdminLoginForm
from accounts.models import Account, ApiKey, Invitation, Membership, User

# The admin login counts failures with the dashboard's (accounts.ratelimit): one limit per
# address and per IP, whichever door is knocked on.
admin.site.login_form = AdminLoginForm
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


class MembershipInline(AllAccountsMixin, admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin):
    # billing/admin.py adds the balance column and the "Grant credits" action.
    list_display = ("name", "slug", "created_at")
    search_fields = ("name", "slug")
    readonly_fields = ("created_at",)
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(AllAccountsMixin, admin.ModelAdmin):
    list_display = ("user", "account", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("user__email", "account__name", "account__slug")
    list_select_related = ("user", "account")


@admin.register(Invitation)
class InvitationAdmin(AllAccountsMixin, admin.ModelAdmin):
    list_display = ("email", "account", "role", "invited_by", "created_at", "expires_at", "accepted_at")
    readonly_fields = ("token_hash", "accepted_at", "accepted_by")
    search_fields = ("email", "account__name")
    list_select_related = ("account", "invited_by")


@admin.register(ApiKey)
class ApiKeyAdmin(AllAccountsMixin, admin.ModelAdmin):
    list_display = ("name", "prefix", "account", "created_by", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "account__name")
    list_select_related = ("account", "created_by")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at", "revoked_at", "created_by", "account")
    fields = ("name",) + readonly_fields
    actions = ["revoke"]

    def has_add_permission(self, request):
        # A secret is shown once to the person who makes it: keys are made in Team settings.
        return False

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request, queryset):
        # Through the service, so the keys' open sockets close too.
        active = list(queryset.filter(revoked_at__isnull=True).select_related("account"))
        for key in active:
            with account_context(key.account):
                services.api_key_revoke(account=key.account, actor=None, key_id=key.pk)
        self.message_user(request, f"Revoked {len(active)} API key(s).", messages.SUCCESS)

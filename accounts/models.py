"""Users, accounts (the tenants), memberships, invitations and API keys."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

from accounts.keys import API_KEY_PREFIX
from accounts.tokens import IssuedSecret
from core.tenancy import TenantModel


class UserManager(BaseUserManager):
    use_in_migrations = True

    def _create_user(self, email, password, **extra):
        if not email:
            raise ValueError("An email address is required.")
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email, password=None, **extra):
        extra.setdefault("is_staff", False)
        extra.setdefault("is_superuser", False)
        return self._create_user(email, password, **extra)

    def create_superuser(self, email, password=None, **extra):
        extra["is_staff"] = True
        extra["is_superuser"] = True
        return self._create_user(email, password, **extra)

    def get_by_natural_key(self, email):
        return self.get(email__iexact=email)


class User(AbstractBaseUser, PermissionsMixin):
    """A person. The email address is the login."""

    email = models.EmailField(unique=True)
    full_name = models.CharField(max_length=150, blank=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False, help_text="Can log into the support admin.")
    date_joined = models.DateTimeField(default=timezone.now)
    email_verified_at = models.DateTimeField(
        null=True, blank=True, help_text="When the person proved control of the address (a link sent to it)."
    )
    # Where the person works: login lands in `last_account`; `signup_account` is the team made
    # at sign-up, whose starting credits are paid once the address is verified.
    last_account = models.ForeignKey("Account", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    signup_account = models.ForeignKey("Account", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Starting credits are one grant per verified person (accounts.services.team_create and
    # _email_mark_verified): when, and into which team, this person's went.
    starting_credits_granted_at = models.DateTimeField(null=True, blank=True)
    # Raised by "Sign out other sessions" (accounts/profile/services.py): it is part of the
    # session hash, so every session signed in before the raise no longer matches.
    session_epoch = models.PositiveIntegerField(default=0)
    # Raised by each confirmed change of address (accounts/profile/services.py) and named in
    # every change link: a link works once, also after the address went A -> B -> A.
    email_change_count = models.PositiveIntegerField(default=0)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    class Meta:
        constraints = [models.UniqueConstraint(Lower("email"), name="user_email_ci_unique")]
        # Setting another person's password or email in the admin is a takeover of their
        # account: a superuser's power, or this permission's, never "change user"'s
        # (accounts/admin.py, UserAdmin).
        permissions = [("set_user_credentials", "Can set another user's password or email")]

    def __str__(self):
        return self.email

    def get_full_name(self):
        return self.full_name or self.email

    def get_short_name(self):
        return self.full_name.split(" ")[0] if self.full_name else self.email

    def _get_session_auth_hash(self, secret=None):
        # Django's hash of the password, with the epoch in it once it was raised (epoch 0
        # keeps Django's own hash, so adding the field signed nobody out). Covers the
        # SECRET_KEY_FALLBACKS hashes too, which Django makes through this method.
        if not self.session_epoch:
            return super()._get_session_auth_hash(secret=secret)
        from django.utils.crypto import salted_hmac

        return salted_hmac(
            "accounts.User.session_epoch", f"{self.password}:{self.session_epoch}", secret=secret, algorithm="sha256"
        ).hexdigest()


class Account(models.Model):
    """The tenant: a team whose documents, chats and credits belong together."""

    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Who created the team (null for operators' and older accounts): a person creates at most
    # TEAMS_PER_PERSON_PER_DAY a day.
    created_by = models.ForeignKey("User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Deleted by an owner (accounts.services.account_delete): the row stays as a tombstone
    # that keeps the credit ledger and the audit log; nobody resolves into it any more.
    deleted_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # An owner's switch (accounts/sso/): members use the account only from a session signed in
    # through single sign-on; a password session sees the "requires single sign-on" page.
    sso_required = models.BooleanField(default=False, help_text="Members must sign in with SSO.")
    # An owner's switch (accounts/sso/): the provider's verified address signs members in
    # without Groundwork's two-factor step (the provider's MFA counts); with this on, a member
    # who is support staff or a superuser may not sign in through SSO at all: they use their
    # password and two-factor code, and that session opens the account even where SSO is required.
    staff_password_2fa = models.BooleanField(default=False, help_text="Staff must use a password + 2FA, not SSO.")

    def __str__(self):
        return f"{self.name} (deleted)" if self.deleted_at else self.name

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Who may do what is accounts/permissions.py; these are the roles that manage the team there.
MANAGER_ROLES = {Role.OWNER, Role.ADMIN}
# Highest first: nobody grants a role above their own.
ROLE_RANK = {Role.OWNER: 3, Role.ADMIN: 2, Role.MEMBER: 1, Role.VIEWER: 0}


class KeyScope(models.TextChoices):
    READ = "read", "Read (search and chat)"
    WRITE = "write", "Read and write (also upload, delete, reindex)"


class Membership(TenantModel):
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "account"], name="membership_user_account_unique")]

    def __str__(self):
        return f"{self.user} in {self.account_id} ({self.role})"

    @property
    def can_manage_team(self) -> bool:
        return self.role in MANAGER_ROLES


class Invitation(TenantModel):
    """An invitation to join an account, sent to an email address.

    Accepted only by someone who proves control of the address: the emailed link (signed,
    naming the invitation and a secret whose SHA-256 is `token_hash`), or, for a user whose
    address is verified, the Accept button on their overview. Used once (`accepted_at`),
    until `expires_at`.
    """

    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    invited_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    token_hash = models.CharField(max_length=64, blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                Lower("email"),
                "account",
                condition=models.Q(accepted_at__isnull=True),
                name="invitation_pending_email_account_unique",
            )
        ]

    @property
    def is_expired(self) -> bool:
        return self.expires_at is None or self.expires_at <= timezone.now()

    def __str__(self):
        return f"{self.email} → {self.account_id}"


class ApiKey(IssuedSecret):
    """An integration's key. Only a SHA-256 of the secret is stored; it is shown once
    (accounts/tokens.py: the lifecycle it shares with SCIM tokens)."""

    SECRET_PREFIX = API_KEY_PREFIX
    PREFIX_LENGTH = 10
    HASH_FIELD = "key_hash"
    AUDIT_NAME = "key"
    NOT_FOUND_MESSAGE = "That API key was not found."

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise a key.")
    key_hash = models.CharField(max_length=64, unique=True)
    # What the key may do (accounts/permissions.py); chosen at creation, never widened.
    scope = models.CharField(max_length=5, choices=KeyScope.choices, default=KeyScope.WRITE)

    class Meta:
        verbose_name = "API key"

    def __str__(self):
        return self.label


# SCIM provisioning's rows live with their package (accounts/scim/); imported here so they
# are the accounts app's models.
from accounts.domains.models import VerifiedDomain  # noqa: E402,F401
from accounts.scim.models import ScimIdentity, ScimToken  # noqa: E402,F401


class SsoIdentity(models.Model):
    """A person at the single sign-on provider: the provider's `sub` for a user, so a later
    change of address at the provider still finds the same person (accounts/sso/services.py).
    A person's, not a tenant's: no account column, like User."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="sso_identities")
    email = models.EmailField(help_text="The address the provider gave at the last sign-in.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_issuer_subject_unique"),
            # One identity per person and provider: another `sub` never quietly joins a person.
            models.UniqueConstraint(fields=["issuer", "user"], name="sso_identity_issuer_user_unique"),
        ]

    def __str__(self):
        return f"{self.subject} at {self.issuer} → {self.user_id}"

"""The provider side of single sign-on, through authlib's Django client: discovery (read at
first use from `<OIDC_ISSUER>/.well-known/openid-configuration` and kept, never at import),
the authorization redirect (state, nonce and PKCE S256, kept in the session until the
callback uses them once), the code exchange and the ID token's checks: signature against the
provider's JWKS, issuer, audience (our client id), expiry and nonce.

authlib checks the nonce and the issuer by itself but not the audience (1.9: `aud` is only
read for `azp`), so the claims options here name every claim that must hold.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
from authlib.integrations.django_client import OAuth
from django.conf import settings
from joserfc import errors as jose_errors

from accounts.error_codes import SsoErrorCode
from accounts.sso.errors import SsoError

logger = logging.getLogger("groundwork.sso")

CLIENT_NAME = "groundwork_oidc"
SCOPES = "openid email profile"

_clients: dict[tuple[str, str, str], object] = {}
_clients_lock = threading.Lock()


@dataclass(frozen=True)
class Identity:
    """What a checked ID token says about the person."""

    issuer: str
    subject: str
    email: str
    email_verified: bool
    name: str = ""


def sso_enabled() -> bool:
    """SSO is on when the issuer and the client id are both set."""
    return bool(settings.OIDC_ISSUER and settings.OIDC_CLIENT_ID)


def _client():
    """One authlib client per configuration; it keeps the discovery document and the JWKS it
    fetched (a failed fetch keeps nothing, so the next sign-in tries again)."""
    if not sso_enabled():
        raise SsoError(SsoErrorCode.SSO_DISABLED, "Single sign-on is not set up here.", status=404)
    config = (settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET)
    with _clients_lock:
        client = _clients.get(config)
        if client is None:
            oauth = OAuth()
            client = oauth.register(
                CLIENT_NAME,
                client_id=config[1],
                client_secret=config[2] or None,
                server_metadata_url=f"{config[0]}/.well-known/openid-configuration",
                client_kwargs={
                    "scope": SCOPES,
                    "code_challenge_method": "S256",
                    "default_timeout": settings.OIDC_TIMEOUT_SECONDS,
                },
            )
            _clients[config] = client
    return client


def _unavailable(exc: Exception) -> SsoError:
    logger.warning("sso provider unreachable at %s: %s", settings.OIDC_ISSUER, exc)
    return SsoError(
        SsoErrorCode.SSO_PROVIDER_UNAVAILABLE,
        "The sign-in provider could not be reached. Try again in a moment, or log in with your password.",
        status=502,
    )


def authorization_redirect(request, *, redirect_uri: str):
    """The 302 to the provider's authorization endpoint; state, nonce and the PKCE verifier
    are kept in the session for the callback."""
    try:
        return _client().authorize_redirect(request, redirect_uri)
    except (requests.RequestException, ValueError, KeyError) as exc:  # down, not JSON, no endpoint
        raise _unavailable(exc) from exc


def identity_from_callback(request) -> Identity:
    """The person the provider vouches for, from the callback's code: the state is used once
    (a replayed or foreign callback is refused), the code is exchanged, the ID token checked.
    Every refusal is an SsoError with its own code, and is logged."""
    client = _client()
    claims_options = {
        # The issuer exactly as configured; with a trailing slash too (some providers' issuer
        # has one, and OIDC_ISSUER is kept without it).
        "iss": {"essential": True, "values": [settings.OIDC_ISSUER, settings.OIDC_ISSUER + "/"]},
        "aud": {"essential": True, "value": settings.OIDC_CLIENT_ID},
        "sub": {"essential": True},
        "exp": {"essential": True},
    }
    try:
        token = client.authorize_access_token(request, claims_options=claims_options)
    except MismatchingStateError as exc:
        raise _refused(
            SsoErrorCode.SSO_STATE_INVALID,
            "This sign-in link was already used or has expired. Start again with “Sign in with SSO”.",
            exc,
            status=400,
        ) from exc
    except OAuthError as exc:
        raise _refused(
            SsoErrorCode.SSO_PROVIDER_REFUSED,
            f"The sign-in provider did not sign you in{': ' + exc.description if exc.description else ''}.",
            exc,
            status=403,
        ) from exc
    except jose_errors.BadSignatureError as exc:
        raise _refused(
            SsoErrorCode.SSO_BAD_SIGNATURE,
            "The sign-in provider's answer had an invalid signature, so it was refused.",
            exc,
        ) from exc
    except jose_errors.ExpiredTokenError as exc:
        raise _refused(
            SsoErrorCode.SSO_TOKEN_EXPIRED, "The sign-in provider's answer has expired. Start again.", exc
        ) from exc
    except jose_errors.ClaimError as exc:
        raise _claim_refused(exc) from exc
    except jose_errors.JoseError as exc:
        raise _refused(
            SsoErrorCode.SSO_TOKEN_INVALID, "The sign-in provider's answer could not be read, so it was refused.", exc
        ) from exc
    except requests.HTTPError as exc:
        # The token endpoint answered with an error (authlib raises OAuthError for most).
        raise _refused(
            SsoErrorCode.SSO_PROVIDER_REFUSED,
            "The sign-in provider refused to complete the sign-in. Start again.",
            exc,
            status=403,
        ) from exc
    except (requests.RequestException, ValueError) as exc:
        raise _unavailable(exc) from exc
    except AuthlibBaseError as exc:
        raise _refused(
            SsoErrorCode.SSO_TOKEN_INVALID, "The sign-in provider's answer was refused. Start again.", exc
        ) from exc
    claims = token.get("userinfo")
    if not claims:
        raise _refused(
            SsoErrorCode.SSO_TOKEN_INVALID, "The sign-in provider sent no ID token, so nobody was signed in.", None
        )
    return Identity(
        issuer=settings.OIDC_ISSUER,
        subject=str(claims["sub"]),
        email=str(claims.get("email") or "").strip().lower(),
        # A JSON true; some providers send the string "true".
        email_verified=claims.get("email_verified") in (True, "true"),
        name=str(claims.get("name") or "")[:150],
    )


def _claim_refused(exc) -> SsoError:
    claim = getattr(exc, "claim", "")
    if claim == "aud":
        return _refused(
            SsoErrorCode.SSO_WRONG_AUDIENCE,
            "The sign-in provider's answer was meant for another application, so it was refused.",
            exc,
        )
    if claim == "nonce":
        return _refused(
            SsoErrorCode.SSO_NONCE_MISMATCH,
            "The sign-in provider's answer does not belong to this "
            "sign-in (nonce mismatch), so it was refused. Start again.",
            exc,
        )
    if claim == "iss":
        return _refused(
            SsoErrorCode.SSO_WRONG_ISSUER,
            "The sign-in answer came from another provider than the one set up here, so it was refused.",
            exc,
        )
    return _refused(
        SsoErrorCode.SSO_TOKEN_INVALID, f"The sign-in provider's answer was refused (claim “{claim}”).", exc
    )


def _refused(code: SsoErrorCode, message: str, exc: Exception | None, status: int = 400) -> SsoError:
    logger.warning("sso: the provider's answer was rejected (%s): %s", code, exc)
    return SsoError(code, message, status=status)

"""API key secrets: the prefix every key starts with and the one-way hash stored in place of
the secret. Shared by the services that create keys and the selector that resolves them."""

from __future__ import annotations

import hashlib

API_KEY_PREFIX = "gw_"


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()

"""Password hashing and session tokens. Tokens are random and stored only as their SHA-256."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

# scrypt (RFC 7914) from the standard library: memory-hard, no extra dependency.
_N, _R, _P = 2**14, 8, 1


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return "scrypt${}${}".format(*(base64.b64encode(x).decode() for x in (salt, digest)))


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, salt_b64, digest_b64 = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    salt, digest = base64.b64decode(salt_b64), base64.b64decode(digest_b64)
    candidate = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return hmac.compare_digest(candidate, digest)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()

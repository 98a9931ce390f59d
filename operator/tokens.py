"""When the service-token Secret must be re-minted, and what the token says (unverified:
the operator wrote it; this only reads its own claims back)."""

from __future__ import annotations

from typing import Any

import jwt

from agentchat.keys import KeyRing
from agentchat.operator.spec import ServiceTokenSpec


def read_claims(token: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    return header, claims


def renewal_reason(token: str | None, ring: KeyRing, spec: ServiceTokenSpec,
                   now: float) -> str | None:
    """Why the token must be re-minted now, or None when it is still good."""
    if not token:
        return "no service token yet"
    parsed = read_claims(token)
    if parsed is None:
        return "the stored service token is unreadable"
    header, claims = parsed
    if header.get("kid") != ring.current().kid:
        # After a promotion the new current key takes over at once; the previous key stays
        # in the JWKS until this token has expired.
        return "the signing key rotated"
    if (claims.get("iss"), claims.get("aud"), claims.get("sub")) != (
            spec.issuer, spec.audience, spec.subject):
        return "the spec's issuer, audience or subject changed"
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(exp, int) or not isinstance(iat, int):
        return "the stored service token has no expiry"
    if exp - iat != spec.lifetime_seconds:
        return "the spec's token lifetime changed"
    if exp - now <= spec.refresh_margin_seconds:
        return "the service token expires soon"
    return None

"""The JWT attack list (Foundation issue, RFC 8725), built for either kind of token.

Every component's tests feed these to their endpoints: each must be refused and audit nothing.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentchat.identity import DevUserIssuer
from agentchat.keys import SERVICE_TOKEN_TYPE, KeyRing, sign_service_token
from agentchat.settings import SharedSettings


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return (_b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode()) + ".")


def _tamper(token: str, **changes: Any) -> str:
    head, payload, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    return f"{head}.{_b64(json.dumps(claims).encode())}.{sig}"


USER_ATTACKS = ["alg_none", "hs256_public_key", "expired", "nbf_future", "wrong_aud", "wrong_iss",
                "missing_exp", "tampered", "unknown_kid", "swapped_service_token", "oversized",
                "garbage"]
SERVICE_ATTACKS = [*USER_ATTACKS[:9], "swapped_user_token", "oversized", "garbage"]


def user_attacks(settings: SharedSettings, issuer: DevUserIssuer, ring: KeyRing,
                 user: str = "alice") -> dict[str, str]:
    """Bad user tokens by name; each must give UNAUTHORIZED (or a user_token_invalid deny)."""
    now = int(time.time())
    good_claims = {"iss": settings.user_issuer, "aud": settings.user_audience, "sub": user,
                   "iat": now, "exp": now + 600, settings.roles_claim: ["admin"]}
    public_pem = json.loads(settings.user_jwks.read_text())["keys"][0]
    pub_key = jwt.PyJWK.from_dict(public_pem).key.public_bytes(  # type: ignore[union-attr]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    foreign = Ed25519PrivateKey.generate()
    no_exp = dict(good_claims)
    no_exp.pop("exp")
    return {
        "alg_none": _unsigned({"alg": "none", "typ": "JWT", "kid": issuer.kid}, good_claims),
        # HMAC "signed" with the public key: classic algorithm confusion. PyJWT refuses to
        # sign with a PEM, so build the HMAC by hand.
        "hs256_public_key": _hs256(good_claims, pub_key, issuer.kid),
        "expired": issuer.mint(user, lifetime_s=-3600, now=now - 7200),
        "nbf_future": issuer.mint(user, extra={"nbf": now + 3600}),
        "wrong_aud": issuer.mint(user, extra={"aud": "someone-else"}),
        "wrong_iss": issuer.mint(user, extra={"iss": "evil-issuer"}),
        "missing_exp": _sign_rs(issuer, no_exp),
        "tampered": _tamper(issuer.mint("carol"), sub=user, roles=["admin"]),
        "unknown_kid": jwt.encode(good_claims, foreign, algorithm="EdDSA",
                                  headers={"kid": "nobody-knows-me"}),
        "swapped_service_token": sign_service_token(
            ring, issuer=settings.service_issuer, audience=settings.service_audience),
        "oversized": issuer.mint(user, extra={"pad": "x" * 9000}),
        "garbage": "not-a-jwt",
    }


def service_attacks(settings: SharedSettings, issuer: DevUserIssuer,
                    ring: KeyRing) -> dict[str, str]:
    """Bad service tokens by name; each must be refused with 401."""
    now = int(time.time())
    key = ring.current()
    claims = {"iss": settings.service_issuer, "aud": settings.service_audience,
              "sub": "agentchat-agent", "iat": now, "exp": now + 600}
    headers = {"kid": key.kid, "typ": SERVICE_TOKEN_TYPE}
    pub_pem = key.private_key().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    priv = key.private_key()
    no_exp = {k: v for k, v in claims.items() if k != "exp"}
    good = jwt.encode(claims, priv, algorithm="EdDSA", headers=headers)
    return {
        "alg_none": _unsigned({"alg": "none", **headers}, claims),
        "hs256_public_key": _hs256(claims, pub_pem, key.kid, typ=SERVICE_TOKEN_TYPE),
        "expired": jwt.encode({**claims, "iat": now - 7200, "exp": now - 3600}, priv,
                              algorithm="EdDSA", headers=headers),
        "nbf_future": jwt.encode({**claims, "nbf": now + 3600}, priv, algorithm="EdDSA",
                                 headers=headers),
        "wrong_aud": jwt.encode({**claims, "aud": "other"}, priv, algorithm="EdDSA",
                                headers=headers),
        "wrong_iss": jwt.encode({**claims, "iss": "evil"}, priv, algorithm="EdDSA",
                                headers=headers),
        "missing_exp": jwt.encode(no_exp, priv, algorithm="EdDSA", headers=headers),
        "tampered": _tamper(good, sub="someone-else"),
        "unknown_kid": jwt.encode(claims, Ed25519PrivateKey.generate(), algorithm="EdDSA",
                                  headers={**headers, "kid": "nobody-knows-me"}),
        "swapped_user_token": issuer.mint("alice"),
        "oversized": jwt.encode({**claims, "pad": "x" * 9000}, priv, algorithm="EdDSA",
                                headers=headers),
        "garbage": "not-a-jwt",
    }


def _hs256(claims: dict[str, Any], secret: bytes, kid: str, typ: str = "JWT") -> str:
    import hashlib
    import hmac

    head = _b64(json.dumps({"alg": "HS256", "typ": typ, "kid": kid}).encode())
    body = _b64(json.dumps(claims).encode())
    sig = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


def _sign_rs(issuer: DevUserIssuer, claims: dict[str, Any]) -> str:
    return jwt.encode(claims, issuer._key, algorithm="RS256", headers={"kid": issuer.kid})

"""Service-token signing keys: a ring of Ed25519 keys in three stages (docs/protocol.md §8).

`next` is published in the JWKS before it signs anything, `current` signs, `previous` only
verifies until every token it signed has expired. The ring lives in one JSON file (a Secret
written by the operator in a cluster, generated into the data folder locally); the public JWKS
is derived from it. Files are replaced atomically so a reader never sees half a ring.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

RING_FILE = "signing-keys.json"
JWKS_FILE = "jwks.json"
STAGES = ("next", "current", "previous")
SERVICE_TOKEN_TYPE = "agentchat-service+jwt"
# The only JWK members a published key set carries (RFC 7517/7518 public parameters of OKP,
# RSA and EC keys, plus kid/alg/use): never `d`, `p`, `q`, `dp`, `dq`, `qi`, `oth`, nor our
# own bookkeeping such as the ring's `stage` (rotation timing is ours, in the CR status).
PUBLIC_JWK_MEMBERS = ("kty", "crv", "x", "y", "n", "e", "kid", "alg", "use")


def public_members(jwk: dict[str, Any]) -> dict[str, Any]:
    """The JWK with only its public members (PUBLIC_JWK_MEMBERS), in that order."""
    return {k: jwk[k] for k in PUBLIC_JWK_MEMBERS if k in jwk}


@dataclass(frozen=True)
class SigningKey:
    kid: str
    stage: str
    created_at: float
    private_pem: str
    # When the key entered its present stage (drives the operator's due checks).
    stage_since: float

    def private_key(self) -> Ed25519PrivateKey:
        key = serialization.load_pem_private_key(self.private_pem.encode(), password=None)
        assert isinstance(key, Ed25519PrivateKey)
        return key

    def public_jwk(self) -> dict[str, Any]:
        raw = self.private_key().public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        return {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": self.kid, "use": "sig",
                "alg": "EdDSA"}


def new_key(stage: str, *, now: float | None = None) -> SigningKey:
    if stage not in STAGES:
        raise ValueError(f"unknown key stage {stage!r}")
    now = time.time() if now is None else now
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    kid = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + "-" + secrets.token_hex(4)
    return SigningKey(kid=kid, stage=stage, created_at=now, private_pem=pem, stage_since=now)


@dataclass(frozen=True)
class KeyRing:
    keys: tuple[SigningKey, ...]

    def by_stage(self, stage: str) -> list[SigningKey]:
        return [k for k in self.keys if k.stage == stage]

    def current(self) -> SigningKey:
        current = self.by_stage("current")
        if len(current) != 1:
            raise ValueError(f"a key ring needs exactly one current key, has {len(current)}")
        return current[0]

    def public_jwks(self) -> dict[str, Any]:
        order = {s: i for i, s in enumerate(STAGES)}
        return {"keys": [k.public_jwk() for k in sorted(self.keys, key=lambda k: order[k.stage])]}

    def to_json(self) -> str:
        return json.dumps({"keys": [asdict(k) for k in self.keys]}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> KeyRing:
        data = json.loads(text)
        return cls(keys=tuple(SigningKey(**k) for k in data["keys"]))


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_ring(keys_dir: Path) -> KeyRing:
    return KeyRing.from_json((keys_dir / RING_FILE).read_text())


def save_ring(keys_dir: Path, ring: KeyRing, jwks_path: Path | None = None) -> None:
    """Write the private ring and its public JWKS (public file world-readable)."""
    write_atomic(keys_dir / RING_FILE, ring.to_json())
    write_atomic(jwks_path or keys_dir / JWKS_FILE, json.dumps(ring.public_jwks(), indent=2), 0o644)


def ensure_ring(keys_dir: Path, jwks_path: Path | None = None) -> KeyRing:
    """Load the ring, generating a first current key when there is none (local/dev use)."""
    try:
        return load_ring(keys_dir)
    except FileNotFoundError:
        ring = KeyRing(keys=(new_key("current"),))
        save_ring(keys_dir, ring, jwks_path)
        return ring


def sign_service_token(
    ring: KeyRing,
    *,
    issuer: str,
    audience: str,
    subject: str = "agentchat-agent",
    lifetime_s: int = 900,
    now: float | None = None,
) -> str:
    key = ring.current()
    now = int(time.time() if now is None else now)
    claims = {
        "iss": issuer, "aud": audience, "sub": subject,
        "iat": now, "nbf": now, "exp": now + lifetime_s, "jti": secrets.token_hex(8),
    }
    return jwt.encode(
        claims, key.private_key(), algorithm="EdDSA",
        headers={"kid": key.kid, "typ": SERVICE_TOKEN_TYPE},
    )

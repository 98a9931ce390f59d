"""The user token a live run keeps for its takeover (`runs.resume_token`, issue 33), sealed.

A run taken over needs its user's token to go on (the sidecar checks every tool call against
it), so the row holds it while the run is live and clears it when the run ends. Sealed
(Fernet: AES-CBC with an HMAC, the key through HKDF), a database reader or a backup holds no
usable bearer token. The key, the same on every replica: `AGENTCHAT_AGENT_RESUME_KEY`, else
the file `AGENTCHAT_AGENT_RESUME_KEY_FILE` (in the chart, the operator's `resume-key` beside
the service token; read when first needed, since the operator may write it after the pod
starts), else derived from the service client secret. With none, nothing is stored and such
runs cannot be taken over (RUN_LOST `unresumable`): closed, not open.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

INFO = b"agentchat runs.resume_token v1"


class TokenSeal:
    def __init__(self, secret: Callable[[], str | None]) -> None:
        self._secret = secret
        self._fernet: Fernet | None = None

    @classmethod
    def of(cls, key: str | None, key_file: Path | None = None,
           fallback: str | None = None) -> TokenSeal:
        def secret() -> str | None:
            if key:
                return key
            if key_file is not None:
                try:
                    return key_file.read_text().strip() or None
                except OSError:
                    return None
            return fallback
        return cls(secret)

    def _key(self) -> Fernet | None:
        if self._fernet is None:
            secret = self._secret()
            if secret:
                key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                           info=INFO).derive(secret.encode())
                self._fernet = Fernet(base64.urlsafe_b64encode(key))
        return self._fernet

    def seal(self, token: str | None) -> str | None:
        fernet = self._key()
        if token is None or fernet is None:
            return None
        return fernet.encrypt(token.encode()).decode()

    def open(self, sealed: str) -> str:
        """The token; ValueError when it was sealed under another key or altered."""
        fernet = self._key()
        if fernet is None:
            raise ValueError("no key to open a sealed resume token with")
        try:
            return fernet.decrypt(sealed.encode()).decode()
        except InvalidToken as e:
            raise ValueError("the resume token does not open under this key") from e

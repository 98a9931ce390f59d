"""The user token a live run keeps for its takeover (`runs.resume_token`, protocol.md §4), sealed.

A run taken over needs its user's token to go on (the sidecar checks every tool call against
it), so the row holds it while the run is live and clears it when the run ends. Sealed
(Fernet: AES-CBC with an HMAC, each key through HKDF), a database reader or a backup holds no
usable bearer token.

**Bound to its run.** What is sealed is `{v, run, conversation, sub, token}`: the run id, its
conversation and the token's subject travel inside the ciphertext, and `open` refuses a seal
whose run or conversation is not the row's it was read from, or whose token does not name the
subject sealed with it. A seal copied into another run's row (another user's) does not open:
ValueError, and that run ends RUN_LOST `unresumable` rather than going on as someone else.

**Keys, newest first.** A list (MultiFernet): the first key seals, every key opens, so a
rotation prepends a key and old seals still open. From `AGENTCHAT_AGENT_RESUME_KEY` (one key,
or several separated by commas or newlines), else the file `AGENTCHAT_AGENT_RESUME_KEY_FILE`
(one key a line, newest first: the operator's `resume-key`, operator/resume_keys.py), re-read
whenever it changes (its mtime, size or inode: kubelet swaps a mounted Secret's files), so a
rotation needs no restart (a line shorter than 32 characters is not used); else one key
derived from the service client secret. With none, nothing is stored and such runs cannot be
taken over (RUN_LOST `unresumable`): closed, not open.

**Other seals, other keys.** The same key material seals an MCP call's `request_state`
(agent/chat/gated_cards.py), under its own HKDF info, so neither seal ever opens as the other.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from agentchat.agent.settings import RESUME_KEY_MIN_CHARS, resume_keys

log = logging.getLogger("agentchat.agent.storage.sealing")

INFO = b"agentchat runs.resume_token v1"
VERSION = 2  # the payload's: 1 sealed the bare token, bound to nothing (refused now)


def subject_of(token: str) -> str:
    """The token's `sub`, read without verifying (it was verified when the run began);
    empty when it names none."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return ""
    sub = claims.get("sub")
    return sub if isinstance(sub, str) else ""


class KeyFile:
    """The keys of a file, read again only when the file changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._keys: tuple[str, ...] = ()

    def keys(self) -> tuple[str, ...]:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._seen:
                listed = resume_keys(self.path.read_text())
                self._keys = tuple(k for k in listed if len(k) >= RESUME_KEY_MIN_CHARS)
                self._seen = stamp
                if len(self._keys) < len(listed):
                    log.warning("resume key file: %d of %d keys shorter than %d characters, "
                                "not used", len(listed) - len(self._keys), len(listed),
                                RESUME_KEY_MIN_CHARS)
        except OSError:  # not written yet (the operator may come after the pod), or a
            pass         # moment of a swap: the keys last read stand
        return self._keys


def _fernet(secret: str, info: bytes = INFO) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(
        secret.encode())
    return Fernet(base64.urlsafe_b64encode(key))


class TokenSeal:
    """`info`: what the keys seal (HKDF's info), so a seal made for one purpose never opens
    as another's (a run's token, an MCP call's `request_state`)."""

    def __init__(self, secrets: Callable[[], tuple[str, ...]], info: bytes = INFO) -> None:
        self._secrets = secrets
        self._info = info
        self._for: tuple[str, ...] | None = None
        self._ring: MultiFernet | None = None

    @classmethod
    def of(cls, key: str | None, key_file: Path | None = None,
           fallback: str | None = None, info: bytes = INFO) -> TokenSeal:
        if key:
            listed = resume_keys(key)
            return cls(lambda: listed, info)
        if key_file is not None:
            return cls(KeyFile(key_file).keys, info)
        derived = (fallback,) if fallback else ()
        return cls(lambda: derived, info)

    def _keys(self) -> MultiFernet | None:
        secrets = self._secrets()
        if secrets != self._for:
            self._ring = MultiFernet([_fernet(s, self._info) for s in secrets]) \
                if secrets else None
            self._for = secrets
        return self._ring

    def seal_json(self, payload: dict[str, Any]) -> str | None:
        """Any JSON object sealed under the newest key; None without a key."""
        ring = self._keys()
        if ring is None:
            return None
        return ring.encrypt(json.dumps(payload, separators=(",", ":")).encode()).decode()

    def open_json(self, sealed: str, *, max_age_s: int) -> dict[str, Any]:
        """The object, when sealed under one of the keys at most `max_age_s` ago and
        unaltered; ValueError otherwise."""
        ring = self._keys()
        if ring is None:
            raise ValueError("no key to open a seal with")
        try:
            payload = json.loads(ring.decrypt(sealed.encode(), ttl=max_age_s))
        except (InvalidToken, ValueError, UnicodeError) as e:
            raise ValueError("the seal does not open under these keys") from e
        if not isinstance(payload, dict):
            raise ValueError("the seal holds no object")
        return payload

    def seal(self, token: str | None, *, run: str, conversation: str) -> str | None:
        """The token sealed under the newest key with its run, conversation and subject;
        None without a token or a key (nothing is kept)."""
        ring = self._keys()
        if token is None or ring is None:
            return None
        payload = {"v": VERSION, "run": run, "conversation": conversation,
                   "sub": subject_of(token), "token": token}
        return ring.encrypt(json.dumps(payload, separators=(",", ":")).encode()).decode()

    def open(self, sealed: str, *, run: str, conversation: str, sub: str | None = None) -> str:
        """The token, when sealed under one of the keys, unaltered, for this run and
        conversation (and `sub`, when the caller knows whose it must be); ValueError
        otherwise."""
        ring = self._keys()
        if ring is None:
            raise ValueError("no key to open a sealed resume token with")
        try:
            payload = json.loads(ring.decrypt(sealed.encode()))
        except InvalidToken as e:
            raise ValueError("the resume token does not open under these keys") from e
        except ValueError as e:
            raise ValueError("the resume token is not bound to a run") from e
        if not isinstance(payload, dict) or payload.get("v") != VERSION:
            raise ValueError("the resume token is not bound to a run")
        token = payload.get("token")
        if (payload.get("run"), payload.get("conversation")) != (run, conversation):
            raise ValueError("the resume token was sealed for another run")
        if not isinstance(token, str) or subject_of(token) != payload.get("sub") \
                or (sub is not None and payload.get("sub") != sub):
            raise ValueError("the resume token was sealed for another subject")
        return token

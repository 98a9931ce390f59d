"""Upload quotas: who owns each upload, how much each user holds, and when it expires.

    POST …/gradio_api/upload ─ GradioFileGuard counts it in a PerMinute (agent/chat/user_limits.py),
                               then `take` reads the body into memory (under a hold of the
                               room it may need), counting the multipart parts as they stream,
                               and refuses as soon as a limit is passed; only a body within
                               every limit reaches Gradio (whose parser writes parts to the
                               upload folder), its room reserved until Gradio answered
    the answer's paths       ─ `record`: owner, size (as counted), last use = now
    /chat names a file       ─ `touch` (last use = now), `used_in` (the conversation's files)
    the sweeper              ─ `expired`: uploads unused for `upload_expiry_s`, deleted
    DELETE a conversation    ─ `forget_conversation`: its uploads, deleted

Over a per-request, per-user count or size limit: 413 INVALID_REQUEST; over the uploads a
minute, or the replica's upload space full: 429 RATE_LIMITED (docs/protocol.md §1). All of it
lives in this process, like the owner map it extends (agent/chat/attachments.py's docstring): a
file exists only in this pod's upload folder, so its quota is this replica's too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agentchat.agent.settings import AgentSettings
from agentchat.errors import ErrorCode, LocalError

# Multipart framing on top of the files' bytes (boundaries, part headers, small fields): a
# body longer than the files allowed plus this is refused from its Content-Length alone.
FRAMING_BYTES = 64 * 1024


class UploadRefused(LocalError):
    """An upload over a limit: the status and the docs/protocol.md §5 body to answer."""

    def __init__(self, status: int, detail: str) -> None:
        code = ErrorCode.RATE_LIMITED if status == 429 else ErrorCode.INVALID_REQUEST
        super().__init__(detail, code=code, status=status)
        self.status = status


@dataclass(frozen=True)
class UploadLimits:
    files_per_request: int
    file_bytes: int
    request_bytes: int
    files_per_user: int
    bytes_per_user: int
    per_minute: int
    replica_bytes: int

    @classmethod
    def from_settings(cls, s: AgentSettings) -> UploadLimits:
        # One request carries at most what one /chat message may attach.
        t = s.tuning
        return cls(files_per_request=t.max_files, file_bytes=t.max_file_bytes,
                   request_bytes=t.max_files_total_bytes,
                   files_per_user=t.upload_files_per_user,
                   bytes_per_user=t.upload_bytes_per_user,
                   per_minute=t.uploads_per_minute_per_user,
                   replica_bytes=s.upload_bytes_per_replica)


@dataclass
class _Upload:
    size: int
    used: dict[str, float] = field(default_factory=dict)  # sub -> last use


@dataclass
class Room:
    """What one request may still add: files and bytes, and whether the bytes are the
    replica's (429, it frees up) rather than the user's (413)."""

    files: int
    bytes: int
    replica_bound: bool


class UploadBook:
    """Upload key (relative to the upload folder) -> its size and each owner's last use.

    Gradio names an upload by its content's hash, so two users sending the same file share one
    path: each owns it, each is charged for it, and it is deleted when the last one lets go."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._files: dict[str, _Upload] = {}
        self._held: dict[str, set[str]] = {}  # sub -> keys
        self._pending: dict[str, tuple[int, int]] = {}  # sub -> reserved (files, bytes)
        self._conversations: dict[str, set[str]] = {}  # conversation id -> keys used there
        self._lock = threading.Lock()

    # --- ownership (agent/gradio/inputs.py) -------------------------------------------------

    def owns(self, key: str, sub: str) -> bool:
        with self._lock:
            f = self._files.get(key)
            return f is not None and sub in f.used

    def known(self, key: str) -> bool:
        with self._lock:
            return key in self._files

    def record(self, key: str, sub: str, size: int) -> None:
        with self._lock:
            f = self._files.setdefault(key, _Upload(size))
            f.size = size
            f.used[sub] = self._clock()
            self._held.setdefault(sub, set()).add(key)

    def touch(self, keys: Iterable[str], sub: str) -> None:
        """A /chat submit used these files: their expiry starts again."""
        now = self._clock()
        with self._lock:
            for key in keys:
                f = self._files.get(key)
                if f is not None and sub in f.used:
                    f.used[sub] = now

    def used_in(self, conversation_id: str, keys: Iterable[str]) -> None:
        with self._lock:
            self._conversations.setdefault(conversation_id, set()).update(keys)

    # --- room (the guard) ------------------------------------------------------------------

    def room(self, sub: str, limits: UploadLimits) -> Room:
        with self._lock:
            return self._room(sub, limits)

    def _room(self, sub: str, limits: UploadLimits) -> Room:
        held = self._held.get(sub, set())
        p_files, p_bytes = self._pending.get(sub, (0, 0))
        user_bytes = sum(self._files[k].size for k in held) + p_bytes
        replica = (sum(f.size for f in self._files.values())
                   + sum(b for _, b in self._pending.values()))
        files = min(limits.files_per_request, limits.files_per_user - len(held) - p_files)
        mine = min(limits.request_bytes, limits.bytes_per_user - user_bytes)
        theirs = limits.replica_bytes - replica
        return Room(max(files, 0), max(min(mine, theirs), 0), theirs < mine)

    def reserve(self, sub: str, files: int, size: int, limits: UploadLimits) -> None:
        """Hold room for a request counted whole, until Gradio answered (`release`): two
        requests at once cannot both take the last of a quota."""
        with self._lock:
            check(self._room(sub, limits), files, size, 0)
            p_files, p_bytes = self._pending.get(sub, (0, 0))
            self._pending[sub] = (p_files + files, p_bytes + size)

    def release(self, sub: str, files: int, size: int) -> None:
        with self._lock:
            p_files, p_bytes = self._pending.pop(sub, (0, 0))
            if (p_files - files, p_bytes - size) != (0, 0):
                self._pending[sub] = (p_files - files, p_bytes - size)

    # --- letting go (the sweeper, a deleted conversation) -----------------------------------

    def expired(self, expiry_s: float) -> list[str]:
        """Drop every owner's use older than `expiry_s`; the keys no one holds any more."""
        cutoff = self._clock() - expiry_s
        with self._lock:
            for key, f in self._files.items():
                for sub in [s for s, t in f.used.items() if t <= cutoff]:
                    self._let_go(key, sub)
            return self._drop_unheld()

    def forget_conversation(self, conversation_id: str, sub: str) -> list[str]:
        """`sub` lets go of the uploads used in the conversation; the keys no one holds."""
        with self._lock:
            for key in self._conversations.pop(conversation_id, set()):
                if key in self._files:
                    self._let_go(key, sub)
            return self._drop_unheld()

    def _let_go(self, key: str, sub: str) -> None:
        self._files[key].used.pop(sub, None)
        held = self._held.get(sub)
        if held is not None:
            held.discard(key)
            if not held:
                del self._held[sub]

    def _drop_unheld(self) -> list[str]:
        gone = [k for k, f in self._files.items() if not f.used]
        for key in gone:
            del self._files[key]
        if gone:
            dropped = set(gone)
            for cid in list(self._conversations):
                self._conversations[cid] -= dropped
                if not self._conversations[cid]:
                    del self._conversations[cid]
        return gone


def check(room: Room, files: int, size: int, part: int, limits: UploadLimits | None = None,
          ) -> None:
    """Refuse (413, or 429 when the replica's space is what is short) once a request's files
    so far pass the room left; `part`: the current file's bytes, against the per-file limit."""
    if limits is not None and part > limits.file_bytes:
        raise UploadRefused(413, f"a file is over {limits.file_bytes // 1024} KB")
    if files > room.files:
        raise UploadRefused(413, f"over the upload quota: {room.files} more files allowed")
    if size > room.bytes:
        if room.replica_bound:
            raise UploadRefused(429, "this replica's upload space is full; try again later")
        raise UploadRefused(413, f"over the upload quota: {room.bytes // 1024} KB more allowed")

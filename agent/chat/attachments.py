"""Files on `/chat` come only from Gradio's upload folder, and only from their uploader (the
guard covers the page's app under the mount, PAGE_SUBPATH, the same way).

    POST …/gradio_api/upload ─ GradioFileGuard: a valid user token, else 401; the quotas
                               (upload_quota.py: 413/429 before Gradio writes anything); the
                               paths Gradio answers are recorded in the owners' book under the
                               token's `sub`
    POST …/queue/join, call… ─ GradioFileGuard: a FileData path outside the upload folder is
                               422 INVALID_REQUEST before Gradio copies or hashes anything
    /chat message.files      ─ inputs.parse_files (no I/O), then inputs.file_text: the owner,
                               then read_upload in a thread (O_NOFOLLOW, fstat, S_ISREG, a cap)

The owners' book (an UploadBook, one per agent process: wiring.py builds it and hands it to
the guard, the request parser and the domain objects that touch uploads) lives in the process.
An upload and the submit naming it reach the same
replica (the Gradio session is sticky, and the file itself exists only in that pod's upload
folder), so a shared store would buy nothing; after a restart the map is empty and older
uploads are refused: the user attaches the file again. That is fail closed, and simpler than
sidecar files Gradio would also serve, or a table written on every upload.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from typing import Any

from gradio.utils import get_upload_folder

from agentchat.agent.chat.upload_book import UploadBook
from agentchat.agent.settings import AgentSettings
from agentchat.errors import AgentChatError, ErrorCode, LocalError


class RefusedFile(LocalError):
    """A file named on `/chat` that is not a readable upload of this user; safe to show."""

    CODE = ErrorCode.INVALID_REQUEST


def upload_folder() -> str:
    """Gradio's upload folder as Gradio names it (GRADIO_TEMP_DIR, else <tmp>/gradio)."""
    return os.path.abspath(get_upload_folder())


def upload_key(path: Any) -> str | None:
    """The path relative to the upload folder, or None if it is not lexically inside it.

    No file system access: `..` anywhere, NUL bytes, URLs and relative paths are refused as
    written, before anyone opens, stats or hashes them."""
    if not isinstance(path, str) or not path or "\x00" in path or "://" in path:
        return None
    if ".." in path.replace("\\", "/").split("/") or not os.path.isabs(path):
        return None
    rel = os.path.relpath(os.path.normpath(path), upload_folder())
    if rel == "." or rel == ".." or rel.startswith(".." + os.sep):
        return None
    return rel


def no_links(path: str, key: str) -> bool:
    """No symlink anywhere below the upload folder (lstat/readlink only, nothing is read)."""
    return os.path.realpath(path) == os.path.join(os.path.realpath(upload_folder()), key)


def delete_uploads(book: UploadBook, keys: list[str]) -> int:
    """Delete uploads no one holds any more (and Gradio's hash folder once empty); how many
    were deleted. A key is relative to the upload folder (upload_key), so nothing outside it."""
    root, deleted = upload_folder(), 0
    for key in keys:
        if book.known(key):  # uploaded again meanwhile (the same content, the same path)
            continue
        path = os.path.join(root, key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a link is removed, never followed
            deleted += 1
        parent = os.path.dirname(path)
        if parent != root:
            with contextlib.suppress(OSError):
                os.rmdir(parent)  # only if empty: another name of the same content stays
    return deleted


def sweep_uploads(book: UploadBook, expiry_s: float) -> int:
    """The sweeper's part (agent/chat/sweeper.py; blocking, call it in a thread): uploads
    unused for `expiry_s`, deleted; and files no one here owns (left from before a restart,
    which the emptyDir outlives) once their mtime, the last use (read_upload), is as old."""
    deleted = delete_uploads(book, book.expired(expiry_s))
    root, cutoff = upload_folder(), time.time() - expiry_s
    for parent, _, names in os.walk(root):
        for name in names:
            path = os.path.join(parent, name)
            key = os.path.relpath(path, root)
            with contextlib.suppress(OSError):
                if not book.known(key) and os.lstat(path).st_mtime < cutoff:
                    deleted += delete_uploads(book, [key])
    return deleted


def forget_conversation(book: UploadBook, conversation_id: str, sub: str) -> int:
    """A deleted conversation: the uploads its messages used, deleted unless another user
    holds the same file."""
    return delete_uploads(book, book.forget_conversation(conversation_id, sub))


def read_upload(path: str, key: str, limit: int) -> bytes:
    """An uploaded regular file's bytes, at most `limit` (blocking: call it in a thread).

    O_NOFOLLOW refuses a link as the last part and `no_links` one above it; O_NONBLOCK keeps a
    FIFO from blocking the open; the size is fstat's of the open file, never the client's, and
    at most limit + 1 bytes are read, so a file that grows is caught too."""
    if not no_links(path, key):
        raise RefusedFile("a file is a link")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise RefusedFile("a file was not uploaded or is gone") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile("a file is not a regular file")
        with contextlib.suppress(OSError):
            os.utime(fd)  # its last use, on disk: the sweeper's clock for a file it forgot
        if st.st_size > limit:
            raise RefusedFile(f"a file is over {limit // 1024} KB")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RefusedFile(f"a file is over {limit // 1024} KB")
    return data


async def file_text(book: UploadBook, settings: AgentSettings, files: list[dict[str, Any]],
                    owner: str) -> str:
    """Text files reach the model as text, others by name and size. Every file must have been
    uploaded by `owner`; anything refused is INVALID_REQUEST before anything is stored."""
    for f in files:
        if not book.owns(f["key"], owner):
            raise AgentChatError(ErrorCode.INVALID_REQUEST, "a file was not uploaded by you")
    book.touch((f["key"] for f in files), owner)  # used now: its expiry starts again
    try:
        return await asyncio.to_thread(_read_files, settings, files)
    except RefusedFile as e:
        raise AgentChatError(ErrorCode.INVALID_REQUEST, str(e)) from None


def _read_files(settings: AgentSettings, files: list[dict[str, Any]]) -> str:
    parts, total = [], 0
    for f in files:
        data = read_upload(f["path"], f["key"], settings.tuning.max_file_bytes)
        total += len(data)
        if total > (cap := settings.tuning.max_files_total_bytes):
            raise RefusedFile(f"the files are over {cap // 1024} KB together")
        try:
            text = data.decode("utf-8")  # strict: invalid UTF-8 is not text
        except UnicodeDecodeError:
            text = None
        if text is None or "\x00" in text:
            parts.append(f"[file {f['name']}: {len(data)} bytes, not text]")
        else:
            parts.append(f"[file {f['name']}]\n{text}")
    return "\n\n".join(parts)

"""The quotas on Gradio's upload route, counted as the body streams (the book of who holds
what is chat/upload_book.py): `take` reads a multipart body into memory under a hold of the
room it may need, counting its parts, and refuses as soon as a limit is passed, so only a
body within every limit reaches Gradio, whose parser writes the parts to the upload folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gradio.data_classes import DeveloperPath, UserProvidedPath
from gradio.exceptions import InvalidPathError
from gradio.utils import safe_join
from gradio_client.utils import strip_invalid_filename_characters
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.datastructures import Headers
from starlette.types import Receive

from agentchat.agent.chat import FRAMING_BYTES, Room, UploadBook, UploadLimits, UploadRefused, check


def storable(filename: str) -> bool:
    """Whether Gradio can store a part under this name (route_utils.upload_fn's own steps): a
    name it refuses fails the whole request after the parts are on disk, and leaves them there,
    owned by no one."""
    if not filename:
        return True  # Gradio names it tmp…
    name = strip_invalid_filename_characters(Path(filename).name)
    try:
        safe_join(DeveloperPath("/"), UserProvidedPath(name))
    except InvalidPathError:
        return False
    return name not in ("", ".")  # the hash folder itself: the file would land beside it


def _within(room: Room, length: int, limits: UploadLimits) -> None:
    """A body this long could not fit the room left, whatever its framing."""
    if length > room.bytes + FRAMING_BYTES:
        check(room, 0, length - FRAMING_BYTES, 0, limits)
        raise UploadRefused(413, f"an upload is over {room.bytes // 1024} KB of files")


@dataclass
class _Count:
    sizes: list[int] = field(default_factory=list)  # each file's bytes so far
    size: int = 0
    in_file: bool = False
    field: bytes = b""
    header: bytes = b""


async def take(book: UploadBook, sub: str, receive: Receive, headers: Headers,
               limits: UploadLimits) -> tuple[bytes, list[int]] | None:
    """`read_within` under a hold of the room the body may need (its length, else all of the
    user's room), so the bodies buffered at once stay within the replica's upload bytes too;
    then the room its files take is reserved (the caller releases it once Gradio answered)."""
    room = book.room(sub, limits)
    declared = headers.get("content-length", "")
    hold = min(int(declared), room.bytes) if declared.isdigit() else room.bytes
    book.reserve(sub, 0, hold, limits)
    try:
        read = await read_within(receive, headers, room, limits)
    finally:
        book.release(sub, 0, hold)
    if read is not None:
        book.reserve(sub, len(read[1]), sum(read[1]), limits)
    return read


async def read_within(receive: Receive, headers: Headers, room: Room,
                      limits: UploadLimits) -> tuple[bytes, list[int]] | None:
    """The whole upload body, read into memory while its parts are counted, with the size of
    each file in it; UploadRefused as soon as a part passes a limit (nothing was written
    anywhere); None if the client left before sending it all."""
    kind, params = parse_options_header(headers.get("content-type", ""))
    if kind != b"multipart/form-data" or b"boundary" not in params:
        raise UploadRefused(400, "an upload is multipart/form-data")
    declared = headers.get("content-length", "")
    if declared.isdigit():
        _within(room, int(declared), limits)
    n = _Count()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        n.field += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        if n.field.lower() == b"content-disposition":
            n.header += data[start:end]

    def on_header_end() -> None:
        n.field = b""

    def on_headers_finished() -> None:
        _, opts = parse_options_header(n.header)
        n.header = b""
        n.in_file = b"filename" in opts
        if n.in_file:
            if opts.get(b"name") != b"files":  # Gradio keeps only these, and leaves the rest
                raise UploadRefused(400, "files go in the multipart field `files`")
            if not storable(opts[b"filename"].decode("latin-1")):
                raise UploadRefused(400, "a file name that cannot be stored")
            n.sizes.append(0)
            check(room, len(n.sizes), n.size, 0, limits)

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if n.in_file:
            n.sizes[-1] += end - start
            n.size += end - start
            check(room, len(n.sizes), n.size, n.sizes[-1], limits)

    parser = MultipartParser(params[b"boundary"], {
        "on_header_field": on_header_field, "on_header_value": on_header_value,
        "on_header_end": on_header_end, "on_headers_finished": on_headers_finished,
        "on_part_data": on_part_data})
    chunks, raw = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        raw += len(chunk)
        _within(room, raw, limits)  # a chunked body, or one longer than it said
        try:
            parser.write(chunk)
        except MultipartParseError:
            raise UploadRefused(400, "a malformed multipart body") from None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), n.sizes

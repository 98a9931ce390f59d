"""A TCP proxy in front of PostgreSQL that reads what clients send: each statement's SQL (the
extended protocol's Parse, or a simple Query) and each Sync, the point where a client waits
for the server. A round trip is a Sync or a simple Query.

    proxy = PgWire(target_port).start()
    url = proxy.url(database_url)      # the same database, through the proxy (no TLS)
    proxy.clear(); ...; proxy.log       # [Message(conn, kind, sql, at)]

Only the client's side is parsed (the server's answers pass through untouched), so it costs a
copy per packet and works with any server version.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
import time
from dataclasses import dataclass, field

import psycopg


@dataclass(frozen=True)
class Message:
    conn: int
    kind: str  # "parse", "query" (a simple query: a statement and a round trip), "sync"
    sql: str
    at: float


@dataclass
class PgWire:
    target_port: int
    target_host: str = "127.0.0.1"
    port: int = 0
    log: list[Message] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def start(self) -> PgWire:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            server = loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, daemon=True, name="pg-wire").start()
        ready.wait(10)
        return self

    def url(self, database_url: str) -> str:
        info = psycopg.conninfo.conninfo_to_dict(database_url)
        info.update(host="127.0.0.1", port=str(self.port), sslmode="disable")
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items()})

    def clear(self) -> None:
        with self._lock:
            self.log.clear()

    def messages(self) -> list[Message]:
        with self._lock:
            return list(self.log)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = next(self._ids)
        try:
            up_r, up_w = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._upstream(conn, reader, up_w), self._pipe(up_r, writer),
                             return_exceptions=True)
        for w in (writer, up_w):
            w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def _upstream(self, conn: int, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        # The startup message has no type byte (an SSL request comes first when asked for;
        # the URL says sslmode=disable, so there is none).
        length = struct.unpack("!i", await reader.readexactly(4))[0]
        writer.write(struct.pack("!i", length) + await reader.readexactly(length - 4))
        while True:
            head = await reader.readexactly(5)
            kind, length = head[:1], struct.unpack("!i", head[1:])[0]
            body = await reader.readexactly(length - 4)
            writer.write(head + body)
            await writer.drain()
            now = time.monotonic()
            if kind == b"P":  # Parse: statement name \0 query \0 ...
                sql = body.split(b"\0", 2)[1].decode("utf-8", "replace")
                self._add(Message(conn, "parse", sql, now))
            elif kind == b"Q":
                self._add(Message(conn, "query", body.rstrip(b"\0").decode("utf-8", "replace"),
                                  now))
            elif kind == b"S":
                self._add(Message(conn, "sync", "", now))

    def _add(self, message: Message) -> None:
        with self._lock:
            self.log.append(message)

"""A database that goes away: a TCP proxy on 127.0.0.1 in front of the PostgreSQL server, so a
test can cut every connection and refuse new ones, then let them in again, without touching the
server other tests run against (the ``database_link`` fixture)."""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc


class DatabaseLink:
    """A TCP proxy on 127.0.0.1 in front of the PostgreSQL server, so a test can make the
    database go away and come back without touching the server (others' tests use it).

    ``url(database_url)`` is that URL through the proxy. ``cut()`` closes every proxied
    connection and stops listening (connections are refused: a server restart, a failover);
    ``restore()`` listens again on the same port."""

    def __init__(self, tg: anyio.abc.TaskGroup, host: str, port: int) -> None:
        self._tg = tg
        self._target = (host, port)
        self.port = 0
        self._scope: anyio.CancelScope | None = None

    def url(self, database_url: str) -> str:
        parts = urlsplit(database_url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host))

    async def restore(self) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        scope = anyio.CancelScope()
        self._scope = scope

        async def serve() -> None:
            with scope:
                async with listener, anyio.create_task_group() as conns:
                    await listener.serve(self._pipe, conns)

        self._tg.start_soon(serve)

    def cut(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def _pipe(self, client: anyio.abc.SocketStream) -> None:
        async def copy(src: anyio.abc.ByteStream, dst: anyio.abc.ByteStream) -> None:
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                async for chunk in src:
                    await dst.send(chunk)
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                await dst.send_eof()

        try:
            server = await anyio.connect_tcp(*self._target)
        except OSError:
            await client.aclose()
            return
        async with client, server, anyio.create_task_group() as tg:
            tg.start_soon(copy, client, server)
            tg.start_soon(copy, server, client)

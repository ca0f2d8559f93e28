"""MCP sessions: one per server configuration per process, shared by every run of the process.

Why a thread of their own: a session must outlive the run that opened it (the next run, in
the same process, reuses it: a stateful server keeps its state, langchain-mcp-adapters#207),
may be used by runs on different event loops (each ``hango run`` is one ``anyio.run``; a
worker is one long loop; both asyncio and trio drive runs), and must be closed by the task that
opened it (anyio's cancel scopes refuse to be exited from another task,
openai-agents-python#1393). So every session lives in one daemon thread running its own event
loop: an *owner task* per server opens the ``mcp.Client``, lists the tools, follows list
changes, and, told to stop, closes the client itself. Runs reach it through an anyio
``BlockingPortal``; a run that is cancelled cancels its call in that thread, and the SDK sends
the server ``notifications/cancelled``.

Every wait is bounded. Connecting (starting the process or reaching the URL, the handshake and
the first tool list) takes at most ``connect_timeout``; one call at most ``timeout``. A stdio
server that exits fails the calls in flight at once (the SDK answers them ``Connection
closed``); a call that times out, a connection that closed and an HTTP error all mark the
session broken: its owner closes it and the next call opens a new one (a restarted server is
never talked to through a dead session, adk-python#3321). Nothing here is persisted.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, Final, TypeVar

import anyio
import anyio.from_thread
import httpx2
import mcp_types as types
from anyio.lowlevel import RunVar
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from hango_mcp.config import ServerConfig

T = TypeVar("T")

#: Seconds an owner may take to close its client (stop a process, end an HTTP session)
#: before the session is abandoned: closing must not hang a run either.
CLOSE_TIMEOUT: Final = 10.0
#: Most pages of one tool listing: a server whose cursor never ends cannot hang a run.
MAX_PAGES: Final = 100


class McpUnavailable(Exception):
    """A server could not be reached: the message names it and says why, in one line."""


class McpCallFailed(Exception):
    """A tool call did not get an answer from its server (crash, timeout, closed connection,
    HTTP error): the message names the server and the tool, in one line."""


def _one_line(exc: BaseException) -> str:
    """The innermost cause of ``exc`` (task groups wrap it in exception groups), one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, MCPError) else text


class Session:
    """One server's session, held by its owner task in the sessions thread.

    ``tools`` is the server's tool list as last fetched: a tuple replaced whole (never changed
    in place) when the server says its list changed, so a run's thread reads a consistent
    snapshot without a lock. ``status`` says, for ``hango mcp list``, whether it is connected.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tools: tuple[types.Tool, ...] = ()
        self.status = "not connected"
        self._client: Client | None = None
        self._stop: anyio.Event | None = None
        self._done: anyio.Event | None = None
        self._lock: anyio.Lock | None = None
        #: The owner task's scope (made in the sessions thread: anyio makes scopes in a loop).
        self._scope: anyio.CancelScope | None = None

    # -- the owner task -------------------------------------------------------------------

    def _open_client(self) -> Client:
        config = self.config
        if config.transport == "stdio":
            params = StdioServerParameters(
                command=str(config.command),
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return Client(params, message_handler=self._on_message)
        http = httpx2.AsyncClient(
            headers=dict(config.headers),
            timeout=httpx2.Timeout(config.connect_timeout, read=config.timeout),
        )
        return Client(_HttpTransport(str(config.url), http), message_handler=self._on_message)

    async def _own(
        self,
        scope: anyio.CancelScope,
        ready: anyio.Event,
        stop: anyio.Event,
        done: anyio.Event,
        failure: list[str],
    ) -> None:
        # ``failure`` is this attempt's own: an earlier owner still closing cannot overwrite
        # the reason a later attempt reports.
        client: Client | None = None
        try:
            with scope:
                try:
                    async with self._open_client() as client:
                        await self._list(client)
                        self._client = client
                        self.status = "connected"
                        ready.set()
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._follow_changes, client)
                            await stop.wait()
                            tg.cancel_scope.cancel()
                except Exception as exc:
                    failure.append(_one_line(exc))
        finally:
            if self._client is client:
                self._client = None
                if self.status == "connected":
                    self.status = "closed"
            ready.set()
            done.set()

    async def _list(self, client: Client) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = tuple(tools)

    async def _follow_changes(self, client: Client) -> None:
        # 2026-era servers announce changes on a subscriptions/listen stream; earlier ones send
        # notifications/tools/list_changed, which reach _on_message. Either way the SDK's
        # response cache drops the old listing first, so the relist below fetches a new one.
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    await self._list(client)
        except ListenNotSupportedError:
            return
        except Exception:
            # The stream broke (the connection is gone): the next call opens a new session.
            self._broken(client)

    async def _on_message(self, message: Any) -> None:
        client = self._client
        if isinstance(message, types.ToolListChangedNotification) and client is not None:
            # Not awaited here: the SDK may deliver notifications from its read loop, which
            # must go on reading for the listing's answer to arrive.
            _tasks().start_soon(self._relist, client)

    async def _relist(self, client: Client) -> None:
        try:
            with anyio.fail_after(self.config.connect_timeout):
                await self._list(client)
        except Exception:
            self._broken(client)

    def _broken(self, client: Client) -> None:
        if self._client is client:
            self._client = None
            self.status = "reconnecting on the next call"
            if self._stop is not None:
                self._stop.set()

    # -- what runs ask for (in the sessions thread) ----------------------------------------

    async def connect(self) -> Client:
        """The open client, connecting first when there is none (or the last one closed).
        Raises ``McpUnavailable`` naming the server."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            client = self._client
            if client is not None and _open(client):
                return client
            if client is not None:
                self._broken(client)
            await self._closed()
            ready, stop, done = anyio.Event(), anyio.Event(), anyio.Event()
            failure: list[str] = []
            self._stop, self._done = stop, done
            self.status = "connecting"
            self._scope = anyio.CancelScope()
            _tasks().start_soon(self._own, self._scope, ready, stop, done, failure)
            with anyio.move_on_after(self.config.connect_timeout):
                await ready.wait()
            if self._client is None:
                reason = (
                    failure[0]
                    if failure
                    else (f"no answer within connect_timeout = {self.config.connect_timeout:g} s")
                )
                self.status = f"failed: {reason}"
                if self._scope is not None:
                    self._scope.cancel()
                raise McpUnavailable(
                    f"MCP server {self.config.name!r} ({self.config.where}) could not be "
                    f"reached: {reason}"
                )
            return self._client

    async def _closed(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._done is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT):
                await self._done.wait()

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call the server's tool ``tool``; raises ``McpUnavailable`` or ``McpCallFailed``."""
        client = await self.connect()
        name, limit = self.config.name, self.config.timeout
        try:
            with anyio.fail_after(limit):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            self._broken(client)
            raise McpCallFailed(
                f"MCP server {name!r} did not answer tool {tool!r} within timeout = {limit:g} s; "
                "the call was cancelled and the session is reopened for the next call"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or self.config.transport == "http":
                # A closed stdio pipe or an HTTP error response (4xx/5xx, a session the server
                # no longer knows): whatever comes next goes through a new session.
                self._broken(client)
                happened = (
                    "closed the connection during the call"
                    if exc.code == CONNECTION_CLOSED
                    else f"answered with an error ({exc})"
                )
                raise McpCallFailed(
                    f"MCP server {name!r} {happened}, so tool {tool!r} has no result; the "
                    "session is reopened for the next call"
                ) from None
            raise McpCallFailed(f"MCP server {name!r}, tool {tool!r}: {exc}") from None
        except (RuntimeError, ValueError) as exc:
            # The SDK refused the answer (structured content that does not match the tool's
            # output schema, a malformed result): the server's fault, reported as such.
            raise McpCallFailed(
                f"MCP server {name!r}, tool {tool!r}: the result was refused: {_one_line(exc)}"
            ) from None

    async def close(self) -> None:
        """Tell the owner to close the client, and wait (bounded) until it has."""
        self._client = None
        await self._closed()
        self.status = "closed"


class _HttpTransport:
    """``streamable_http_client`` with hango's own ``httpx2`` client (headers, timeouts),
    closing that client with the transport."""

    def __init__(self, url: str, http: httpx2.AsyncClient) -> None:
        self._url, self._http = url, http
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        await self._stack.enter_async_context(self._http)
        return await self._stack.enter_async_context(
            streamable_http_client(self._url, http_client=self._http)
        )

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


def _open(client: Client) -> bool:
    """Whether the client's connection is still open. The SDK answers a request on a closed
    connection with ``Connection closed`` without sending it; checking first lets a server that
    died while idle be started again before the call, instead of failing a call it never saw.
    (No public attribute says so; an SDK without it reads as open, and the call then fails.)"""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return not getattr(dispatcher, "_closed", False)


# -- the sessions thread -------------------------------------------------------------------

_lock = threading.Lock()
_thread: _Thread | None = None
_sessions: dict[ServerConfig, Session] = {}


class _Thread:
    """The daemon thread whose event loop holds every session, and its portal."""

    def __init__(self) -> None:
        started = threading.Event()
        self._box: dict[str, Any] = {}

        async def main() -> None:
            async with (
                anyio.from_thread.BlockingPortal() as portal,
                anyio.create_task_group() as tg,
            ):
                self._box.update(portal=portal, tasks=tg)
                started.set()
                await portal.sleep_until_stopped()
                tg.cancel_scope.cancel()

        self.thread = threading.Thread(
            target=anyio.run, args=(main,), name="hango-mcp sessions", daemon=True
        )
        self.thread.start()
        started.wait()
        self.portal: anyio.from_thread.BlockingPortal = self._box["portal"]
        self.tasks: anyio.abc.TaskGroup = self._box["tasks"]


def _tasks() -> anyio.abc.TaskGroup:
    assert _thread is not None
    return _thread.tasks


def _portal() -> anyio.from_thread.BlockingPortal:
    global _thread
    with _lock:
        if _thread is None:
            _thread = _Thread()
            atexit.register(close_sessions)
        return _thread.portal


def session(config: ServerConfig) -> Session:
    """This process's session for ``config`` (created, not connected, on first use)."""
    with _lock:
        found = _sessions.get(config)
        if found is None:
            found = _sessions[config] = Session(config)
        return found


#: Threads of one event loop that may wait for calls in the sessions thread at once. Their own
#: limiter: waits of up to ``timeout`` must not take the default threads that the rest of
#: hango (the SQLite store) runs its blocking work in.
MAX_WAITING: Final = 256
_waiters: RunVar[anyio.CapacityLimiter] = RunVar("hango_mcp_waiters")


def _waiting_threads() -> anyio.CapacityLimiter:
    try:
        return _waiters.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(MAX_WAITING)
        _waiters.set(limiter)
        return limiter


def first_listing(s: Session) -> None:
    """Connect ``s`` now, blocking the calling thread (bounded by ``connect_timeout``), if it
    was never tried in this process. For ``provide_tools``, which is synchronous and is asked
    before a run is recorded: the tool names must be known then, so that options naming tools
    (approval's ``interrupt_on``, a budget per tool) are checked against them. Only the first
    run of a process waits; a failure is left for ``before_run`` to report."""
    if s.status == "not connected":
        with contextlib.suppress(McpUnavailable):
            _portal().call(s.connect)


async def in_sessions(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` in the sessions thread and wait for it from any event loop. A
    cancelled caller cancels it there (a tool call then tells its server it was cancelled)."""
    future: concurrent.futures.Future[T] = _portal().start_task_soon(fn, *args)
    try:
        return await anyio.to_thread.run_sync(
            future.result, abandon_on_cancel=True, limiter=_waiting_threads()
        )
    except anyio.get_cancelled_exc_class():
        future.cancel()
        raise
    except concurrent.futures.CancelledError:
        raise McpCallFailed("the MCP sessions thread cancelled the request") from None


def close_sessions() -> None:
    """Close every session of this process (each from its owner task) and stop the sessions
    thread. Registered with ``atexit``; tests call it to start from nothing."""
    global _thread
    with _lock:
        thread, _thread = _thread, None
        sessions = list(_sessions.values())
        _sessions.clear()
    if thread is None:
        return
    try:
        for s in sessions:
            thread.portal.call(s.close)
        thread.portal.call(thread.portal.stop, True)
    except RuntimeError:
        pass  # the thread's loop is already gone (interpreter shutdown): nothing left to close
    thread.thread.join(CLOSE_TIMEOUT)

"""A real MCP server for hango-mcp's tests, written with the SDK's server API (``MCPServer``).

    python mcp_server.py                 # stdio
    python mcp_server.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp

Tools: ``echo``, ``count`` (a per-process counter: state a stateful server keeps), ``slow``
(sleeps; annotated idempotent), ``charge`` (sleeps; not idempotent), ``crash`` (the process
exits mid-call), ``hang`` (blocks the server's event loop: nothing is answered any more),
``grow`` / ``shrink`` (add or remove the tool ``extra`` and announce the change),
``forecast`` (structured output), ``picture`` (an image), ``ask`` (asks the user: elicitation)
and ``fail`` (an ``isError`` result).
Every call is appended to the file in ``$MCP_CALL_LOG`` (when set), so
tests count what ran; ``$MCP_EXTRA_TOOL`` adds ``extra`` under that name
at start. Over HTTP, ``POST /fail?status=N`` makes every MCP request answer N until
``POST /fail?status=0``.
"""

from __future__ import annotations

import base64
import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, ToolAnnotations
from pydantic import BaseModel

server = MCPServer("hango-test")
_counter = {"n": 0}


def _log(name: str, detail: str = "") -> None:
    path = os.environ.get("MCP_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{name} {detail}".rstrip() + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text."""
    _log("echo", text)
    return text


@server.tool()
def count() -> str:
    """Add one to this server process's counter and return it."""
    _counter["n"] += 1
    _log("count", str(_counter["n"]))
    return str(_counter["n"])


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
async def slow(seconds: float) -> str:
    """Sleep, then say so."""
    _log("slow start", str(seconds))
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _log("slow cancelled")
        raise
    _log("slow done")
    return f"slept {seconds:g} s"


@server.tool()
async def charge(seconds: float) -> str:
    """Take a payment (not idempotent: no hints), slowly."""
    _log("charge start")
    await anyio.sleep(seconds)
    _log("charge done")
    return "charged"


@server.tool()
async def crash() -> str:
    """Exit the process in the middle of the call."""
    _log("crash")
    await anyio.sleep(0.05)
    os._exit(3)


@server.tool()
def hang() -> str:
    """Block the whole server (its event loop) forever."""
    _log("hang")
    while True:
        time.sleep(3600)


def extra() -> str:
    """A tool that comes and goes."""
    _log("extra")
    return "extra ran"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool extra and announce the new list."""
    server.add_tool(extra)
    await ctx.notify_tools_changed()
    return "added extra"


@server.tool()
async def shrink(ctx: Context) -> str:
    """Remove the tool extra and announce the new list."""
    server.remove_tool("extra")
    await ctx.notify_tools_changed()
    return "removed extra"


class Forecast(BaseModel):
    city: str
    celsius: float


@server.tool()
def forecast(city: str) -> Forecast:
    """The weather, as structured content."""
    return Forecast(city=city, celsius=21.5)


@server.tool()
def picture() -> list[object]:
    """A caption and a tiny PNG."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 24).decode()
    return ["a caption", ImageContent(type="image", data=png, mime_type="image/png")]


class Answer(BaseModel):
    text: str


@server.tool()
async def ask(ctx: Context) -> str:
    """Ask the user a question (elicitation) and return the answer."""
    _log("ask")
    answer = await ctx.elicit("Which colour?", Answer)
    return f"{answer.action}: {answer.data.text if answer.data else ''}"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the tool failed on purpose")


def _http(port: int) -> None:
    import uvicorn

    app = server.streamable_http_app()
    failing = {"status": 0}

    async def wrapper(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["path"] == "/fail":
            query = dict(p.split("=") for p in scope["query_string"].decode().split("&") if p)
            failing["status"] = int(query.get("status", "500"))
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        if scope["type"] == "http" and failing["status"]:
            await send({"type": "http.response.start", "status": failing["status"], "headers": []})
            await send({"type": "http.response.body", "body": b"injected failure"})
            return
        await app(scope, receive, send)

    uvicorn.run(wrapper, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    if os.environ.get("MCP_EXTRA_TOOL"):
        server.add_tool(extra, name=os.environ["MCP_EXTRA_TOOL"])
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        _http(int(sys.argv[2]))
    else:
        server.run()

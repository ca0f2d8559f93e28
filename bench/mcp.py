"""hango-mcp's per-call overhead against calling the ``mcp`` SDK directly.

::

    uv run python -m bench.mcp                    # stdio and HTTP, 200 calls a sample
    uv run python -m bench.mcp --calls 100 --repeats 5 --transport stdio

Both sides call the same tool of the same server process (examples/mcp's servers: the stdio
weather server's ``forecast``, the HTTP notes server's ``read``, started here on a free port):

direct
    ``await client.call_tool(...)`` on an ``mcp.Client`` the benchmark holds open, in its own
    event loop.
hango-mcp
    ``McpTool.call`` as the loop calls it: the call crosses into the sessions thread, runs on
    the shared session with its timeout, and its result becomes a ``ToolResult``.

Each round runs both once, in random order; the numbers are the minimum per-call time over the
rounds (a short sample is the likeliest to run uncontended on a busy machine), the overhead is
their difference and the ratio hango-mcp / direct.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from hango import ToolContext, ToolUseBlock
from hango.testing import new_state
from hango_mcp import McpMiddleware, close_sessions, servers

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mcp"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _sample(call: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - start) / n


async def _measure(
    table: dict[str, Any], target: Any, tool: str, args: dict[str, Any], n: int, repeats: int
) -> tuple[float, float]:
    mw = McpMiddleware(servers({"servers": {"b": table}}))
    state = new_state()
    await mw.before_run(state)
    (hango_tool,) = [t for t in mw.provide_tools(state) if t.spec.name == f"b_{tool}"]
    ctx = ToolContext(state, ToolUseBlock("toolu_bench", f"b_{tool}", args))
    best = {"direct": float("inf"), "hango-mcp": float("inf")}
    async with Client(target) as client:

        async def direct() -> None:
            await client.call_tool(tool, args)

        async def through_hango() -> None:
            result = await hango_tool.call(args, ctx)
            assert not result.is_error, result.content

        cases = {"direct": direct, "hango-mcp": through_hango}
        for case in cases.values():  # warm both paths
            await _sample(case, 5)
        for _ in range(repeats):
            order = list(cases)
            random.shuffle(order)
            for name in order:
                best[name] = min(best[name], await _sample(cases[name], n))
    return best["direct"], best["hango-mcp"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="calls per sample")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the minimum is kept")
    parser.add_argument("--transport", choices=["stdio", "http", "both"], default="both")
    opts = parser.parse_args()
    load, python = os.getloadavg()[0], sys.version.split()[0]
    print(f"bench.mcp  {opts.calls} calls x {opts.repeats} rounds  load {load:.2f}  py {python}")
    header = ("transport", "direct us/call", "hango-mcp us/call", "overhead us", "ratio")
    print(f"{header[0]:<10}{header[1]:>16}{header[2]:>20}{header[3]:>14}{header[4]:>8}")
    rows: list[tuple[str, float, float]] = []
    if opts.transport in ("stdio", "both"):
        weather = str(EXAMPLE / "weather_server.py")
        table = {"command": sys.executable, "args": [weather]}
        target = StdioServerParameters(command=sys.executable, args=[weather])
        rows.append(
            (
                "stdio",
                *anyio.run(
                    _measure, table, target, "forecast", {"city": "Oslo"}, opts.calls, opts.repeats
                ),
            )
        )
    if opts.transport in ("http", "both"):
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE / "notes_server.py"), "--port", str(port)]
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit("the notes server never listened") from None
                    time.sleep(0.1)
            url = f"http://127.0.0.1:{port}/mcp"
            rows.append(
                (
                    "http",
                    *anyio.run(_measure, {"url": url}, url, "read", {}, opts.calls, opts.repeats),
                )
            )
        finally:
            close_sessions()
            proc.kill()
            proc.wait()
    close_sessions()
    for name, direct, hango in rows:
        overhead, ratio = (hango - direct) * 1e6, hango / direct
        print(f"{name:<10}{direct * 1e6:>16.0f}{hango * 1e6:>20.0f}{overhead:>14.0f}{ratio:>8.2f}")


if __name__ == "__main__":
    main()

"""Real MCP servers for hango-mcp's tests: ``servers/mcp_server.py`` (the SDK's ``MCPServer``)
started as a stdio subprocess by the sessions code, or as an HTTP server on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hango_mcp import ServerConfig, close_sessions, servers

SERVER = Path(__file__).parent / "servers" / "mcp_server.py"


@pytest.fixture
def anyio_backend() -> str:
    # The sessions thread runs its own asyncio loop whatever drives the run; one test runs on
    # trio (test_sessions_are_shared_across_event_loops_and_backends).
    return "asyncio"


@pytest.fixture(autouse=True)
def _fresh_sessions() -> Iterator[None]:
    yield
    close_sessions()  # sessions are per process: each test starts from none


@pytest.fixture
def call_log(tmp_path: Path) -> Path:
    """The file the test server appends every call to."""
    return tmp_path / "calls.log"


@pytest.fixture
def stdio_table(call_log: Path) -> dict[str, Any]:
    """An ``[options.mcp.servers.<name>]`` table for the stdio test server."""
    return {
        "command": sys.executable,
        "args": [str(SERVER)],
        "env": {"MCP_CALL_LOG": str(call_log)},
    }


@pytest.fixture
def stdio_server(stdio_table: dict[str, Any]) -> Callable[..., ServerConfig]:
    """``stdio_server(name="t", **settings)``: the stdio test server's configuration."""

    def make(name: str = "t", **settings: Any) -> ServerConfig:
        return servers({"servers": {name: {**stdio_table, **settings}}})[0]

    return make


class HttpServer:
    """The test server on 127.0.0.1, as a subprocess that a test may kill and start again."""

    def __init__(self, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = log
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {"MCP_CALL_LOG": str(self.log), "PATH": "/usr/bin:/bin"}
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(self.port)], env=env
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                assert self.proc.poll() is None, "the HTTP test server exited"
                assert time.monotonic() < deadline, "the HTTP test server never listened"
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def fail_with(self, status: int) -> None:
        httpx2.post(f"http://127.0.0.1:{self.port}/fail?status={status}").raise_for_status()


@pytest.fixture
def http_server(call_log: Path) -> Iterator[HttpServer]:
    server = HttpServer(call_log)
    server.start()
    yield server
    server.stop()

"""The shipped example (examples/mcp: a stdio and an HTTP server) run by the real ``hango``
command on the scripted model, and ``hango mcp list``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hango.testing import HangoCli

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp"


@pytest.fixture
def notes_server() -> Iterator[None]:
    """examples/mcp/notes_server.py on its port (the example's agent file names it)."""
    proc = subprocess.Popen([sys.executable, str(EXAMPLE / "notes_server.py")])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", 8765), timeout=1):
                    break
            except OSError:
                assert proc.poll() is None, "notes_server.py exited (is port 8765 taken?)"
                assert time.monotonic() < deadline, "notes_server.py never listened"
                time.sleep(0.1)
        yield
    finally:
        proc.kill()
        proc.wait()


def test_the_example_calls_tools_of_both_servers(tmp_path: Path, notes_server: None) -> None:
    cli = HangoCli(tmp_path)
    done = cli.run("run", "--agent", str(EXAMPLE / "agent.toml"), "Plan a day in Lisbon")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "→ weather_forecast" in out and '"sky": "sunny"' in out  # stdio
    assert "→ notes_add" in out and "← 1 note(s)" in out  # HTTP
    assert "← - Lisbon: pack sunglasses" in out  # the same HTTP session kept the note
    assert out.count('"celsius": 21.0') == 1  # structured content shown once

    listed = cli.run("mcp", "list", "--agent", str(EXAMPLE / "agent.toml"), "--json")
    assert listed.returncode == 0, listed.stderr
    report = json.loads(listed.stdout)["servers"]
    assert [(s["name"], s["transport"], s["state"]) for s in report] == [
        ("weather", "stdio", "connected"),
        ("notes", "http", "connected"),
    ]
    assert [t["name"] for t in report[1]["tools"]] == ["notes_add", "notes_read"]


def test_mcp_list_names_an_unreachable_server_and_a_bad_table(tmp_path: Path) -> None:
    (tmp_path / "agent.toml").write_text(
        'name = "a"\nmodel = "scripted:s.toml"\n'
        '[options.mcp.servers.down]\nurl = "http://127.0.0.1:9/mcp"\nconnect_timeout = 5\n'
    )
    cli = HangoCli(tmp_path)
    done = cli.run("mcp", "list", "--agent", "agent.toml")
    assert done.returncode == 1
    (line,) = done.stdout.splitlines()
    assert line.startswith("down  http  http://127.0.0.1:9/mcp  failed: ")

    (tmp_path / "bad.toml").write_text(
        'name = "a"\nmodel = "scripted:s.toml"\n'
        '[options.mcp.servers.both]\nurl = "http://x/mcp"\ncommand = "python"\n'
    )
    bad = cli.run("mcp", "list", "--agent", "bad.toml")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "servers.both: give either command (a stdio server) or url" in bad.stderr

"""The example's streamable HTTP MCP server: a notebook that keeps its notes in memory.

    uv run python examples/mcp/notes_server.py            # http://127.0.0.1:8765/mcp
    uv run python examples/mcp/notes_server.py --port N

The notes live as long as the server process: hango keeps one session to it per process, so
a note added by one call is there for the next.
"""

from __future__ import annotations

import argparse

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes", log_level="WARNING")
_notes: list[str] = []


@server.tool()
def add(text: str) -> str:
    """Add a note; returns how many notes there are."""
    _notes.append(text)
    return f"{len(_notes)} note(s)"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read() -> str:
    """Every note, one a line."""
    return "\n".join(f"- {n}" for n in _notes) or "(no notes)"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    port = parser.parse_args().port
    server.run("streamable-http", host="127.0.0.1", port=port)

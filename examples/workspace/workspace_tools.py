"""The workspace demo's own tool: a CI build log far too large for the context (about 340,000
characters), which hango-filesystem offloads to /large_tool_results/ for the model to page."""

from __future__ import annotations

import hango


@hango.tool
def build_log() -> str:
    """The log of the last CI build."""
    lines = []
    for i in range(1, 3001):
        status = "ERROR upload gave up after 1 attempt" if i % 1000 == 0 else "ok"
        lines.append(
            f"2026-03-02T10:{i // 60 % 60:02d}:{i % 60:02d} step {i:04d} upload {status}".ljust(
                110, "."
            )
        )
    return "\n".join(lines) + "\n"


TOOLS = [build_log]

"""Tools of the sub-agents demo's researcher: read the notes, write the findings.

They work in ``$SUBAGENTS_DEMO_WORKSPACE`` (default ``.hango/subagents-demo`` under the current
folder), so running the demo never changes the repository. ``write_findings`` appends one line
to ``writes.log`` there per execution, so how often it ran can be counted; it is declared not
idempotent, so hango never runs it twice on its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from hango import tool

NOTES = "# Notes\n\nThe API allows 42 requests per minute. A batch runs at most 8 tools.\n"


def workspace() -> Path:
    """The workspace folder, created with its notes when it does not exist yet."""
    root = Path(os.environ.get("SUBAGENTS_DEMO_WORKSPACE", ".hango/subagents-demo")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    notes = root / "notes.md"
    if not notes.exists():
        notes.write_text(NOTES, encoding="utf-8")
    return root


@tool
def read_notes() -> str:
    """Read the project's notes (notes.md)."""
    return (workspace() / "notes.md").read_text(encoding="utf-8")


@tool(idempotent=False)
def write_findings(text: str) -> str:
    """Write the findings to findings.md (replacing it).

    Args:
        text: the findings, as Markdown.
    """
    root = workspace()
    (root / "findings.md").write_text(text + "\n", encoding="utf-8")
    with (root / "writes.log").open("a", encoding="utf-8") as log:
        log.write("write_findings\n")
    return f"wrote {len(text)} characters to findings.md"


TOOLS = [read_notes, write_findings]

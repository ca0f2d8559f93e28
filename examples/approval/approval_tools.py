"""Tools of the approval demo: read and edit files of a workspace.

The workspace is a copy of ``files/`` beside this module, made on first use in
``$APPROVAL_DEMO_WORKSPACE`` (default ``.hango/approval-demo`` under the current folder), so
running the demo never changes the repository. Paths are relative to the workspace and may
not leave it.

``edit_file`` is what the agent must ask a person about (``[options.human_in_the_loop]`` in
``agent.toml``). It is declared not idempotent: inserting the same text twice would add it
twice, so hango records that it started before it runs and never runs it again on its own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hango import tool

SOURCE = Path(__file__).parent / "files"


def workspace() -> Path:
    """The workspace folder, created from ``files/`` when it does not exist yet."""
    root = Path(os.environ.get("APPROVAL_DEMO_WORKSPACE", ".hango/approval-demo")).resolve()
    if not root.exists():
        shutil.copytree(SOURCE, root)
    return root


def _resolve(path: str) -> Path:
    root = workspace()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise ValueError(f"{path!r} is outside the workspace")
    return target


@tool
def read_file(path: str) -> str:
    """Read a text file of the workspace.

    Args:
        path: file path relative to the workspace root.
    """
    target = _resolve(path)
    if not target.is_file():
        raise FileNotFoundError(f"no file {path!r}")
    return target.read_text(encoding="utf-8")


@tool(idempotent=False)
def edit_file(path: str, old: str, new: str) -> str:
    """Replace the first occurrence of a text in a file of the workspace.

    Args:
        path: file path relative to the workspace root.
        old: the exact text to replace.
        new: the text to put in its place.
    """
    target = _resolve(path)
    text = target.read_text(encoding="utf-8")
    if old not in text:
        raise ValueError(f"{old!r} does not occur in {path}")
    target.write_text(text.replace(old, new, 1), encoding="utf-8")
    return f"edited {path}: replaced {len(old)} characters with {len(new)}"


TOOLS = [read_file, edit_file]

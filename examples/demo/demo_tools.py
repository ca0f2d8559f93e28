"""Tools of the demo agent: list, read, search and edit the files under ``files/`` beside this
module, and wait for a CI result.

Paths are relative to that folder and may not leave it. ``edit_file`` is a real tool that the
demo agents' ``tool_allowlist`` leaves out: the allowlist refuses it. ``wait_for_ci`` waits,
which is what the interrupted-run demo interrupts.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio

from hango import tool

ROOT = (Path(__file__).parent / "files").resolve()


def _resolve(path: str) -> Path:
    target = (ROOT / path).resolve()
    if target != ROOT and ROOT not in target.parents:
        raise ValueError(f"{path!r} is outside the demo folder")
    return target


@tool
def list_files(path: str = ".") -> str:
    """List the files under a folder of the demo workspace, one relative path per line.

    Args:
        path: folder relative to the workspace root ("." for the root).
    """
    folder = _resolve(path)
    if not folder.is_dir():
        raise NotADirectoryError(f"{path!r} is not a folder")
    files = sorted(p.relative_to(ROOT).as_posix() for p in folder.rglob("*") if p.is_file())
    return "\n".join(files) or "(empty)"


@tool
def read_file(path: str) -> str:
    """Read a text file of the demo workspace.

    Args:
        path: file path relative to the workspace root, as list_files prints it.
    """
    target = _resolve(path)
    if not target.is_file():
        raise FileNotFoundError(f"no file {path!r}; use list_files to see what exists")
    return target.read_text(encoding="utf-8")


@tool
def search(pattern: str, path: str = ".") -> str:
    """Search the demo workspace for a regular expression; prints path:line: text per match.

    Args:
        pattern: a Python regular expression.
        path: folder to search, relative to the workspace root.
    """
    regex = re.compile(pattern)
    hits = []
    for file in sorted(_resolve(path).rglob("*")):
        if not file.is_file():
            continue
        for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if regex.search(line):
                hits.append(f"{file.relative_to(ROOT).as_posix()}:{n}: {line.strip()}")
    return "\n".join(hits) or "no matches"


@tool
def edit_file(path: str, old: str, new: str) -> str:
    """Replace the one occurrence of a text in a file of the demo workspace.

    Args:
        path: file path relative to the workspace root.
        old: the exact text to replace; it must occur exactly once.
        new: the text to put in its place.
    """
    target = _resolve(path)
    text = target.read_text(encoding="utf-8")
    found = text.count(old)
    if found != 1:
        raise ValueError(f"{old!r} occurs {found} times in {path!r}; it must occur exactly once")
    target.write_text(text.replace(old, new), encoding="utf-8")
    return f"edited {path}"


@tool
async def wait_for_ci(branch: str, seconds: int = 300) -> str:
    """Wait for the CI result of a branch, polling ``ci/<branch>.txt`` in the workspace.

    Args:
        branch: the branch whose CI result to wait for.
        seconds: how long to wait at most.
    """
    report = _resolve(f"ci/{branch}.txt")
    for _ in range(seconds):
        if report.is_file():
            return report.read_text(encoding="utf-8")
        await anyio.sleep(1)
    return f"no CI result for {branch!r} after {seconds} s"


TOOLS = [list_files, read_file, search, edit_file, wait_for_ci]

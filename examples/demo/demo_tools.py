"""Tools of the demo agent: list, read and search the files under ``files/`` beside this module.

Paths are relative to that folder and may not leave it.
"""

from __future__ import annotations

import re
from pathlib import Path

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


TOOLS = [list_files, read_file, search]

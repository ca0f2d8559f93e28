"""The one path resolver of the workspace: every file tool, and other plugins' loaders, go
through it.

A workspace path is virtual: ``/`` is the workspace root, whatever the backend. Resolution
happens in two steps, and every refusal is a ``PathRefused`` naming the path and the rule:

1. ``normalize`` turns what the model wrote into a canonical virtual path: a string without
   NUL or other control characters, at most ``MAX_PATH_BYTES`` in UTF-8 and ``MAX_NAME_BYTES``
   per name; relative paths are relative to ``/``; an absolute path is a path in the
   workspace (``/etc/passwd`` is the workspace's ``etc/passwd``, never the machine's); empty
   and ``.`` names are dropped; only a name that is exactly ``..`` goes up, and going above
   the root is refused. ``a..b``, ``..hidden`` or ``x..`` are file names, and so are unicode
   look-alikes of dots (``‥``, ``．．``): nothing is case- or NFKC-folded, so no name can
   turn into ``..`` after the check.
2. ``resolve_under`` maps a virtual path onto a directory on disk, following every symlink
   (chains included) BEFORE checking containment, and checks that the real path is inside
   the real root. A symlink inside the root that points out of it is refused, for reading,
   listing and writing alike. The real path is what the caller opens (writes open it with
   ``O_NOFOLLOW``, so a final symlink swapped in after the check is not followed either).

``resolve_path(root, path)`` is the public one-call form for other plugins (skills and memory
loaders): see the README.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from attrs import frozen

#: Longest path accepted, in UTF-8 bytes (Linux's PATH_MAX).
MAX_PATH_BYTES: Final = 4096
#: Longest single name accepted, in UTF-8 bytes (NAME_MAX of common file systems).
MAX_NAME_BYTES: Final = 255


class PathRefused(ValueError):
    """A path was refused. ``path`` is the path as given, ``rule`` the rule it broke (one
    short phrase); the message is ``path '<path>' refused: <rule>``."""

    def __init__(self, path: object, rule: str) -> None:
        shown = path if isinstance(path, str) else repr(path)
        if isinstance(shown, str) and len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(f"path {shown!r} refused: {rule}")
        self.path = path
        self.rule = rule


def normalize(path: object) -> str:
    """The canonical virtual path of ``path``: ``/`` or ``/name/name...``.

    Raises ``PathRefused`` for a non-string, a NUL or other control character, a lone
    surrogate, a path over ``MAX_PATH_BYTES`` or a name over ``MAX_NAME_BYTES`` (UTF-8
    bytes), or a ``..`` that would go above the root."""
    if not isinstance(path, str):
        raise PathRefused(path, "a path is a string")
    if "\x00" in path:
        raise PathRefused(path, "contains a NUL character")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise PathRefused(path, "contains a control character")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise PathRefused(path, "contains a lone surrogate (not Unicode text)") from None
    if size > MAX_PATH_BYTES:
        raise PathRefused(path, f"is {size} bytes long; at most {MAX_PATH_BYTES}")
    parts: list[str] = []
    for name in path.split("/"):
        if name in ("", "."):
            continue
        if name == "..":
            if not parts:
                raise PathRefused(path, "goes above the workspace root")
            parts.pop()
            continue
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise PathRefused(path, f"has a name over {MAX_NAME_BYTES} bytes")
        parts.append(name)
    return "/" + "/".join(parts)


def parts_of(vpath: str) -> tuple[str, ...]:
    """The names of a normalized virtual path (``()`` for ``/``)."""
    return tuple(p for p in vpath.split("/") if p)


def is_under(vpath: str, prefix: str) -> bool:
    """Whether normalized ``vpath`` is ``prefix`` or inside it (both virtual paths)."""
    if prefix == "/":
        return True
    return vpath == prefix or vpath.startswith(prefix.rstrip("/") + "/")


@frozen
class OnDisk:
    """A virtual path resolved under a root on disk: ``real`` is the path to open (every
    symlink followed), ``resolved`` the virtual path of ``real`` (what rules are matched
    against, with the path as asked)."""

    real: Path
    resolved: str


def real_root(root: str | os.PathLike[str]) -> Path:
    """``root`` with every symlink followed. Raises ``PathRefused`` when it is not an
    existing directory."""
    real = Path(os.path.realpath(root))
    if not real.is_dir():
        raise PathRefused(str(root), "the workspace root is not an existing directory")
    return real


def resolve_under(root: Path, vpath: str, *, asked: str | None = None) -> OnDisk:
    """Resolve normalized ``vpath`` under the REAL directory ``root`` (see ``real_root``).

    Every symlink on the way is followed, chains included; the result must be ``root`` or
    inside it. Raises ``PathRefused`` (naming ``asked``, default ``vpath``) otherwise."""
    candidate = root.joinpath(*parts_of(vpath))
    real = Path(os.path.realpath(candidate))
    if real != root and not real.is_relative_to(root):
        raise PathRefused(asked or vpath, "resolves outside the workspace root (a symlink)")
    if real.is_symlink():
        # realpath leaves a link it could not follow to the end: a loop.
        raise PathRefused(asked or vpath, "is a symlink loop")
    rel = real.relative_to(root).as_posix()
    return OnDisk(real, "/" if rel == "." else "/" + rel)


def resolve_path(root: str | os.PathLike[str], path: str) -> Path:
    """The real path on disk of workspace path ``path`` under directory ``root``: the one
    resolver of hango-filesystem, for any plugin that reads files under a root it was given
    (``/`` and relative paths are relative to ``root``; symlinks are followed before the
    containment check).

    Raises ``PathRefused`` (a ``ValueError``) naming the path and the rule for anything that
    would leave ``root``, and for a ``root`` that is not an existing directory."""
    return resolve_under(real_root(root), normalize(path), asked=path).real

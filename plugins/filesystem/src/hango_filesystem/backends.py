"""Where workspace files live: ``local`` (a root directory on disk) and ``store`` (hango's own
database, per session), combined by prefix routes in ``Workspace``.

Both backends take normalized virtual paths (``hango_filesystem.paths.normalize``) and raise
``PathRefused`` for a path the resolver refuses, ``FileNotFoundError``, ``IsADirectoryError``,
``NotADirectoryError`` or ``WorkspaceError`` (with a message for the model) otherwise; the
tools turn every one of them into an error result.

The ``store`` backend keeps the path -> content manifest in the middleware's session-scoped
private state (``WorkspaceState``) and the contents in ``workspace_blobs`` (migration 0006),
keyed by SHA-256. A write stores the content first, then changes the manifest without an
``await`` in between, and the manifest reaches the database in the same save as the tool
result: a run resumed after ``kill -9`` sees the files its saved history says were written.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal, Protocol

import anyio.to_thread
from attrs import define, field, frozen

from hango.middleware import State, WorkspaceBlobs, load_private, store_private, workspace_blobs
from hango_filesystem.paths import (
    PathRefused,
    is_under,
    normalize,
    parts_of,
    real_root,
    resolve_under,
)

#: The name the middleware's private state is kept under (the middleware's name).
STATE_KEY: Final = "filesystem"

Kind = Literal["file", "dir", "link"]


class WorkspaceError(Exception):
    """A workspace operation failed for a reason the model should read (the message)."""


@frozen
class Entry:
    """One listed entry: virtual ``path``, ``kind`` and ``size`` in bytes (0 for folders)."""

    path: str
    kind: Kind
    size: int = 0


@frozen
class FileEntry:
    """A file of the ``store`` backend: the ``digest`` of its content and its ``size``."""

    digest: str
    size: int


@frozen
class Offloaded:
    """A tool result moved into the workspace: the call, the file and its length."""

    tool_call_id: str
    tool: str
    path: str
    chars: int


@define
class WorkspaceState:
    """The middleware's private state (session scope): the ``store`` backend's files and the
    offloaded results, oldest first."""

    files: dict[str, FileEntry] = field(factory=dict)
    offloaded: list[Offloaded] = field(factory=list)


def load_workspace(state: State) -> WorkspaceState:
    """The workspace state of ``state`` (empty when none is stored yet)."""
    value, _ = load_private(state, STATE_KEY, WorkspaceState)
    return value


def save_workspace(state: State, value: WorkspaceState) -> None:
    store_private(state, STATE_KEY, value)


class Backend(Protocol):
    """One place files live. ``resolve`` returns the virtual path the operation really acts
    on (a symlink followed), which permission rules are matched against too."""

    kind: str

    async def resolve(self, state: State, vpath: str) -> str: ...

    async def read(self, state: State, vpath: str) -> bytes: ...

    async def write(self, state: State, vpath: str, data: bytes) -> None: ...

    async def delete(self, state: State, vpath: str) -> None: ...

    async def listdir(self, state: State, vpath: str) -> list[Entry]: ...

    async def walk(self, state: State, vpath: str, limit: int) -> tuple[list[Entry], bool]:
        """Files under ``vpath`` (or ``vpath`` itself when it is a file), in path order, at
        most ``limit``; and whether more were left out."""
        ...


class LocalBackend:
    """Files under ``root`` on disk. Every path goes through ``resolve_under`` (symlinks
    followed, then contained); writes are atomic (a temporary file renamed over the target),
    so a ``kill -9`` mid-write leaves the old content or the new, never half of it."""

    kind = "local"

    def __init__(self, root: str | os.PathLike[str], *, max_file_bytes: int) -> None:
        self.root = real_root(root)
        self.max_file_bytes = max_file_bytes

    def _disk(self, vpath: str) -> Path:
        return resolve_under(self.root, vpath).real

    async def resolve(self, state: State, vpath: str) -> str:
        return resolve_under(self.root, vpath).resolved

    async def read(self, state: State, vpath: str) -> bytes:
        return await anyio.to_thread.run_sync(self._read, vpath)

    def _read(self, vpath: str) -> bytes:
        real = self._disk(vpath)
        if real.is_dir():
            raise IsADirectoryError(vpath)
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > self.max_file_bytes:
                raise WorkspaceError(
                    f"{vpath} is {size} bytes; files over {self.max_file_bytes} bytes are not "
                    "read (grep it instead)"
                )
            return f.read()

    async def write(self, state: State, vpath: str, data: bytes) -> None:
        await anyio.to_thread.run_sync(self._write, vpath, data)

    def _write(self, vpath: str, data: bytes) -> None:
        if vpath == "/":
            raise IsADirectoryError(vpath)
        real = self._disk(vpath)
        if real.is_dir():
            raise IsADirectoryError(vpath)
        real.parent.mkdir(parents=True, exist_ok=True)
        # The parent may have been created through a link swapped in meanwhile: check again.
        resolve_under(self.root, "/" + real.relative_to(self.root).as_posix())
        tmp = real.parent / f".{real.name[:200]}.{uuid.uuid4().hex[:12]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, real)  # replaces a final symlink itself, never what it points at
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    async def delete(self, state: State, vpath: str) -> None:
        await anyio.to_thread.run_sync(self._delete, vpath)

    def _delete(self, vpath: str) -> None:
        names = parts_of(vpath)
        if not names:
            raise IsADirectoryError(vpath)
        # The folder is resolved; the name itself is not followed (a link is removed, not
        # the file it points at).
        parent = resolve_under(self.root, "/" + "/".join(names[:-1]), asked=vpath).real
        target = parent / names[-1]
        if target.is_dir() and not target.is_symlink():
            raise IsADirectoryError(vpath)
        os.unlink(target)

    async def listdir(self, state: State, vpath: str) -> list[Entry]:
        return await anyio.to_thread.run_sync(self._listdir, vpath)

    def _entry(self, path: Path, vpath: str) -> Entry:
        if path.is_symlink():
            try:
                inside = resolve_under(self.root, "/" + path.relative_to(self.root).as_posix())
            except PathRefused:
                return Entry(vpath, "link")
            path = inside.real
        if path.is_dir():
            return Entry(vpath, "dir")
        try:
            return Entry(vpath, "file", path.stat().st_size)
        except OSError:
            return Entry(vpath, "link")

    def _listdir(self, vpath: str) -> list[Entry]:
        on_disk = resolve_under(self.root, vpath)
        if not on_disk.real.exists():
            raise FileNotFoundError(vpath)
        if not on_disk.real.is_dir():
            raise NotADirectoryError(vpath)
        base = on_disk.resolved.rstrip("/")
        out = [
            self._entry(on_disk.real / name, f"{base}/{name}")
            for name in sorted(os.listdir(on_disk.real))
        ]
        return out

    async def walk(self, state: State, vpath: str, limit: int) -> tuple[list[Entry], bool]:
        return await anyio.to_thread.run_sync(self._walk, vpath, limit)

    def _walk(self, vpath: str, limit: int) -> tuple[list[Entry], bool]:
        on_disk = resolve_under(self.root, vpath)
        if on_disk.real.is_file():
            return [Entry(on_disk.resolved, "file", on_disk.real.stat().st_size)], False
        if not on_disk.real.is_dir():
            raise FileNotFoundError(vpath)
        out: list[Entry] = []
        # followlinks=False: a linked folder is never walked into (no loops, no escapes);
        # linked files are resolved and kept only when they stay inside the root.
        for folder, dirs, files in os.walk(on_disk.real, followlinks=False):
            dirs.sort()
            rel = Path(folder).relative_to(self.root).as_posix()
            base = "" if rel == "." else "/" + rel
            for name in sorted(files):
                entry = self._entry(Path(folder) / name, f"{base}/{name}")
                if entry.kind != "file":
                    continue
                if len(out) == limit:
                    return out, True
                out.append(entry)
        return out, False


class StoreBackend:
    """Files in hango's database, per session: manifest in private state, contents in
    ``workspace_blobs``. Folders are implied by the files in them (an empty folder does not
    exist). ``max_files`` bounds the manifest (it is saved with every checkpoint)."""

    kind = "store"

    def __init__(self, *, max_file_bytes: int, max_files: int) -> None:
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files

    @staticmethod
    def _blobs(state: State) -> WorkspaceBlobs:
        blobs = workspace_blobs(state)
        if blobs is None:
            raise WorkspaceError(
                "the workspace's store backend is only available inside a run executed by "
                "hango (no store is bound here)"
            )
        return blobs

    async def resolve(self, state: State, vpath: str) -> str:
        return vpath

    @staticmethod
    def _is_dir(files: Mapping[str, FileEntry], vpath: str) -> bool:
        if vpath == "/":
            return True
        prefix = vpath + "/"
        return any(p.startswith(prefix) for p in files)

    async def read(self, state: State, vpath: str) -> bytes:
        files = load_workspace(state).files
        entry = files.get(vpath)
        if entry is None:
            if self._is_dir(files, vpath):
                raise IsADirectoryError(vpath)
            raise FileNotFoundError(vpath)
        if entry.size > self.max_file_bytes:
            raise WorkspaceError(f"{vpath} is {entry.size} bytes; over the read limit")
        content = await self._blobs(state).get(entry.digest)
        if content is None:
            raise WorkspaceError(
                f"the content of {vpath} ({entry.digest[:19]}...) is no longer stored; its "
                "session's data was deleted"
            )
        return content

    async def write(self, state: State, vpath: str, data: bytes) -> None:
        files = load_workspace(state).files
        if self._is_dir(files, vpath):
            raise IsADirectoryError(vpath)
        names = parts_of(vpath)
        for i in range(1, len(names)):
            if "/" + "/".join(names[:i]) in files:
                raise NotADirectoryError("/" + "/".join(names[:i]))
        if vpath not in files and len(files) >= self.max_files:
            raise WorkspaceError(
                f"the workspace holds {len(files)} files, its limit; delete some first"
            )
        digest = await self._blobs(state).put(data)
        # No await from here on: the manifest is read, changed and stored in one step, so
        # concurrent calls on other paths cannot lose each other's entries.
        current = load_workspace(state)
        current.files[vpath] = FileEntry(digest, len(data))
        save_workspace(state, current)

    async def delete(self, state: State, vpath: str) -> None:
        current = load_workspace(state)
        if vpath not in current.files:
            if self._is_dir(current.files, vpath):
                raise IsADirectoryError(vpath)
            raise FileNotFoundError(vpath)
        del current.files[vpath]
        save_workspace(state, current)

    async def listdir(self, state: State, vpath: str) -> list[Entry]:
        files = load_workspace(state).files
        if vpath in files:
            raise NotADirectoryError(vpath)
        if not self._is_dir(files, vpath):
            raise FileNotFoundError(vpath)
        depth = len(parts_of(vpath))
        children: dict[str, Entry] = {}
        for path, entry in files.items():
            if not is_under(path, vpath) or path == vpath:
                continue
            names = parts_of(path)
            child = "/" + "/".join(names[: depth + 1])
            if len(names) == depth + 1:
                children[child] = Entry(child, "file", entry.size)
            else:
                children.setdefault(child, Entry(child, "dir"))
        return [children[k] for k in sorted(children)]

    async def walk(self, state: State, vpath: str, limit: int) -> tuple[list[Entry], bool]:
        files = load_workspace(state).files
        found = sorted(p for p in files if is_under(p, vpath))
        if not found and vpath != "/":
            raise FileNotFoundError(vpath)
        out = [Entry(p, "file", files[p].size) for p in found[:limit]]
        return out, len(found) > limit


class Workspace:
    """The backends of one agent, by prefix: ``routes`` maps a virtual folder (``/memories/``)
    to a backend, ``default`` takes every other path. The longest matching prefix wins."""

    def __init__(self, default: Backend, routes: Mapping[str, Backend] | None = None) -> None:
        self.default = default
        self.routes = {normalize(prefix): backend for prefix, backend in (routes or {}).items()}

    def backend(self, vpath: str) -> Backend:
        best, chosen = -1, self.default
        for prefix, backend in self.routes.items():
            if is_under(vpath, prefix) and len(prefix) > best:
                best, chosen = len(prefix), backend
        return chosen

    def mounts_in(self, vpath: str) -> list[Entry]:
        """Route folders directly inside folder ``vpath`` (shown by ``ls`` even when their
        backend holds nothing there yet)."""
        depth = len(parts_of(vpath))
        out = []
        for prefix in self.routes:
            names = parts_of(prefix)
            if len(names) > depth and is_under(prefix, vpath):
                out.append(Entry("/" + "/".join(names[: depth + 1]), "dir"))
        return out

    def routed_below(self, vpath: str) -> list[str]:
        """Route prefixes strictly inside ``vpath``: a walk of ``vpath``'s backend must
        leave them to their own backend."""
        return [p for p in self.routes if p != vpath and is_under(p, vpath)]

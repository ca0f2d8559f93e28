"""The file tools: ``ls``, ``read_file``, ``write_file``, ``edit_file``, ``glob``, ``grep`` and
``delete_file``, over one ``Workspace``.

Every path goes through ``normalize`` and the backend's resolver, then the permission rules
(as asked and as resolved). Every refusal and failure is an error result naming the path and
the rule or the cause: nothing a model writes can fail the run. Every result is bounded
(entries, characters) and says when it was cut and how to see the rest.

``write_file``, ``edit_file`` and ``delete_file`` declare ``idempotent = False``: hango saves
that they started before they run, so a crash mid-call is never silently applied twice.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, Final

from attrs import frozen
from wcmatch import glob as wglob

from hango import ToolContext, ToolResult, ToolSpec, error_result
from hango.middleware import State
from hango_filesystem.backends import Entry, Workspace, WorkspaceError
from hango_filesystem.paths import PathRefused, normalize
from hango_filesystem.permissions import GLOB_FLAGS, Operation, Rule, Verdict, check

#: The scratch key of the per-batch data (``State.scratch``, cleared by the loop).
SCRATCH_KEY: Final = "filesystem"
OUTPUT_MODES: Final = ("files_with_matches", "content", "count")


@frozen
class Limits:
    """Bounds of the tools' results and inputs.

    ``read_lines``: rows per ``read_file`` page (default limit). ``read_chars``: characters
    per page. ``line_chars``: a longer line is cut into rows of this many characters, so a
    one-line file is read in pages too. ``max_entries``: entries per ``ls``/``glob`` result and
    matches per ``grep`` result. ``max_scan``: files a ``glob``/``grep`` looks at.
    ``match_chars``: characters of a grep content line. ``max_file_bytes``: largest file
    read or written."""

    read_lines: int = 2000
    read_chars: int = 40_000
    line_chars: int = 2000
    max_entries: int = 500
    max_scan: int = 20_000
    match_chars: int = 300
    max_file_bytes: int = 10_000_000


def batch_scratch(state: State) -> dict[str, Any]:
    """This batch's filesystem scratch: ``mutated`` (virtual paths changed), ``approved`` (call
    ids a person approved), ``locks`` (per-path locks)."""
    scratch: dict[str, Any] = state.scratch.setdefault(
        SCRATCH_KEY, {"mutated": set(), "approved": set(), "locks": {}}
    )
    return scratch


class Files:
    """The tools' shared logic: resolving, checking the rules, bounded formatting."""

    def __init__(self, workspace: Workspace, rules: tuple[Rule, ...], limits: Limits) -> None:
        self.workspace = workspace
        self.rules = rules
        self.limits = limits

    async def verdict(self, state: State, operation: Operation, path: object) -> Verdict:
        """The rules' verdict on ``operation`` on ``path``; raises ``PathRefused``."""
        vpath = normalize(path)
        resolved = await self.workspace.backend(vpath).resolve(state, vpath)
        return check(self.rules, operation, vpath, resolved)

    async def _allowed(self, ctx: ToolContext, operation: Operation, path: object) -> str:
        vpath = normalize(path)
        verdict = await self.verdict(ctx.state, operation, vpath)
        if verdict.mode == "deny":
            raise PathRefused(path, f"{operation} is denied by {verdict.rule}")
        if verdict.mode == "interrupt" and ctx.call.id not in batch_scratch(ctx.state)["approved"]:
            raise PathRefused(path, f"{operation} needs a person's approval ({verdict.rule})")
        return vpath

    def _mutated(self, state: State, vpath: str) -> None:
        batch_scratch(state)["mutated"].add(vpath)

    async def _walk(self, state: State, vpath: str) -> tuple[list[Entry], bool]:
        """Files under ``vpath`` across routes, in path order, at most ``max_scan``."""
        limit = self.limits.max_scan
        backend = self.workspace.backend(vpath)
        skip = self.workspace.routed_below(vpath)
        try:
            found, cut = await backend.walk(state, vpath, limit)
        except FileNotFoundError:
            if not skip:
                raise
            found, cut = [], False
        entries = [e for e in found if not any(_under(e.path, p) for p in skip)]
        for prefix in skip:
            try:
                more, more_cut = await self.workspace.backend(prefix).walk(state, prefix, limit)
            except FileNotFoundError:
                continue
            entries += more
            cut = cut or more_cut
        entries.sort(key=lambda e: e.path)
        if len(entries) > limit:
            return entries[:limit], True
        return entries, cut

    def _readable(self, entries: list[Entry]) -> tuple[list[Entry], int]:
        kept = [e for e in entries if check(self.rules, "read", e.path).mode == "allow"]
        return kept, len(entries) - len(kept)

    # -- the tools ------------------------------------------------------------------------

    async def ls(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = input.get("path", "/")
        vpath = await self._allowed(ctx, "read", path)
        try:
            entries = await self.workspace.backend(vpath).listdir(ctx.state, vpath)
        except FileNotFoundError:
            entries = []
            if not self.workspace.mounts_in(vpath):
                raise
        known = {e.path for e in entries}
        entries += [m for m in self.workspace.mounts_in(vpath) if m.path not in known]
        entries.sort(key=lambda e: e.path)
        entries, hidden = self._readable(entries)
        n = self.limits.max_entries
        lines = [_entry_line(e) for e in entries[:n]]
        if not lines:
            lines.append(f"{vpath} is empty.")
        if len(entries) > n:
            lines.append(
                f"[Cut: {n} of {len(entries)} entries shown. Use glob(pattern, path) to "
                "narrow the listing.]"
            )
        if hidden:
            lines.append(f"[{hidden} entries not shown: the permission rules deny reading them]")
        return ToolResult("\n".join(lines))

    async def read_file(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = input["path"]
        offset = int(input.get("offset", 0))
        limit = int(input.get("limit", self.limits.read_lines))
        if offset < 0 or limit < 1:
            return error_result("read_file %s: offset must be >= 0 and limit >= 1", path)
        limit = min(limit, self.limits.read_lines)
        vpath = await self._allowed(ctx, "read", path)
        data = await self.workspace.backend(vpath).read(ctx.state, vpath)
        if b"\x00" in data[:8192]:
            return error_result(
                "%s is a binary file (%d bytes); read_file shows text only", vpath, len(data)
            )
        if not data:
            return ToolResult(f"{vpath} is empty (0 bytes).")
        text = data.decode("utf-8", errors="replace")
        return ToolResult(self._page(vpath, text, offset, limit))

    def _page(self, vpath: str, text: str, offset: int, limit: int) -> str:
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        width = self.limits.line_chars
        rows: list[tuple[int, bool, str]] = []  # (line number, continuation?, text)
        for number, line in enumerate(lines, 1):
            if len(line) <= width:
                rows.append((number, False, line))
                continue
            for start in range(0, len(line), width):
                rows.append((number, start > 0, line[start : start + width]))
        if offset >= len(rows):
            return f"{vpath}: offset {offset} is past the end ({len(rows)} rows)."
        out: list[str] = []
        used = 0
        end = offset
        while end < len(rows) and end - offset < limit:
            number, more, chunk = rows[end]
            row = f"{number:>6}{'+' if more else ' '}\t{chunk}"
            if out and used + len(row) + 1 > self.limits.read_chars:
                break
            out.append(row)
            used += len(row) + 1
            end += 1
        if end < len(rows) or offset > 0:
            first, last = rows[offset][0], rows[end - 1][0]
            note = (
                f"[Rows {offset + 1}-{end} of {len(rows)} (lines {first}-{last} of "
                f"{len(lines)}). Lines over {width} characters take several rows, marked '+'."
            )
            if end < len(rows):
                note += f" Continue with read_file(path={vpath!r}, offset={end}).]"
            else:
                note += " End of file.]"
            out.append(note)
        return "\n".join(out)

    async def write_file(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path, content = input["path"], input["content"]
        vpath = await self._allowed(ctx, "write", path)
        data = _encode(vpath, content)
        if len(data) > self.limits.max_file_bytes:
            return error_result(
                "write_file %s: %d bytes; at most %d", vpath, len(data), self.limits.max_file_bytes
            )
        await self.workspace.backend(vpath).write(ctx.state, vpath, data)
        self._mutated(ctx.state, vpath)
        return ToolResult(f"Wrote {vpath} ({len(data)} bytes).")

    async def edit_file(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path, old, new = input["path"], input["old_string"], input["new_string"]
        replace_all = bool(input.get("replace_all", False))
        vpath = await self._allowed(ctx, "write", path)
        if old == "":
            return error_result("edit_file %s: old_string is empty; use write_file", vpath)
        if old == new:
            return error_result("edit_file %s: old_string and new_string are the same", vpath)
        backend = self.workspace.backend(vpath)
        try:
            text = (await backend.read(ctx.state, vpath)).decode("utf-8")
        except UnicodeDecodeError:
            return error_result("edit_file %s: the file is not UTF-8 text", vpath)
        count = text.count(old)
        if count == 0:
            return error_result(
                "edit_file %s: old_string was not found; the file is unchanged (read it again "
                "and copy the text exactly, whitespace included)",
                vpath,
            )
        if count > 1 and not replace_all:
            where = _lines_of(text, old)
            return error_result(
                "edit_file %s: old_string occurs %d times (lines %s); the file is unchanged. "
                "Add surrounding text to make it unique, or set replace_all=true.",
                vpath,
                count,
                ", ".join(map(str, where[:20])),
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        data = _encode(vpath, updated)
        if len(data) > self.limits.max_file_bytes:
            return error_result("edit_file %s: the result would exceed the size limit", vpath)
        await backend.write(ctx.state, vpath, data)
        self._mutated(ctx.state, vpath)
        done = count if replace_all else 1
        return ToolResult(f"Edited {vpath}: {done} replacement{'s' if done > 1 else ''}.")

    async def delete_file(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = input["path"]
        vpath = await self._allowed(ctx, "delete", path)
        await self.workspace.backend(vpath).delete(ctx.state, vpath)
        self._mutated(ctx.state, vpath)
        return ToolResult(f"Deleted {vpath}.")

    async def glob(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern, path = input["pattern"], input.get("path", "/")
        matcher = _pattern(pattern)
        vpath = await self._allowed(ctx, "read", path)
        found, cut = await self._walk(ctx.state, vpath)
        hits = [e for e in found if matcher(_relative(e.path, vpath, pattern))]
        hits, hidden = self._readable(hits)
        n = self.limits.max_entries
        lines = [_entry_line(e) for e in hits[:n]] or [f"No files match {pattern!r} in {vpath}."]
        if len(hits) > n:
            lines.append(f"[Cut: {n} of {len(hits)} matches shown. Narrow the pattern or path.]")
        if cut:
            lines.append(
                f"[Cut: only the first {self.limits.max_scan} files under {vpath} were "
                "searched. Narrow the path.]"
            )
        if hidden:
            lines.append(f"[{hidden} matches not shown: the permission rules deny reading them]")
        return ToolResult("\n".join(lines))

    async def grep(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern, path = input["pattern"], input.get("path", "/")
        only, mode = input.get("glob"), input.get("output_mode", "files_with_matches")
        if mode not in OUTPUT_MODES:
            return error_result("grep: output_mode must be one of %s", ", ".join(OUTPUT_MODES))
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return error_result(
                "grep: pattern %r is not a valid regular expression: %s", pattern, exc
            )
        matcher = _pattern(only) if only else None
        vpath = await self._allowed(ctx, "read", path)
        found, cut = await self._walk(ctx.state, vpath)
        if matcher is not None:
            found = [e for e in found if matcher(_relative(e.path, vpath, only or ""))]
        found, hidden = self._readable(found)
        n, width = self.limits.max_entries, self.limits.match_chars
        lines: list[str] = []
        matches = 0
        more = False
        for entry in found:
            if entry.size > self.limits.max_file_bytes:
                continue
            try:
                data = await self.workspace.backend(entry.path).read(ctx.state, entry.path)
            except (OSError, WorkspaceError, PathRefused):
                continue
            if b"\x00" in data[:8192]:
                continue
            text = data.decode("utf-8", errors="replace")
            if mode == "files_with_matches":
                if regex.search(text):
                    if len(lines) == n:
                        more = True
                        break
                    lines.append(entry.path)
                continue
            hits = [(i, line) for i, line in enumerate(text.split("\n"), 1) if regex.search(line)]
            if not hits:
                continue
            if mode == "count":
                if len(lines) == n:
                    more = True
                    break
                lines.append(f"{entry.path}:{len(hits)}")
                continue
            for i, line in hits:
                if matches == n:
                    more = True
                    break
                shown = line if len(line) <= width else line[:width] + "..."
                lines.append(f"{entry.path}:{i}:{shown}")
                matches += 1
            if more:
                break
        if not lines:
            lines.append(f"No matches for {pattern!r} in {vpath}.")
        if more:
            lines.append(f"[Cut at {n} results. Narrow the pattern, path or glob.]")
        if cut:
            lines.append(
                f"[Cut: only the first {self.limits.max_scan} files under {vpath} were "
                "searched. Narrow the path.]"
            )
        if hidden:
            lines.append(f"[{hidden} files not searched: the permission rules deny reading them]")
        return ToolResult("\n".join(lines))


def _under(vpath: str, prefix: str) -> bool:
    return vpath == prefix or vpath.startswith(prefix.rstrip("/") + "/")


def _entry_line(e: Entry) -> str:
    if e.kind == "dir":
        return e.path + "/"
    if e.kind == "link":
        return f"{e.path} (link)"
    return f"{e.path} ({e.size} bytes)"


def _lines_of(text: str, needle: str) -> list[int]:
    out, start = [], 0
    while (i := text.find(needle, start)) != -1:
        out.append(text.count("\n", 0, i) + 1)
        start = i + 1
    return out


def _encode(vpath: str, content: str) -> bytes:
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        raise WorkspaceError(
            f"{vpath}: the content holds a lone UTF-16 surrogate, which is not text"
        ) from None


def _pattern(pattern: object) -> Callable[[str], bool]:
    """A matcher for a glob pattern; raises ``PathRefused`` for a pattern that would
    traverse (a ``..`` name, deepagents#1322) or holds a NUL."""
    if not isinstance(pattern, str) or not pattern:
        raise PathRefused(pattern, "a glob pattern is a non-empty string")
    if "\x00" in pattern:
        raise PathRefused(pattern, "the glob pattern contains a NUL character")
    if ".." in pattern.split("/"):
        raise PathRefused(pattern, "a glob pattern may not contain a '..' name (traversal)")

    def match(rel: str) -> bool:
        return bool(wglob.globmatch(rel, pattern.lstrip("/"), flags=GLOB_FLAGS))

    return match


def _relative(vpath: str, base: str, pattern: str) -> str:
    """What a pattern is matched against: the path from ``base``, or from the root for a
    pattern that starts with ``/``."""
    if pattern.startswith("/") or base == "/":
        return vpath.lstrip("/")
    return vpath[len(base.rstrip("/")) + 1 :]


Run = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@frozen
class FileTool:
    """One file tool: its ``spec``, the ``operation`` the rules check, whether it is
    ``idempotent`` and its implementation. ``call`` turns every refusal and failure into an
    error result."""

    spec: ToolSpec
    operation: Operation
    run: Run
    idempotent: bool = True
    mutates: bool = False

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        name = self.spec.name
        try:
            return await self.run(input, ctx)
        except PathRefused as exc:
            return error_result("%s: %s", name, exc)
        except FileNotFoundError:
            return error_result("%s: %s does not exist", name, _shown(input))
        except IsADirectoryError:
            return error_result("%s: %s is a folder, not a file", name, _shown(input))
        except NotADirectoryError as exc:
            return error_result(
                "%s: %s is a file, not a folder", name, exc.args[0] if exc.args else _shown(input)
            )
        except WorkspaceError as exc:
            return error_result("%s: %s", name, exc)
        except OSError as exc:
            return error_result("%s: %s: %s", name, _shown(input), exc.strerror or exc)


def _shown(input: dict[str, Any]) -> str:
    path = input.get("path", "/")
    try:
        return normalize(path)
    except PathRefused:
        return repr(path)


_PATH = {"type": "string", "description": "Workspace path; / is the workspace root."}


def build_tools(files: Files) -> tuple[FileTool, ...]:
    """The seven tools over ``files``."""
    lim = files.limits
    return (
        FileTool(
            ToolSpec(
                "ls",
                "List a folder of the workspace: one entry per line, folders end with '/', "
                f"files show their size. At most {lim.max_entries} entries.",
                {
                    "type": "object",
                    "properties": {"path": {**_PATH, "default": "/"}},
                    "additionalProperties": False,
                },
            ),
            "read",
            files.ls,
        ),
        FileTool(
            ToolSpec(
                "read_file",
                "Read a text file, line-numbered (number, then a tab, then the line). Pages "
                f"hold at most {lim.read_lines} rows and {lim.read_chars} characters; a line "
                f"over {lim.line_chars} characters is split into rows marked '+'. The end of "
                "a page says the offset to continue from.",
                {
                    "type": "object",
                    "properties": {
                        "path": _PATH,
                        "offset": {
                            "type": "integer",
                            "minimum": 0,
                            "default": 0,
                            "description": "The first row to show, counted from 0.",
                        },
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "default": lim.read_lines,
                            "description": "How many rows to show at most.",
                        },
                    },
                    "required": ["path"],
                    "additionalProperties": False,
                },
            ),
            "read",
            files.read_file,
        ),
        FileTool(
            ToolSpec(
                "write_file",
                "Create or replace a file with the given content (folders are created).",
                {
                    "type": "object",
                    "properties": {"path": _PATH, "content": {"type": "string"}},
                    "required": ["path", "content"],
                    "additionalProperties": False,
                },
            ),
            "write",
            files.write_file,
            idempotent=False,
            mutates=True,
        ),
        FileTool(
            ToolSpec(
                "edit_file",
                "Replace old_string with new_string in a file. old_string must occur exactly "
                "once unless replace_all is true; otherwise the edit fails and says where it "
                "occurs. Read the file first and copy the text exactly.",
                {
                    "type": "object",
                    "properties": {
                        "path": _PATH,
                        "old_string": {"type": "string"},
                        "new_string": {"type": "string"},
                        "replace_all": {"type": "boolean", "default": False},
                    },
                    "required": ["path", "old_string", "new_string"],
                    "additionalProperties": False,
                },
            ),
            "write",
            files.edit_file,
            idempotent=False,
            mutates=True,
        ),
        FileTool(
            ToolSpec(
                "glob",
                "Find files whose path matches a glob pattern ('**' crosses folders, "
                "'{a,b}' alternatives), relative to path (or to the root when the pattern "
                f"starts with '/'). At most {lim.max_entries} matches.",
                {
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string"},
                        "path": {**_PATH, "default": "/"},
                    },
                    "required": ["pattern"],
                    "additionalProperties": False,
                },
            ),
            "read",
            files.glob,
        ),
        FileTool(
            ToolSpec(
                "grep",
                "Search file contents for a regular expression (Python syntax). output_mode: "
                "files_with_matches (paths), content (path:line:text) or count (path:count). "
                f"glob filters the files searched. At most {lim.max_entries} results.",
                {
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string"},
                        "path": {**_PATH, "default": "/"},
                        "glob": {"type": ["string", "null"], "default": None},
                        "output_mode": {
                            "enum": list(OUTPUT_MODES),
                            "default": "files_with_matches",
                        },
                    },
                    "required": ["pattern"],
                    "additionalProperties": False,
                },
            ),
            "read",
            files.grep,
        ),
        FileTool(
            ToolSpec(
                "delete_file",
                "Delete one file (not a folder).",
                {
                    "type": "object",
                    "properties": {"path": _PATH},
                    "required": ["path"],
                    "additionalProperties": False,
                },
            ),
            "delete",
            files.delete_file,
            idempotent=False,
            mutates=True,
        ),
    )

"""``FilesystemMiddleware`` (slot ``filesystem``): the workspace.

- ToolProvider: the seven file tools (``hango_filesystem.tools``).
- ToolWrapper, for the file tools: calls of one batch that change the same path run one after
  the other in call order (a per-path lock in ``State.scratch``, which the loop clears after
  the batch), and an ``interrupt`` permission rule asks a person through hango's durable
  approval before the call runs (approve, edit, reject, respond, as for any gated call).
- ToolWrapper, for every other tool: a result over ``large_result_tokens`` is written to
  ``/large_tool_results/<call id>`` and the history keeps a preview (first and last lines)
  and the path. It is written before the result is returned, and the ``store`` backend's
  manifest is saved in the same save as the result, so after ``kill -9`` every path the model
  was given resolves. The folder keeps the last ``max_results_kept`` results.
- PromptContributor: one byte-stable block saying how the workspace works.

Sitting second in the stack, outside summarization, it offloads before a summary is made, and
outside approval and the allowlist, so its tools are gated and filtered like any other tool.
Its private state (the ``store`` backend's manifest, the offloaded results) is session-scoped.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Sequence
from typing import Final

import anyio

from hango import TextBlock, Tool, ToolResult, error_result
from hango.middleware import (
    REQUEST_REWRITTEN,
    SHORT_CIRCUITED,
    TOOL_NAME,
    State,
    ToolCallRequest,
    ToolHandler,
    record,
    replace_lone_surrogates,
    workspace_blobs,
)
from hango_filesystem.backends import (
    Offloaded,
    StoreBackend,
    Workspace,
    WorkspaceError,
    load_workspace,
    save_workspace,
)
from hango_filesystem.paths import PathRefused, normalize
from hango_filesystem.permissions import Rule
from hango_filesystem.tools import Files, FileTool, Limits, batch_scratch, build_tools

#: Where large results go.
RESULTS_DIR: Final = "/large_tool_results"
#: Characters per token, to turn ``large_result_tokens`` into a length.
CHARS_PER_TOKEN: Final = 4
#: Lines of a large result kept at each end of its preview, and their width.
PREVIEW_LINES: Final = 10
PREVIEW_LINE_CHARS: Final = 200
#: How many times one call may be edited before it is refused.
MAX_EDITS: Final = 3
#: The span event of a call that changed a file.
FILE_CHANGED: Final = "filesystem.file_changed"
#: The span event of a result moved into the workspace.
RESULT_OFFLOADED: Final = "filesystem.result_offloaded"


class FilesystemMiddleware:
    """The workspace over ``workspace`` (backends by prefix) with ``rules`` and ``limits``;
    ``None`` makes it inactive (no tools, no prompt block, calls passed through).

    ``large_result_tokens``: results of other tools longer than this many tokens (about 4
    characters each) are offloaded; 0 turns offloading off. ``large_result_exclude``: tools
    whose results are never offloaded. ``max_results_kept``: results the folder keeps (the
    oldest go first)."""

    name = "filesystem"
    state_scope = "session"

    def __init__(
        self,
        workspace: Workspace | None,
        *,
        rules: Sequence[Rule] = (),
        limits: Limits | None = None,
        large_result_tokens: int = 20_000,
        large_result_exclude: Collection[str] = (),
        max_results_kept: int = 50,
    ) -> None:
        self.active = workspace is not None
        if workspace is None:
            workspace = Workspace(StoreBackend(max_file_bytes=1, max_files=1))
        self.workspace = workspace
        # The results folder is hango's: the model reads it, never changes it.
        own = Rule((f"{RESULTS_DIR}/**",), ("write", "delete"), "deny", "the results folder")
        self.files = Files(workspace, (own, *rules), limits or Limits())
        self.tools: tuple[FileTool, ...] = build_tools(self.files)
        self._names = frozenset(t.spec.name for t in self.tools)
        self.threshold = large_result_tokens * CHARS_PER_TOKEN
        self.exclude = frozenset(large_result_exclude)
        self.max_results_kept = max_results_kept
        self._prompt = TextBlock(_prompt(workspace))

    def provide_tools(self, state: State) -> Sequence[Tool]:
        return self.tools if self.active else ()

    def system_blocks(self, state: State) -> Sequence[TextBlock]:
        return (self._prompt,) if self.active else ()

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if not self.active:
            return await next(req)
        tool = req.tool
        if isinstance(tool, FileTool) and tool in self.tools:
            return await self._file_call(req, next, tool)
        result = await next(req)
        if (
            self.threshold == 0
            or req.call.name in self._names
            or req.call.name in self.exclude
            or len(result.content) <= self.threshold
        ):
            return result
        return await self._offload(req, result)

    # -- file tools ------------------------------------------------------------------------

    async def _file_call(
        self, req: ToolCallRequest, next: ToolHandler, tool: FileTool
    ) -> ToolResult:
        scratch = batch_scratch(req.state)
        lock: contextlib.AbstractAsyncContextManager[object] = contextlib.nullcontext()
        if tool.mutates and isinstance(req.call.input, dict):
            with contextlib.suppress(PathRefused):
                key = normalize(req.call.input.get("path"))
                # Taken before anything awaits: calls of one batch queue in call order.
                lock = scratch["locks"].setdefault(key, anyio.Lock())
        async with lock:
            call, edits = req.call, 0
            while isinstance(call.input, dict):
                try:
                    verdict = await self.files.verdict(
                        req.state, tool.operation, call.input.get("path", "/")
                    )
                except PathRefused:
                    break  # the tool itself refuses it, with the rule
                if verdict.mode != "interrupt":
                    break
                decision = req.interrupt(
                    self.name,
                    "approve" if edits == 0 else f"approve after edit {edits}",
                    reason=f"{call.name} on {normalize(call.input.get('path', '/'))} matches "
                    f"{verdict.rule}",
                    call=call,
                )
                if decision.type == "approve":
                    scratch["approved"].add(call.id)
                    break
                if decision.type in ("reject", "respond"):
                    record(
                        SHORT_CIRCUITED,
                        middleware=self.name,
                        reason=f"{decision.type}ed by a person",
                        attributes={TOOL_NAME: call.name},
                    )
                    if decision.type == "respond":
                        return ToolResult(decision.message or "")
                    text = (decision.message or "").strip()
                    return error_result(
                        "Rejected by a person%s The call did not run.",
                        f": {text}" if text else ".",
                    )
                edited = decision.edited_call(call)
                if edited.name != call.name:
                    return error_result(
                        "Not run: an edit may not turn %s into another tool (%s).",
                        call.name,
                        edited.name,
                    )
                if edits == MAX_EDITS:
                    return error_result("Not run: this call was edited %d times.", MAX_EDITS)
                record(REQUEST_REWRITTEN, middleware=self.name, reason="edited")
                call, edits = edited, edits + 1
            result = await next(req if call is req.call else req.with_call(call))
        if tool.mutates and not result.is_error:
            record(
                FILE_CHANGED,
                middleware=self.name,
                reason=tool.spec.name,
                attributes={"hango.filesystem.batch_changed": len(scratch["mutated"])},
            )
        return result

    # -- large results ---------------------------------------------------------------------

    async def _offload(self, req: ToolCallRequest, result: ToolResult) -> ToolResult:
        state, call = req.state, req.call
        path = f"{RESULTS_DIR}/{_safe_name(call.id)}"
        content = replace_lone_surrogates(result.content)
        backend = self.workspace.backend(path)
        try:
            await backend.write(state, path, content.encode("utf-8"))
        except (WorkspaceError, OSError, PathRefused):
            # Nowhere to put it (a chain driven outside a run): the loop's own limit on a
            # stored result still bounds it.
            return result
        current = load_workspace(state)
        current.offloaded = [o for o in current.offloaded if o.path != path]
        current.offloaded.append(Offloaded(call.id, call.name, path, len(content)))
        evicted = current.offloaded[: -self.max_results_kept]
        current.offloaded = current.offloaded[-self.max_results_kept :]
        save_workspace(state, current)
        for old in evicted:
            await self._forget(state, old.path)
        record(RESULT_OFFLOADED, middleware=self.name, attributes={TOOL_NAME: call.name})
        return ToolResult(_preview(content, path), result.is_error)

    async def _forget(self, state: State, path: str) -> None:
        backend = self.workspace.backend(path)
        digest = None
        if isinstance(backend, StoreBackend):
            entry = load_workspace(state).files.get(path)
            digest = None if entry is None else entry.digest
        with contextlib.suppress(OSError, WorkspaceError, PathRefused):
            await backend.delete(state, path)
        if digest is None:
            return
        still = {e.digest for e in load_workspace(state).files.values()}
        blobs = workspace_blobs(state)
        if blobs is not None and digest not in still:
            await blobs.delete([digest])


def _safe_name(call_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", call_id)[:200].lstrip(".")
    return name or "call"


def _preview(content: str, path: str) -> str:
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it starts none

    def cut(line: str) -> str:
        return line if len(line) <= PREVIEW_LINE_CHARS else line[:PREVIEW_LINE_CHARS] + "..."

    head = [cut(x) for x in lines[:PREVIEW_LINES]]
    tail = [cut(x) for x in lines[PREVIEW_LINES:][-PREVIEW_LINES:]]
    tokens = len(content) // CHARS_PER_TOKEN
    parts = [
        f"[This result was {len(content)} characters (about {tokens} tokens) and {len(lines)} "
        f"lines, too large for the context. It is saved in full at {path}: page through it "
        f"with read_file(path={path!r}, offset=0) and on, or search it with grep(pattern, "
        f"path={path!r}, output_mode='content'). First and last lines:]",
        *head,
    ]
    if tail:
        skipped = len(lines) - len(head) - len(tail)
        if skipped > 0:
            parts.append(f"[... {skipped} lines ...]")
        parts += tail
    return "\n".join(parts)


def _prompt(workspace: Workspace) -> str:
    where = {"local": "files on disk", "store": "kept in hango's database with this conversation"}
    lines = [
        "Workspace (filesystem): you have a file workspace. Paths are absolute from / (its "
        "root); nothing outside it can be reached. Tools: ls, read_file (line-numbered pages: "
        "continue with the offset the page ends with), write_file, edit_file (exact, unique "
        "replacement), glob, grep, delete_file. Read a file before you edit it.",
        f"Default storage: {where.get(workspace.default.kind, workspace.default.kind)}.",
    ]
    for prefix, backend in sorted(workspace.routes.items()):
        lines.append(f"{prefix}/: {where.get(backend.kind, backend.kind)}.")
    lines.append(
        f"Large tool results are saved under {RESULTS_DIR}/<call id> and shown to you as a "
        "preview with their path: read or grep that file for the rest, instead of calling the "
        "tool again."
    )
    return "\n".join(lines)


__all__ = ["FILE_CHANGED", "RESULTS_DIR", "RESULT_OFFLOADED", "FilesystemMiddleware"]

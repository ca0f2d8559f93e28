"""The memory tools: ``read_memory``, ``write_memory``, ``delete_memory``, ``search_memory``.

Entries live in hango's database (``hango.middleware.run_memory``). A write or delete is keyed
by its run and tool call, so a call replayed after a crash returns what it did the first time
instead of writing twice; that is why these tools are idempotent in hango's sense (a resumed
run runs them again, safely). ``set`` and ``replace`` need the version the model read
(compare-and-swap): a write over another run's newer version is refused, with the version
there now, and writes nothing.

Guarding against a poisoned write (one bad note carried into every later session): by
default the model writes only its session's entries (``scope = "session"``); writing the
agent-wide entries every session sees takes ``[options.memory] shared_writes = true``, and
can be gated by a person with hango-approval like any tool. Every version keeps its
provenance, shown in the block and by ``hango memory show``, and can be undone there.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final, Literal

from attrs import frozen

from hango import ToolContext, ToolResult, ToolSpec, error_result
from hango.middleware import (
    EDIT_MODES,
    MemoryConflict,
    MemoryEdit,
    MemoryEntry,
    Provenance,
    replace_lone_surrogates,
    run_memory,
    search_entries,
)

Scope = Literal["session", "agent"]
SCOPES: Final[tuple[Scope, ...]] = ("session", "agent")
KEY_SCHEMA: Final[dict[str, Any]] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "description": "The entry's key: a short name for what it is about (user-preferences).",
}
SCOPE_SCHEMA: Final[dict[str, Any]] = {
    "type": "string",
    "enum": list(SCOPES),
    "description": "session: this conversation's entries; agent: the entries every session "
    "of this agent sees (default: session)",
}
#: The longest entry a write may leave, by default.
DEFAULT_MAX_ENTRY_CHARS: Final = 4000
#: Most search hits returned.
MAX_HITS: Final = 20


@frozen
class Policy:
    """What the model may do: ``shared_writes`` (write and delete agent-wide entries) and
    ``max_entry_chars`` (the longest entry a write may leave)."""

    shared_writes: bool = False
    max_entry_chars: int = DEFAULT_MAX_ENTRY_CHARS


def describe(entry: MemoryEntry) -> str:
    scope = "agent-wide" if entry.session_id is None else "this session's"
    return (
        f"Memory entry {entry.key!r} ({scope}, version {entry.version}, last written by "
        f"{entry.provenance.describe()})"
    )


class _Tool:
    def __init__(self, owner: MemoryTools) -> None:
        self.owner = owner

    def session_of(self, ctx: ToolContext, scope: object) -> Any:
        return None if scope == "agent" else ctx.state.session_id


class ReadMemory(_Tool):
    spec = ToolSpec(
        "read_memory",
        "Read one memory entry whole, with its version (write_memory and delete_memory need "
        "it). Without a scope, this session's entry of that key is read, else the agent-wide one.",
        {
            "type": "object",
            "properties": {"key": KEY_SCHEMA, "scope": SCOPE_SCHEMA},
            "required": ["key"],
            "additionalProperties": False,
        },
    )

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        memory = run_memory()
        key, scope = input["key"], input.get("scope")
        sessions = [self.session_of(ctx, scope)] if scope else [ctx.state.session_id, None]
        for session in sessions:
            entry = await memory.store.get_memory(ctx.state.tenant_id, memory.agent, key, session)
            if entry is not None:
                return ToolResult(f"{describe(entry)}:\n{entry.content}")
        return error_result(
            "No memory entry %r%s. To create it: write_memory with expected_version 0.",
            key,
            f" ({scope})" if scope else "",
        )


class WriteMemory(_Tool):
    spec = ToolSpec(
        "write_memory",
        "Save a note in memory for later runs. mode append adds content on a new line "
        "(creating the entry if needed); mode set replaces the whole entry and mode replace "
        "replaces the one occurrence of old with content: both need expected_version, the "
        "version read_memory showed (0 to create a new entry). A write over a newer version "
        "is refused: read the entry again. Keep entries short and factual; never store "
        "secrets.",
        {
            "type": "object",
            "properties": {
                "key": KEY_SCHEMA,
                "content": {"type": "string", "description": "The text to write."},
                "mode": {"type": "string", "enum": list(EDIT_MODES), "default": "append"},
                "old": {
                    "type": "string",
                    "description": "mode replace: the fragment to replace; it must occur "
                    "exactly once in the entry",
                },
                "expected_version": {"type": "integer", "minimum": 0},
                "scope": SCOPE_SCHEMA,
            },
            "required": ["key", "content"],
            "additionalProperties": False,
        },
    )

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        policy = self.owner.policy
        key, content = input["key"], replace_lone_surrogates(input["content"])
        mode, scope = input.get("mode", "append"), input.get("scope", "session")
        expected = input.get("expected_version")
        if scope == "agent" and not policy.shared_writes:
            return error_result(
                "write_memory refused: this agent may write only its session's entries "
                "(scope session); agent-wide memory is written by people (hango memory edit) "
                "unless [options.memory] shared_writes = true"
            )
        if mode in ("set", "replace") and expected is None:
            return error_result(
                "write_memory refused: mode %s needs expected_version (the version read_memory "
                "showed; 0 for a new entry), so a newer write is never overwritten unseen",
                mode,
            )
        if mode == "replace" and not input.get("old"):
            return error_result("write_memory refused: mode replace needs old, the fragment")
        memory = run_memory()
        try:
            written = await memory.store.write_memory(
                ctx.state.tenant_id,
                memory.agent,
                key,
                MemoryEdit(mode, content, input.get("old")),
                provenance=_provenance(ctx),
                session_id=self.session_of(ctx, scope),
                expected_version=expected,
                max_chars=policy.max_entry_chars,
            )
        except MemoryConflict as exc:
            return error_result("write_memory conflict, nothing written: %s", exc)
        entry = written.entry
        assert entry is not None  # a write leaves a live entry
        again = (
            " (this call's write was already stored; not written again)" if written.replayed else ""
        )
        return ToolResult(f"Saved: {describe(entry)}{again}.")


class DeleteMemory(_Tool):
    spec = ToolSpec(
        "delete_memory",
        "Delete a memory entry that is wrong or no longer useful. Needs expected_version, "
        "the version read_memory showed. Its versions are kept for people to review.",
        {
            "type": "object",
            "properties": {
                "key": KEY_SCHEMA,
                "expected_version": {"type": "integer", "minimum": 1},
                "scope": SCOPE_SCHEMA,
            },
            "required": ["key", "expected_version"],
            "additionalProperties": False,
        },
    )

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        key, scope = input["key"], input.get("scope", "session")
        if scope == "agent" and not self.owner.policy.shared_writes:
            return error_result(
                "delete_memory refused: this agent may delete only its session's entries "
                "(scope session) unless [options.memory] shared_writes = true"
            )
        memory = run_memory()
        try:
            written = await memory.store.delete_memory(
                ctx.state.tenant_id,
                memory.agent,
                key,
                provenance=_provenance(ctx),
                session_id=self.session_of(ctx, scope),
                expected_version=input["expected_version"],
            )
        except MemoryConflict as exc:
            return error_result("delete_memory conflict, nothing deleted: %s", exc)
        again = " (already deleted by this call)" if written.replayed else ""
        return ToolResult(f"Deleted memory entry {key!r}{again}.")


class SearchMemory(_Tool):
    spec = ToolSpec(
        "search_memory",
        "Search this agent's memory entries (agent-wide and this session's) for entries "
        "holding every word of the query; returns keys, versions and the text.",
        {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1}},
            "required": ["query"],
            "additionalProperties": False,
        },
    )

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        memory = run_memory()
        entries = await memory.store.list_memory(
            ctx.state.tenant_id, memory.agent, ctx.state.session_id
        )
        hits = search_entries(entries, input["query"])
        if not hits:
            return ToolResult(f"No memory entry holds every word of {input['query']!r}.")
        lines = [f"{len(hits)} entries match{' (first 20)' if len(hits) > MAX_HITS else ''}:"]
        lines += [f"{describe(e)}:\n{e.content}" for e in hits[:MAX_HITS]]
        return ToolResult("\n\n".join(lines))


def _provenance(ctx: ToolContext) -> Provenance:
    return Provenance(
        "tool", dt.datetime.now(dt.UTC), run_id=ctx.state.run_id, tool_call_id=ctx.call.id
    )


class MemoryTools:
    """The four tools of one memory middleware, sharing its ``policy``."""

    def __init__(self, middleware: str, policy: Policy) -> None:
        self.middleware = middleware
        self.policy = policy
        self.read = ReadMemory(self)
        self.write = WriteMemory(self)
        self.delete = DeleteMemory(self)
        self.search = SearchMemory(self)
        self.all = (self.read, self.write, self.delete, self.search)

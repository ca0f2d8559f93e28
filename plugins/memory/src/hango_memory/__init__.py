"""hango-memory: what an agent remembers between runs (slot ``memory``, after ``prompt_cache``).

Installed through the ``hango`` entry point ``memory``. Settings: the agent file's
``[options.memory]`` table::

    [options.memory]
    paths = ["AGENTS.md"]     # memory files, relative to the agent file, read on every call
    max_chars = 8000          # the block's budget in characters; HANGO_MEMORY_MAX_CHARS
    max_entries = 50          # entries shown at most; HANGO_MEMORY_MAX_ENTRIES
    shared_writes = false     # may the model write agent-wide entries (every session's)?
    max_entry_chars = 4000    # the longest entry a write may leave

An agent has memory when its agent file has an ``[options.memory]`` table (empty is enough):
memory keeps data across sessions and costs prompt tokens, so it is asked for, not assumed.
Without one the middleware stays in its slot as a pass-through.

Entries live in hango's database (``hango.middleware.run_memory``); ``hango memory
list|show|edit|delete`` (``hango_memory.cli``) lets people read and correct them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import click

from hango.middleware import StackConfig, hookimpl, int_setting
from hango_memory.cli import memory
from hango_memory.middleware import (
    HEADING,
    MemoryFile,
    MemoryMiddleware,
    MemorySeen,
    render_block,
)
from hango_memory.tools import DEFAULT_MAX_ENTRY_CHARS, MemoryTools, Policy

__all__ = [
    "HEADING",
    "OPTIONS_SCHEMA",
    "MemoryFile",
    "MemoryMiddleware",
    "MemorySeen",
    "MemoryTools",
    "Policy",
    "hango_cli_commands",
    "hango_middleware",
    "hango_options_schema",
    "render_block",
]

DEFAULT_MAX_CHARS: Final = 8000
DEFAULT_MAX_ENTRIES: Final = 50

#: JSON Schema of ``[options.memory]``.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "paths": {
            "description": "memory files (AGENTS.md style), relative to the agent file",
            "type": "array",
            "items": {"type": "string", "minLength": 1},
        },
        "max_chars": {"type": "integer", "minimum": 200},
        "max_entries": {"type": "integer", "minimum": 1},
        "shared_writes": {"type": "boolean"},
        "max_entry_chars": {"type": "integer", "minimum": 1},
    },
    "additionalProperties": False,
}


@hookimpl
def hango_options_schema() -> dict[str, Any]:
    return {MemoryMiddleware.name: OPTIONS_SCHEMA}


@hookimpl
def hango_cli_commands() -> list[click.Command]:
    return [memory]


@hookimpl
def hango_middleware(config: StackConfig) -> MemoryMiddleware:
    """The memory middleware for the agent's table. Raises ``ConfigError`` naming
    ``HANGO_MEMORY_MAX_CHARS`` / ``HANGO_MEMORY_MAX_ENTRIES`` when one is not an integer of
    at least 200 / 1."""
    table = config.options(MemoryMiddleware.name)
    base = Path(config.base_dir) if config.base_dir is not None else None
    files = []
    for written in table.get("paths", ()):
        path = Path(written).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        files.append(MemoryFile(written, path))
    max_chars = table.get("max_chars") or int_setting(
        config.settings, "HANGO_MEMORY_MAX_CHARS", DEFAULT_MAX_CHARS, minimum=200
    )
    max_entries = table.get("max_entries") or int_setting(
        config.settings, "HANGO_MEMORY_MAX_ENTRIES", DEFAULT_MAX_ENTRIES
    )
    policy = Policy(
        shared_writes=table.get("shared_writes", False),
        max_entry_chars=table.get("max_entry_chars", DEFAULT_MAX_ENTRY_CHARS),
    )
    return MemoryMiddleware(
        files,
        max_chars=max_chars,
        max_entries=max_entries,
        policy=policy,
        active=MemoryMiddleware.name in config.middleware_options,
    )

"""hango-filesystem: the workspace (slot ``filesystem`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``filesystem``. Settings are the agent file's
``[options.filesystem]`` table (``OPTIONS_SCHEMA``)::

    [options.filesystem]
    backend = "local"                     # or "store" (the default): hango's database
    root = "project"                      # the local root, relative to the agent file
    routes = { "/memories/" = "store" }   # prefix -> backend
    permissions = [{ paths = ["src/**"], operations = ["write"], mode = "interrupt" }]
    large_result_tokens = 20000           # 0: never offload
    large_result_exclude = ["fetch_page"]
    max_results_kept = 50

``resolve_path(root, path)`` is the workspace's one path resolver, for other plugins that
read files under a root (see the README).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from hango.middleware import ConfigError, StackConfig, hookimpl
from hango_filesystem.backends import Backend, LocalBackend, StoreBackend, Workspace
from hango_filesystem.middleware import RESULTS_DIR, FilesystemMiddleware
from hango_filesystem.paths import PathRefused, normalize, resolve_path
from hango_filesystem.permissions import RULE_SCHEMA, parse_rules
from hango_filesystem.tools import Limits

__all__ = [
    "OPTIONS_SCHEMA",
    "RESULTS_DIR",
    "FilesystemMiddleware",
    "Limits",
    "LocalBackend",
    "PathRefused",
    "StoreBackend",
    "Workspace",
    "hango_middleware",
    "hango_options_schema",
    "normalize",
    "resolve_path",
]

_BACKENDS: Final = ["local", "store"]

#: JSON Schema of the ``[options.filesystem]`` table.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "backend": {"enum": _BACKENDS},
        "root": {"type": "string", "minLength": 1},
        "routes": {"type": "object", "additionalProperties": {"enum": _BACKENDS}},
        "permissions": {"type": "array", "items": RULE_SCHEMA},
        "large_result_tokens": {"type": "integer", "minimum": 0},
        "large_result_exclude": {"type": "array", "items": {"type": "string"}},
        "max_results_kept": {"type": "integer", "minimum": 1},
        "max_files": {"type": "integer", "minimum": 1},
        "max_file_bytes": {"type": "integer", "minimum": 1},
        "read_chars": {"type": "integer", "minimum": 1000},
        "max_entries": {"type": "integer", "minimum": 1},
    },
    "additionalProperties": False,
}


@hookimpl
def hango_options_schema() -> dict[str, Mapping[str, Any]]:
    """The schema of ``[options.filesystem]``."""
    return {FilesystemMiddleware.name: OPTIONS_SCHEMA}


@hookimpl
def hango_middleware(config: StackConfig) -> FilesystemMiddleware:
    """The workspace middleware for the agent's ``[options.filesystem]`` table. Without one
    (an empty table is enough: the ``store`` backend with defaults) it is inactive: no
    tools, no prompt block, every call passed through. File tools reach disk or the
    database, so an agent never gets them unasked, and an agent's own ``read_file`` or
    ``grep`` keeps its name. (It is still in the stack, so every process and worker sees the
    plugin as installed.)

    Raises ``ConfigError`` naming the agent and the key for a ``local`` backend without a
    ``root``, a root that is not a folder, or a malformed route or rule."""
    name = FilesystemMiddleware.name
    if name not in config.middleware_options:
        return FilesystemMiddleware(None)
    source = f"{config.source}: [options.{name}]"
    options = config.options(name)
    defaults = Limits()
    limits = Limits(
        read_chars=options.get("read_chars", defaults.read_chars),
        max_entries=options.get("max_entries", defaults.max_entries),
        max_file_bytes=options.get("max_file_bytes", defaults.max_file_bytes),
    )
    store = StoreBackend(
        max_file_bytes=limits.max_file_bytes, max_files=options.get("max_files", 10_000)
    )
    local: LocalBackend | None = None

    def backend(kind: str, key: str) -> Backend:
        nonlocal local
        if kind == "store":
            return store
        if local is None:
            if "root" not in options:
                raise ConfigError(f"{source}: {key} = 'local' needs root (a folder on disk)")
            root = Path(options["root"]).expanduser()
            if not root.is_absolute() and config.base_dir is not None:
                root = Path(config.base_dir) / root
            try:
                local = LocalBackend(root, max_file_bytes=limits.max_file_bytes)
            except PathRefused:
                raise ConfigError(f"{source}: root = {str(root)!r} is not a folder") from None
        return local

    routes: dict[str, Backend] = {RESULTS_DIR: store}
    for prefix, kind in options.get("routes", {}).items():
        try:
            where = normalize(prefix)
        except PathRefused as exc:
            raise ConfigError(f"{source}: routes: {exc}") from None
        if where == "/":
            raise ConfigError(f"{source}: routes: {prefix!r} is the root; set backend instead")
        routes[where] = backend(kind, f"routes.{prefix!r}")
    return FilesystemMiddleware(
        Workspace(backend(options.get("backend", "store"), "backend"), routes),
        rules=parse_rules(options.get("permissions", []), source=source),
        limits=limits,
        large_result_tokens=options.get("large_result_tokens", 20_000),
        large_result_exclude=options.get("large_result_exclude", ()),
        max_results_kept=options.get("max_results_kept", 50),
    )

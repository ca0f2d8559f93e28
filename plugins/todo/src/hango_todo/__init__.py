"""hango-todo: planning with ``write_todos`` (slot ``todo`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``todo``; ``hango_middleware`` provides one
``TodoMiddleware`` for every run whose agent may call ``write_todos``.
"""

from __future__ import annotations

from hango.middleware import StackConfig, hookimpl
from hango_todo.middleware import TodoMiddleware, render_plan
from hango_todo.write_todos import TOOL_NAME, WRITE_TODOS, TodoError, WriteTodos, parse_todos

__all__ = [
    "WRITE_TODOS",
    "TodoError",
    "TodoMiddleware",
    "WriteTodos",
    "hango_middleware",
    "parse_todos",
    "render_plan",
]


@hookimpl
def hango_middleware(config: StackConfig) -> TodoMiddleware | None:
    """The todo middleware, or None when the agent's allowlist leaves ``write_todos`` out (a
    plan block for a tool the model may not call would only cost prompt tokens)."""
    allowlist = config.tool_allowlist
    if allowlist is not None and TOOL_NAME not in allowlist:
        return None
    return TodoMiddleware()

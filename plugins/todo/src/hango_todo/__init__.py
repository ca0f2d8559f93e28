"""hango-todo: planning with ``write_todos`` (slot ``todo`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``todo``; ``hango_middleware`` provides one
``TodoMiddleware`` for every run.
"""

from __future__ import annotations

import hango

from hango_todo.middleware import TodoMiddleware, render_plan
from hango_todo.write_todos import WRITE_TODOS, TodoError, WriteTodos, parse_todos

__all__ = [
    "WRITE_TODOS",
    "TodoError",
    "TodoMiddleware",
    "WriteTodos",
    "hango_middleware",
    "parse_todos",
    "render_plan",
]


@hango.hookimpl
def hango_middleware(config: hango.StackConfig) -> TodoMiddleware:
    """The todo middleware; it needs no settings."""
    return TodoMiddleware()

"""``TodoMiddleware`` (slot ``todo``): planning with ``write_todos``.

A ToolProvider (the ``write_todos`` tool) and a PromptContributor (one system block with the
current plan, assembled on every model call, so the plan survives any later rewriting of the
history). The plan itself is ``State.todos``, the one typed cross-middleware field, saved in
``runs.state_json`` with the rest of the run's state: a resumed run keeps its plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from hango import TextBlock, Tool
from hango.middleware import State, Todo
from hango_todo.write_todos import TOOL_NAME, WRITE_TODOS, counts

PLAN_HEADING: Final = "Current plan"


def render_plan(todos: Sequence[Todo]) -> str:
    """The plan block's text: a heading with the progress (``Current plan (write_todos), 1 of
    3 completed:``), then one numbered line per todo (``2. [in_progress] Read the limits``);
    ``Current plan (write_todos): empty.`` when there is none."""
    if not todos:
        return f"{PLAN_HEADING} ({TOOL_NAME}): empty."
    done = counts(todos)["completed"]
    lines = [f"{PLAN_HEADING} ({TOOL_NAME}), {done} of {len(todos)} completed:"]
    lines += [f"{i}. [{t.status}] {t.content}" for i, t in enumerate(todos, 1)]
    return "\n".join(lines)


class TodoMiddleware:
    """Provides ``write_todos`` and contributes the plan block."""

    name = "todo"

    def provide_tools(self, state: State) -> Sequence[Tool]:
        return (WRITE_TODOS,)

    def system_blocks(self, state: State) -> Sequence[TextBlock]:
        return (TextBlock(render_plan(state.todos)),)

"""The ``write_todos`` tool: the model replaces its whole plan in one call.

The description carries the planning policy (when to plan, one step in progress, completed
means done, the answer is text). The arguments are checked here, not only by the JSON Schema,
because the schema cannot say "at most one in_progress" or "content is not blank"; a rejected
call leaves ``State.todos`` as it was. The result is a short confirmation with counts: the plan
itself reaches the model through the system prompt, never through a message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Final, get_args

from hango import ToolContext, ToolResult, ToolSpec, error_result
from hango.middleware import State, Todo, TodoStatus, replace_lone_surrogates

TOOL_NAME: Final = "write_todos"
STATUSES: Final[tuple[TodoStatus, ...]] = get_args(TodoStatus)
#: Most todos in one plan: the plan is in every system prompt and in every state save.
MAX_TODOS: Final = 100
#: Most characters in one todo's content: a step, not a document.
MAX_CONTENT_CHARS: Final = 2000

DESCRIPTION: Final = """\
Write your plan as a todo list. Each call replaces the whole list, so always send every item, \
with its current status.

When to use it: for work that takes several distinct steps (three or more actions, several \
files or tools, or a request that lists several things to do). Do not use it for a trivial or \
one-step request, or for plain conversation: just answer.

How to keep it:
- Write the plan before you start. Mark a step in_progress BEFORE you begin it and completed \
as soon as it is done; do not save up several steps to mark at once.
- While work remains, exactly one step is in_progress.
- Mark a step completed only when it is fully done. If it failed, is partial or is blocked, \
leave it in_progress (or pending) and add a step for what is still needed.
- Drop steps that turned out to be unnecessary and add the ones you discover.

Completing the list is not an answer: the user sees your text reply, not the list. When every \
step is done, give the answer as text.

The current list is always shown to you in the system prompt under "Current plan"."""

INPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": (
                "The complete, updated todo list, in the order the steps are done "
                f"(at most {MAX_TODOS})."
            ),
            "items": {
                "type": "object",
                "properties": {
                    "content": {
                        "type": "string",
                        "description": (
                            "The step, in the imperative: what will be done "
                            f"(at most {MAX_CONTENT_CHARS} characters)."
                        ),
                    },
                    "status": {"type": "string", "enum": list(STATUSES)},
                },
                "required": ["content", "status"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["todos"],
    "additionalProperties": False,
}


class TodoError(ValueError):
    """A write_todos call is invalid; the message says which item and what is wrong."""


def parse_todos(raw: object) -> list[Todo]:
    """The ``todos`` argument as a list of ``Todo``.

    Raises ``TodoError`` for a non-list, more than ``MAX_TODOS`` items, an item that is not
    ``{content, status}``, blank content, content longer than ``MAX_CONTENT_CHARS`` or holding
    a character no store can keep (NUL: PostgreSQL's jsonb refuses it; a lone UTF-16
    surrogate: not Unicode text), an unknown status, or more than one ``in_progress`` item.
    """
    if not isinstance(raw, list):
        raise TodoError("todos must be a list of {content, status} objects")
    if len(raw) > MAX_TODOS:
        raise TodoError(
            f"the plan has {len(raw)} todos; at most {MAX_TODOS} are kept, so merge steps"
        )
    todos: list[Todo] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != {"content", "status"}:
            raise TodoError(f"todos[{i}] must be an object with exactly content and status")
        content, status = item["content"], item["status"]
        if not isinstance(content, str) or not content.strip():
            raise TodoError(f"todos[{i}].content is empty; every todo says what the step is")
        if len(content) > MAX_CONTENT_CHARS:
            raise TodoError(
                f"todos[{i}].content has {len(content)} characters; at most "
                f"{MAX_CONTENT_CHARS} (a step, not a document)"
            )
        if (problem := _unstorable(content)) is not None:
            raise TodoError(f"todos[{i}].content holds {problem}, which cannot be stored")
        if status not in STATUSES:
            raise TodoError(f"todos[{i}].status is {status!r}; use one of {', '.join(STATUSES)}")
        todos.append(Todo(content, status))
    active = [i for i, t in enumerate(todos) if t.status == "in_progress"]
    if len(active) > 1:
        where = ", ".join(f"todos[{i}]" for i in active)
        raise TodoError(
            f"{len(active)} todos are in_progress ({where}); exactly one step is in progress "
            "at a time"
        )
    return todos


def _unstorable(text: str) -> str | None:
    """What in ``text`` no store can keep, or ``None``."""
    if "\x00" in text:
        return "a NUL character (\\u0000)"
    if replace_lone_surrogates(text) != text:
        return "a lone UTF-16 surrogate"
    return None


def counts(todos: Sequence[Todo]) -> dict[TodoStatus, int]:
    """Number of todos per status, every status present (0 when none)."""
    found = Counter(t.status for t in todos)
    return {status: found[status] for status in STATUSES}


def summary(todos: Sequence[Todo]) -> str:
    """``"4 todos: 1 completed, 1 in_progress, 2 pending"``."""
    by_status = counts(todos)
    noun = "todo" if len(todos) == 1 else "todos"
    parts = ", ".join(f"{by_status[s]} {s}" for s in reversed(STATUSES))
    return f"{len(todos)} {noun}: {parts}"


def calls_in_batch(state: State) -> int:
    """How many write_todos calls the batch being executed holds.

    A batch is the tool calls of the last assistant message. Reading them from history (not
    from a counter) gives the same answer when a half-finished batch is resumed in a new
    process.
    """
    for message in reversed(state.messages):
        if message.role == "assistant":
            return sum(1 for use in message.tool_uses if use.name == TOOL_NAME)
    return 0


class WriteTodos:
    """The ``write_todos`` tool. Stateless: the plan lives in ``State.todos``."""

    spec = ToolSpec(TOOL_NAME, DESCRIPTION, INPUT_SCHEMA)

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Replace ``ctx.state.todos`` with a NEW list.

        The loop sees the new list object and, for any writer of the plan, emits
        ``TodosUpdated`` and records the span event ``agent.todos_updated`` with the counts by
        status (``telemetry.record_todos``); recording it here as well would count every
        update twice.

        Returns an error result, leaving the plan unchanged, for invalid todos or when the
        batch holds more than one write_todos call (then every one of them fails: which of
        two plans the model meant is not ours to guess).
        """
        n = calls_in_batch(ctx.state)
        if n > 1:
            return error_result(
                "write_todos was called %d times in one turn; the plan is replaced once per "
                "turn, so none of these calls was applied. Send the whole list in one call.",
                n,
            )
        try:
            todos = parse_todos(input.get("todos"))
        except TodoError as exc:
            return error_result("write_todos rejected, the plan is unchanged: %s", exc)
        ctx.state.todos = todos
        return ToolResult(f"Plan saved ({summary(todos)}).")


WRITE_TODOS: Final = WriteTodos()

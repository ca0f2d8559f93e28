"""Hypothesis properties of the repeat-call and todo plugins."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import anyio
from hypothesis import given
from hypothesis import strategies as st

from hango import Message, ToolContext, ToolResult, ToolUseBlock
from hango.middleware import Todo, ToolCallRequest
from hango.testing import new_state
from hango_repeat import RepeatCallMiddleware
from hango_todo import WRITE_TODOS

arguments = st.dictionaries(
    st.sampled_from(["path", "pattern", "limit"]),
    st.one_of(st.integers(0, 2), st.sampled_from(["a", "b"]), st.none()),
    max_size=3,
)
calls = st.lists(st.tuples(st.sampled_from(["read_file", "search"]), arguments), max_size=25)


@given(calls, st.integers(2, 4), st.randoms(use_true_random=False))
def test_a_call_is_blocked_exactly_from_the_nth_occurrence_of_its_key(
    sequence: list[tuple[str, dict[str, Any]]], threshold: int, rng: random.Random
) -> None:
    """The oracle counts (name, set of argument items), which knows nothing of JSON or hashes;
    each call's keys are sent in a random order."""

    async def main() -> list[tuple[bool, bool]]:
        mw, state = RepeatCallMiddleware(threshold), new_state()
        outcomes = []
        for i, (name, args) in enumerate(sequence):
            items = list(args.items())
            rng.shuffle(items)
            ran = False

            async def execute(req: ToolCallRequest) -> ToolResult:
                nonlocal ran
                ran = True
                return ToolResult("ok")

            req = ToolCallRequest(ToolUseBlock(f"c{i}", name, dict(items)), None, state)
            result = await mw.wrap_tool_call(req, execute)
            outcomes.append((result.is_error, ran))
        return outcomes

    seen: Counter[tuple[str, frozenset[tuple[str, Any]]]] = Counter()
    expected = []
    for name, args in sequence:
        seen[name, frozenset(args.items())] += 1
        blocked = seen[name, frozenset(args.items())] >= threshold
        expected.append((blocked, not blocked))
    assert anyio.run(main) == expected


# -- todo ------------------------------------------------------------------------------------

STATUSES = ("pending", "in_progress", "completed")
# Any storable text: write_todos refuses NUL and lone surrogates (no store can keep them).
storable = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
todo = st.fixed_dictionaries(
    {
        "content": st.text(storable, min_size=1).filter(str.strip),
        "status": st.sampled_from(STATUSES),
    }
)
valid_lists = st.lists(todo, max_size=5).filter(
    lambda todos: sum(t["status"] == "in_progress" for t in todos) <= 1
)
invalid_lists = st.one_of(
    st.lists(todo, max_size=3).map(lambda t: [*t, {"content": "x", "status": "done"}]),
    st.lists(todo, max_size=3).map(lambda t: [{"content": " ", "status": "pending"}, *t]),
    st.just([{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]),
)
writes = st.lists(
    st.one_of(valid_lists.map(lambda t: (True, t)), invalid_lists.map(lambda t: (False, t))),
    max_size=10,
)


@given(writes)
def test_the_final_plan_is_the_last_valid_list_written(
    sequence: list[tuple[bool, list[dict[str, str]]]],
) -> None:
    """One write_todos call per batch; invalid lists in between change nothing."""

    async def main() -> list[Todo]:
        state = new_state()
        for i, (valid, todos) in enumerate(sequence):
            call = ToolUseBlock(f"c{i}", "write_todos", {"todos": todos})
            state.messages += [Message.user("next"), Message("assistant", (call,))]
            result = await WRITE_TODOS.call(call.input, ToolContext(state, call))
            assert result.is_error is not valid
        return state.todos

    last_valid = next((todos for valid, todos in reversed(sequence) if valid), [])
    assert anyio.run(main) == [Todo(t["content"], t["status"]) for t in last_valid]
